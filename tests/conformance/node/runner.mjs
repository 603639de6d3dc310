// Runs conch's conformance client the way the conformance suite's runner
// does (client mode), against our ConformanceService server (server.mjs):
//
//   node runner.mjs --client PATH [--config FILE] [--suite FILE.json]...
//                   [--no-builtin] [--run REGEX] [--known-failing FILE]
//                   [--parallel N] [--timeout SEC] [--verbose]
//                   [--keep FILE] [--server-bin PATH]
//
// 1. The features in --config (default tools/conformance-client/config.yaml)
//    give the combinations to run; each suite is expanded over those it
//    applies to (lib.mjs), named as the suite's runner names them.
// 2. Servers are started as the cases need them: HTTP/2 (h2c) and
//    HTTP/1.1, each cleartext, TLS, and TLS requiring a client certificate, with throwaway certificates shaped as
//    the suite's (self-signed RSA leaf certificates; SANs 127.0.0.1, ::1,
//    localhost; the server's own certificate is what the client trusts).
// 3. Every request goes to one client process on its stdin, size-delimited;
//    stdin is closed; the responses are read from its stdout (in any order)
//    and checked; the client must answer each request exactly once and
//    exit 0.
// 4. Finally the client is started once more with a call that would take
//    10 s, and must die at once on SIGTERM.
//
// With --server-bin PATH the server is PATH instead of server.mjs: a server
// under test of the suite's server mode (tools/conformance-server), started
// through its stdin/stdout protocol (ServerCompatRequest in,
// ServerCompatResponse out).  It makes no FEEDBACK checks; the cases whose
// definition asks for a raw_response (reference server only) are left
// out.  Client-certificate cases ask it for client_tls_cert (the client
// certificate, self-signed, as the suite does).  Give it a --config
// both sides support (e.g. tools/conformance-server/config.yaml).
//
// Suites are suites.mjs (ours, run in CI) and any --suite file: a JSON
// TestSuite as the conformance repository's YAML files hold them (convert
// with any YAML-to-JSON tool).  --known-failing lists test name patterns,
// one per line ('*' = one path element, '**' = any number, '#' comments),
// whose failure is expected and reported but not counted.  --keep FILE
// writes the framed requests to FILE instead and keeps the servers up until
// interrupted, for running the client by hand (conformance-client < FILE).
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { create, fromBinary, toBinary, toJsonString } from
  "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";

import {
  ClientCompatRequestSchema,
  ClientCompatResponseSchema,
} from "./gen/conformance/v1/client_compat_pb.js";
import {
  Protocol,
  StreamType,
  TLSCredsSchema,
} from "./gen/conformance/v1/config_pb.js";
import {
  HeaderSchema,
  UnaryRequestSchema,
} from "./gen/conformance/v1/service_pb.js";
import {
  checkResult,
  configCases,
  expandSuites,
  expectedResult,
  parseFeatures,
  registry,
} from "./lib.mjs";
import { compatRequest, parseCompatResponse } from "./server_compat.mjs";
import { suites as builtinSuites } from "./suites.mjs";

const here = dirname(fileURLToPath(import.meta.url));
// Subject common names of the certificates, as the suite's.
const SERVER_CERT_NAME = "Conformance Server";
const CLIENT_CERT_NAME = "Conformance Client";

