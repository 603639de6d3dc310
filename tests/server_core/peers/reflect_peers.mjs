// Server reflection and gRPC health of the server core, checked by peers
// nobody here wrote, against examples/greet_server (which serves both):
//
//  - buf curl (npm @bufbuild/buf): --list-services and --list-methods
//    through reflection, over Connect, gRPC and gRPC-Web (HTTP/2) and
//    Connect over HTTP/1.1; calls whose schema comes from reflection only
//    (Greet, GreetMany, grpc.health.v1.Health/Check and List); an unknown
//    method named as such;
//  - grpc-js (@grpc/grpc-js with the .proto files that @grpc/reflection
//    and grpc-health-check ship): ServerReflectionInfo v1 and v1alpha
//    (list_services, file_containing_symbol decoded as a
//    FileDescriptorProto by protobufjs, file_by_filename, not_found
//    errors), Health Check (SERVING, NOT_FOUND), List, and Watch through
//    the server's graceful shutdown (SIGTERM): NOT_SERVING, then
//    UNAVAILABLE.
//
//   node reflect_peers.mjs GREET_SERVER
//
// Exits 77 (skipped) when a peer is not installed (npm ci in tests/).
import { spawn, execFile } from "node:child_process";
import { createRequire } from "node:module";
import { once } from "node:events";
import assert from "node:assert/strict";
import path from "node:path";

const require = createRequire(import.meta.url);
const SKIP = 77;

function need(name) {
  try {
    return require(name);
  } catch (e) {
    console.log(`SKIP: ${name} is not installed (npm ci in tests/): ${e.message}`);
    process.exit(SKIP);
  }
}

const server = process.argv[2];
if (!server) {
  console.error("usage: node reflect_peers.mjs GREET_SERVER");
  process.exit(2);
}
const grpc = need("@grpc/grpc-js");
const loader = need("@grpc/proto-loader");
const descriptor = need("protobufjs/ext/descriptor");
let bufBin;
try {
  bufBin = path.join(path.dirname(require.resolve("@bufbuild/buf/package.json")), "bin", "buf");
} catch (e) {
  console.log(`SKIP: @bufbuild/buf is not installed (npm ci in tests/)`);
  process.exit(SKIP);
}
const reflDir = path.join(path.dirname(require.resolve("@grpc/reflection/package.json")), "build", "proto");
const healthDir = path.join(path.dirname(require.resolve("grpc-health-check/package.json")), "proto");

// ---- The server ------------------------------------------------------------