function usage(msg) {
  process.stderr.write(`runner.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node runner.mjs --client PATH [--config FILE] " +
      "[--suite FILE.json]... [--no-builtin] [--run REGEX] " +
      "[--known-failing FILE] [--parallel N] [--timeout SEC] [--verbose]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opt = {
    client: null,
    config: join(here, "../../../tools/conformance-client/config.yaml"),
    suites: [],
    builtin: true,
    run: null,
    knownFailing: null,
    parallel: null,
    timeout: 300,
    verbose: false,
    keep: null,
    serverBin: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--client": opt.client = value(); break;
      case "--config": opt.config = value(); break;
      case "--suite": opt.suites.push(value()); break;
      case "--no-builtin": opt.builtin = false; break;
      case "--run": opt.run = new RegExp(value()); break;
      case "--known-failing": opt.knownFailing = value(); break;
      case "--parallel": opt.parallel = value(); break;
      case "--timeout": opt.timeout = Number(value()); break;
      case "--verbose": case "-v": opt.verbose = true; break;
      case "--keep": opt.keep = value(); break;
      case "--server-bin": opt.serverBin = value(); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  if (opt.client === null) usage("--client is required");
  return opt;
}

// ---------------------------------------------------------------------------
// Known failures

function globToRegExp(pattern) {
  const escaped = pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`^${escaped.replace(/\*\*/g, "\u0000")
    .replace(/\*/g, "[^/]*").replace(/\u0000/g, ".*")}$`);
}

function loadKnownFailing(file) {
  if (file === null) return [];
  return readFileSync(file, "utf8").split("\n")
    .map((l) => l.replace(/#.*$/, "").trim())
    .filter((l) => l !== "")
    .map(globToRegExp);
}

// ---------------------------------------------------------------------------
// Certificates and servers

function makeCerts(dir) {
  const cnf = join(dir, "openssl.cnf");
  writeFileSync(cnf, [
    "[req]", "distinguished_name = dn", "prompt = no",
    "[dn]", "O = ConnectRPC",
    "[server]", "basicConstraints = critical, CA:FALSE",
    "keyUsage = critical, digitalSignature, keyEncipherment",
    "extendedKeyUsage = serverAuth",
    "subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost",
    "[client]", "basicConstraints = critical, CA:FALSE",
    "keyUsage = critical, digitalSignature, keyEncipherment",
    "extendedKeyUsage = clientAuth", "",
  ].join("\n"));
  const files = {};
  for (const [who, cn] of [["server", SERVER_CERT_NAME],
    ["client", CLIENT_CERT_NAME]]) {
    const cert = join(dir, `${who}.pem`);
    const key = join(dir, `${who}.key`);
    execFileSync("openssl", ["req", "-x509", "-config", cnf, "-extensions",
      who, "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
      "-days", "7", "-subj", `/O=ConnectRPC/CN=${cn}`],
    { stdio: ["ignore", "ignore", "pipe"] });
    // PKCS#1 ("RSA PRIVATE KEY"), as the suite hands keys out.
    execFileSync("openssl", ["rsa", "-in", key, "-traditional", "-out", key],
      { stdio: ["ignore", "ignore", "pipe"] });
    files[who] = { cert, key, certPem: readFileSync(cert),
      keyPem: readFileSync(key) };
  }
  return files;
}

// Starts server.mjs with |args|.  Its stdout carries "LISTENING <port>",
// then "FEEDBACK <json>" lines (problems it saw in requests), collected in
// |feedback|: test name -> [message].
function startServer(args, feedback) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(here, "server.mjs"), ...args],
      { stdio: ["pipe", "pipe", "inherit"] });
    const server = { child, port: 0, pemCert: null, closed: null };
    let out = "";
    let listening = false;
    server.closed = new Promise((done) => child.stdout.on("close", done));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error("server did not start in 20 s"));
    }, 20000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (!listening) reject(new Error(`server exited (${code}) early`));
    });
    child.stdout.on("data", (d) => {
      out += d;
      let nl;
      while ((nl = out.indexOf("\n")) >= 0) {
        const line = out.slice(0, nl);
        out = out.slice(nl + 1);
        const m = /^LISTENING (\d+)$/.exec(line);
        if (m !== null && !listening) {
          listening = true;
          clearTimeout(timer);
          server.port = Number(m[1]);
          resolve(server);
        } else if (line.startsWith("FEEDBACK ")) {
          const f = JSON.parse(line.slice(9));
          if (!feedback.has(f.test)) feedback.set(f.test, []);
          feedback.get(f.test).push(`server: ${f.message}`);
        }
      }
    });
  });
}

// Starts the server under test |path| (--server-bin) for HTTP/2 or HTTP/1.1
// (|httpVersion| 2 or 1), with TLS when |useTls| (its certificate comes
// back as server.pemCert), requiring client certificates issued by the PEM
// |clientTlsCert| when given.
function startServerBin(path, httpVersion = 2, useTls = false,
  clientTlsCert = null) {
  return new Promise((resolve, reject) => {
    const child = spawn(path, [], { stdio: ["pipe", "pipe", "inherit"] });
    const server = { child, port: 0, pemCert: null, closed: null };
    server.closed = new Promise((done) => child.stdout.on("close", done));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error("server under test did not answer in 20 s"));
    }, 20000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (server.port === 0) reject(new Error(`server exited (${code})`));
    });
    let buf = Buffer.alloc(0);
    child.stdout.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (server.port === 0 && buf.length >= 4 &&
        buf.length >= 4 + buf.readUInt32BE(0)) {
        clearTimeout(timer);
        const resp = parseCompatResponse(
          buf.subarray(4, 4 + buf.readUInt32BE(0)));
        server.port = resp.port;
        server.pemCert = resp.pemCert;
        resolve(server);
      }
    });
    // Then stdin is closed, as the suite's runner does: the server serves
    // on until SIGTERM.
    child.stdin.end(compatRequest({ protocol: 1, httpVersion, useTls,
      clientTlsCert }));
  });
}

// Stops |s| and resolves once its stdout (and so every FEEDBACK line) is
// read to the end.
function stopServer(s) {
  s.child.stdin.end();
  s.child.kill("SIGTERM");
  return s.closed;
}

// The headers the suite's runner adds to every request for its reference
// server (server_runner.go); server.mjs checks the request against them.
function addExpectHeaders(tc) {
  const r = tc.request;
  const h = (name, value) => ({ name, value: [value] });
  r.requestHeaders.push(
    create(HeaderSchema, h("x-test-case-name", tc.name)),
    create(HeaderSchema, h("x-expect-http-version", String(r.httpVersion))),
    create(HeaderSchema, h("x-expect-http-method",
      r.useGetHttpMethod ? "GET" : "POST")),
    create(HeaderSchema, h("x-expect-protocol", String(r.protocol))),
    create(HeaderSchema, h("x-expect-codec", String(r.codec))),
    create(HeaderSchema, h("x-expect-compression", String(r.compression))),
    create(HeaderSchema, h("x-expect-tls", String(tc.tls))),
  );
  if (tc.clientCerts) {
    r.requestHeaders.push(create(HeaderSchema,
      h("x-expect-client-cert", CLIENT_CERT_NAME)));
  }
}

// ---------------------------------------------------------------------------
// The client

function frame(bytes) {
  const b = Buffer.alloc(4 + bytes.length);
  b.writeUInt32BE(bytes.length, 0);
  Buffer.from(bytes).copy(b, 4);
  return b;
}

// Feeds |requests| to one client process and collects its answers.
// Resolves to {responses: Map(name -> [ClientCompatResponse...]), code,
// signal, timedOut, stderr}.
function runClient(opt, requests) {
  return new Promise((resolve) => {
    const args = opt.parallel !== null ? ["-p", opt.parallel] : [];
    const child = spawn(opt.client, args, { stdio: ["pipe", "pipe", "pipe"] });
    const responses = new Map();
    let buf = Buffer.alloc(0);
    let stderr = "";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, opt.timeout * 1000);
    child.stdout.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
        const len = buf.readUInt32BE(0);
        const msg = fromBinary(ClientCompatResponseSchema,
          buf.subarray(4, 4 + len));
        buf = buf.subarray(4 + len);
        if (!responses.has(msg.testName)) responses.set(msg.testName, []);
        responses.get(msg.testName).push(msg);
      }
    });
    child.stderr.on("data", (d) => {
      stderr += d;
      if (opt.verbose) process.stderr.write(d);
    });
    child.stdin.on("error", () => {}); // the client may die first
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ responses, code, signal, timedOut, stderr,
        trailing: buf.length });
    });
    for (const r of requests) {
      child.stdin.write(frame(toBinary(ClientCompatRequestSchema, r)));
    }
    child.stdin.end();
  });
}

// The client must exit at once on SIGTERM, with a call in flight.
function checkSigterm(opt, port) {
  return new Promise((resolve) => {
    const child = spawn(opt.client, [], { stdio: ["pipe", "ignore", "pipe"] });
    const req = create(ClientCompatRequestSchema, {
      testName: "sigterm",
      httpVersion: 2,
      protocol: Protocol.CONNECT,
      codec: 1,
      compression: 1,
      host: "127.0.0.1",
      port,
      streamType: StreamType.UNARY,
      service: "connectrpc.conformance.v1.ConformanceService",
      method: "Unary",
      requestHeaders: [{ name: "x-test-case-name", value: ["sigterm"] }],
      requestMessages: [anyPack(UnaryRequestSchema, create(UnaryRequestSchema,
        { responseDefinition: { responseDelayMs: 10000,
          response: { case: "responseData", value: new Uint8Array(1) } } }))],
    });
    child.stdin.write(frame(toBinary(ClientCompatRequestSchema, req)));
    let sent = 0;
    const killer = setTimeout(() => {
      sent = Date.now();
      child.kill("SIGTERM");
    }, 500);
    const guard = setTimeout(() => child.kill("SIGKILL"), 5000);
    child.on("close", (code, signal) => {
      clearTimeout(killer);
      clearTimeout(guard);
      const ms = sent ? Date.now() - sent : -1;
      if (signal === "SIGTERM" && ms >= 0 && ms < 2000) {
        resolve(null);
      } else {
        resolve(`client did not stop on SIGTERM (code ${code}, signal ` +
          `${signal}, ${ms} ms)`);
      }
    });
  });
}

// ---------------------------------------------------------------------------
// Main

async function main() {
  const opt = parseArgs(process.argv.slice(2));
  const suites = opt.builtin ? [...builtinSuites] : [];
  for (const f of opt.suites) suites.push(JSON.parse(readFileSync(f, "utf8")));
  const known = loadKnownFailing(opt.knownFailing);
  const cases = expandSuites(suites,
    configCases(parseFeatures(readFileSync(opt.config, "utf8"))))
    .filter((tc) => opt.run === null || opt.run.test(tc.name))
    .filter((tc) => opt.serverBin === null ||
      !toJsonString(ClientCompatRequestSchema, tc.request, { registry })
        .includes('"rawResponse"'));
  if (cases.length === 0) usage("no test cases selected");

  const dir = mkdtempSync(join(tmpdir(), "conch-conformance-"));
  const servers = [];
  const feedback = new Map();
  let passed = 0;
  let failed = 0;
  let expectedFailures = 0;
  try {
    const certs = makeCerts(dir);
    // One server per kind the cases need: HTTP/2 or HTTP/1.1, each as
    // cleartext, TLS, or TLS requiring a client certificate.
    const kinds = new Map();
    const kindOf = (tc) => `${tc.request.httpVersion === 1 ? "h1" : "h2"}` +
      `${tc.clientCerts ? "-mtls" : tc.tls ? "-tls" : ""}`;
    const argsOf = (kind) => [
      ...(kind.startsWith("h1") ? ["--http1"] : []),
      ...(kind.endsWith("tls") ? ["--tls-cert", certs.server.cert,
        "--tls-key", certs.server.key] : []),
      ...(kind.endsWith("-mtls") ? ["--tls-client-ca", certs.client.cert]
        : []),
    ];
    for (const kind of new Set(["h2", ...cases.map(kindOf)])) {
      const server = opt.serverBin !== null
        ? await startServerBin(opt.serverBin, kind.startsWith("h1") ? 1 : 2,
          kind.endsWith("tls"),
          kind.endsWith("-mtls") ? certs.client.certPem : null)
        : await startServer(argsOf(kind), feedback);
      servers.push(server);
      kinds.set(kind, server);
    }
    const plain = kinds.get("h2");
    for (const tc of cases) {
      const r = tc.request;
      r.host = "127.0.0.1";
      r.port = kinds.get(kindOf(tc)).port;
      if (tc.tls) {
        const k = kinds.get(kindOf(tc));
        r.serverTlsCert = k.pemCert !== null && k.pemCert !== undefined
          ? Buffer.from(k.pemCert) : certs.server.certPem;
        if (tc.clientCerts) {
          r.clientTlsCreds = create(TLSCredsSchema, {
            cert: certs.client.certPem, key: certs.client.keyPem });
        }
      }
      tc.expected = expectedResult(r, tc.expected);
      addExpectHeaders(tc);
    }

    if (opt.keep !== null) {
      // For debugging: the framed requests go to a file, and the servers
      // stay up until SIGINT/SIGTERM, so the client can be run by hand.
      writeFileSync(opt.keep, Buffer.concat(cases.map((tc) =>
        frame(toBinary(ClientCompatRequestSchema, tc.request)))));
      process.stdout.write(`${cases.length} requests in ${opt.keep}; ` +
        "servers up until interrupted\n");
      await new Promise((resolve) => {
        process.once("SIGINT", resolve);
        process.once("SIGTERM", resolve);
      });
      return;
    }
    const started = Date.now();
    const run = await runClient(opt, cases.map((tc) => tc.request));
    const elapsed = ((Date.now() - started) / 1000).toFixed(1);
    const problems = [];
    const sigterm = await checkSigterm(opt, plain.port);
    if (sigterm !== null) problems.push(sigterm);
    // Every FEEDBACK line is in once the servers are gone.
    await Promise.all(servers.splice(0).map(stopServer));

    const report = (name, errs) => {
      const isKnown = known.some((re) => re.test(name));
      if (errs.length === 0) {
        if (isKnown) {
          failed++;
          process.stdout.write(`FAILED: ${name} was expected to fail but ` +
            "did not\n");
        } else {
          passed++;
        }
        return;
      }
      if (isKnown) {
        expectedFailures++;
        if (opt.verbose) {
          process.stdout.write(`INFO: ${name} failed (as expected):\n\t` +
            `${errs.join("\n\t")}\n`);
        }
      } else {
        failed++;
        process.stdout.write(`FAILED: ${name}:\n\t${errs.join("\n\t")}\n`);
      }
    };
    for (const tc of cases) {
      const got = run.responses.get(tc.name) ?? [];
      const errs = feedback.get(tc.name) ?? [];
      run.responses.delete(tc.name);
      if (got.length !== 1) {
        errs.push(got.length === 0 ? "no result from the client"
          : `${got.length} results from the client`);
      } else if (got[0].result.case === "error") {
        errs.push(`client could not run it: ${got[0].result.value.message}`);
      } else {
        errs.push(...checkResult(tc, got[0].result.value));
      }
      report(tc.name, errs);
    }
    for (const name of run.responses.keys()) {
      problems.push(`result for unknown test ${name}`);
    }
    if (run.timedOut) problems.push(`client killed after ${opt.timeout} s`);
    if (run.code !== 0) {
      problems.push(`client exited with ${run.code ?? run.signal}`);
    }
    if (run.trailing !== 0) problems.push("client left a partial frame");
    for (const p of problems) process.stdout.write(`FAILED: ${p}\n`);
    failed += problems.length;
    if (run.code !== 0 && !opt.verbose && run.stderr !== "") {
      process.stdout.write(`client stderr:\n${run.stderr}\n`);
    }

    process.stdout.write(`Total cases: ${cases.length} (${elapsed} s)\n` +
      `${passed} passed, ${failed} failed` +
      (expectedFailures > 0
        ? ` (another ${expectedFailures} failed as expected)` : "") + "\n");
  } finally {
    await Promise.all(servers.map(stopServer));
    rmSync(dir, { recursive: true, force: true });
  }
  process.exitCode = failed === 0 ? 0 : 1;
}

main().catch((e) => {
  process.stderr.write(`runner.mjs: ${e.stack ?? e}\n`);
  process.exit(1);
});