const child = spawn(server, ["127.0.0.1:0"], { stdio: ["ignore", "pipe", "inherit"] });
let out = "";
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("greet_server said no port in 30 s")), 30000);
  child.stdout.on("data", (d) => {
    out += d;
    const m = /listening on port (\d+)/.exec(out);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  child.on("exit", (code) => reject(new Error(`greet_server exited (${code})`)));
});
const base = `http://127.0.0.1:${port}`;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}\n  ${String(e.stack || e).replace(/\n/g, "\n  ")}`);
  }
}

// ---- buf curl --------------------------------------------------------------

function buf(args) {
  return new Promise((resolve) => {
    execFile(bufBin, ["curl", ...args], { timeout: 60000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr });
    });
  });
}

const transports = [
  ["connect", ["--http2-prior-knowledge", "--protocol", "connect"]],
  ["grpc", ["--http2-prior-knowledge", "--protocol", "grpc"]],
  ["grpcweb", ["--http2-prior-knowledge", "--protocol", "grpcweb"]],
  ["connect/http1.1", ["--protocol", "connect"]],
];
for (const [name, flags] of transports) {
  await check(`buf curl ${name}: --list-services`, async () => {
    const r = await buf([...flags, "--list-services", base]);
    assert.equal(r.code, 0, r.stderr);
    const names = r.stdout.trim().split("\n");
    for (const want of ["greet.v1.Greeter", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"]) {
      assert.ok(names.includes(want), `${want} missing in ${names}`);
    }
  });
  await check(`buf curl ${name}: --list-methods`, async () => {
    const r = await buf([...flags, "--list-methods", base]);
    assert.equal(r.code, 0, r.stderr);
    const names = r.stdout.trim().split("\n");
    for (const want of ["greet.v1.Greeter/Greet", "greet.v1.Greeter/GreetMany", "grpc.health.v1.Health/Watch"]) {
      assert.ok(names.includes(want), `${want} missing in ${names}`);
    }
  });
  await check(`buf curl ${name}: Greet with the schema from reflection`, async () => {
    const r = await buf([...flags, "-d", '{"name":"peer"}', `${base}/greet.v1.Greeter/Greet`]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(JSON.parse(r.stdout).greeting, /peer/);
  });
  await check(`buf curl ${name}: GreetMany`, async () => {
    const r = await buf([...flags, "-d", '{"name":"peer"}', `${base}/greet.v1.Greeter/GreetMany`]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok((r.stdout.match(/"greeting"/g) || []).length >= 2, r.stdout);
  });
  await check(`buf curl ${name}: grpc.health.v1.Health/Check and List`, async () => {
    let r = await buf([...flags, "-d", '{"service":"greet.v1.Greeter"}', `${base}/grpc.health.v1.Health/Check`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).status, "SERVING");
    r = await buf([...flags, "-d", "{}", `${base}/grpc.health.v1.Health/List`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).statuses["greet.v1.Greeter"].status, "SERVING");
  });
  await check(`buf curl ${name}: an unknown method`, async () => {
    const r = await buf([...flags, "-d", "{}", `${base}/greet.v1.Greeter/Nope`]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Nope/);
  });
}

// ---- grpc-js ---------------------------------------------------------------

const opts = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };
const reflPkg = grpc.loadPackageDefinition(
  loader.loadSync(["grpc/reflection/v1/reflection.proto", "grpc/reflection/v1alpha/reflection.proto"], {
    ...opts,
    includeDirs: [reflDir],
  }),
);
const healthPkg = grpc.loadPackageDefinition(
  loader.loadSync("health/v1/health.proto", { ...opts, includeDirs: [healthDir] }),
);
const target = `127.0.0.1:${port}`;
const creds = grpc.credentials.createInsecure();

// Sends |reqs| on one ServerReflectionInfo stream; resolves its responses.
function reflect(Client, reqs) {
  const client = new Client(target, creds);
  return new Promise((resolve, reject) => {
    const got = [];
    const call = client.ServerReflectionInfo({ deadline: Date.now() + 30000 });
    call.on("data", (d) => got.push(d));
    call.on("error", (e) => {
      client.close();
      reject(e);
    });
    call.on("end", () => {
      client.close();
      resolve(got);
    });
    for (const r of reqs) call.write(r);
    call.end();
  });
}

for (const [ver, Client] of [
  ["v1", reflPkg.grpc.reflection.v1.ServerReflection],
  ["v1alpha", reflPkg.grpc.reflection.v1alpha.ServerReflection],
]) {
  await check(`grpc-js reflection ${ver}`, async () => {
    const got = await reflect(Client, [
      { list_services: "" },
      { file_containing_symbol: "greet.v1.Greeter.GreetMany" },
      { file_by_filename: "grpc/health/v1/health.proto" },
      { file_containing_symbol: "no.Such.Thing" },
      { file_by_filename: "nope.proto" },
    ]);
    assert.equal(got.length, 5);
    const names = got[0].list_services_response.service.map((s) => s.name);
    assert.ok(names.includes("greet.v1.Greeter"), names);
    assert.ok(names.includes("grpc.health.v1.Health"), names);
    const fd = descriptor.FileDescriptorProto.decode(got[1].file_descriptor_response.file_descriptor_proto[0]);
    assert.equal(fd.package, "greet.v1");
    const svc = fd.service.find((s) => s.name === "Greeter");
    assert.ok(svc, "no Greeter in the descriptor");
    assert.deepEqual(
      svc.method.map((m) => m.name),
      ["Greet", "GreetMany"],
    );
    const hf = descriptor.FileDescriptorProto.decode(got[2].file_descriptor_response.file_descriptor_proto[0]);
    assert.equal(hf.name, "grpc/health/v1/health.proto");
    assert.equal(got[3].error_response.error_code, grpc.status.NOT_FOUND);
    assert.equal(got[4].error_response.error_code, grpc.status.NOT_FOUND);
    assert.equal(got[3].original_request.file_containing_symbol, "no.Such.Thing");
  });
}

const health = new healthPkg.grpc.health.v1.Health(target, creds);
function unary(method, req) {
  return new Promise((resolve, reject) =>
    health[method](req, { deadline: Date.now() + 30000 }, (err, resp) => (err ? reject(err) : resolve(resp))),
  );
}
await check("grpc-js health Check", async () => {
  assert.equal((await unary("Check", { service: "greet.v1.Greeter" })).status, "SERVING");
  assert.equal((await unary("Check", { service: "" })).status, "SERVING");
  await assert.rejects(unary("Check", { service: "no.Such" }), (e) => e.code === grpc.status.NOT_FOUND);
});
if (healthPkg.grpc.health.v1.Health.service.List) {
  await check("grpc-js health List", async () => {
    const r = await unary("List", {});
    assert.equal(r.statuses["greet.v1.Greeter"].status, "SERVING");
  });
}
await check("grpc-js health Watch through the shutdown", async () => {
  const call = health.Watch({ service: "greet.v1.Greeter" });
  const seen = [];
  const ended = new Promise((resolve) => {
    call.on("error", (e) => resolve(e));
    call.on("end", () => resolve(null));
  });
  call.on("data", (d) => {
    seen.push(d.status);
    if (seen.length === 1) child.kill("SIGTERM"); // graceful shutdown
  });
  const err = await Promise.race([
    ended,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`no end in 30 s: ${seen}`)), 30000)),
  ]);
  assert.deepEqual(seen, ["SERVING", "NOT_SERVING"]);
  assert.ok(err, "the stream ended OK");
  assert.equal(err.code, grpc.status.UNAVAILABLE);
});
health.close();

const [code] = child.exitCode !== null ? [child.exitCode] : await once(child, "exit");
await check("greet_server exits 0 after the shutdown", async () => assert.equal(code, 0));
console.log(failed ? `${failed} failed` : "all passed");
process.exit(failed ? 1 : 0);
