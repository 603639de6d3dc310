// A grpc-js server (@grpc/grpc-js, h2c, gRPC only) of conchtest.v1's
// TestService for `conch call` (test_call_grpcjs.sh), with the server
// reflection of @grpc/reflection:
//
//   node grpcjs_server.mjs PROTO_DIR [--reflection both|v1alpha|none]
//
//  - both: ReflectionService as applications add it (v1 and v1alpha);
//  - v1alpha: only grpc.reflection.v1alpha.ServerReflection, as older
//    grpc-go / grpc-java servers serve it (the package's v1alpha
//    implementation alone);
//  - none: no reflection;
//  - v1alpha-counted: v1alpha, and a v1 that answers every stream with
//    unimplemented (on the wire as a server without v1), counting them:
//    Unary's response index is the number of v1 streams seen so far
//    (tests/server_core/test_reflect_grpcjs.c);
//  - v1alpha-oneshot: the same, but each v1alpha stream ends after its
//    first answer (the client must open another for the next request).
//
// The service: Unary echoes the payload (or fails on purpose, below);
// ServerStream sends
// response_count responses (index 0, 1, ...); ClientStream counts messages
// and payload bytes; Bidi echoes each message as it comes.  A request with
// `error` ends the call with its code and message, and its details as
// grpc-status-details-bin (a google.rpc.Status whose Any values are the
// details' type and bytes).
//
// Prints "LISTENING <port>" once serving on 127.0.0.1; exits when its stdin
// closes (tests/support/peer.sh holds it) or on SIGTERM.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const SKIP = 77;

function need(name) {
  try {
    return require(name);
  } catch (e) {
    console.error(`SKIP: ${name} is not installed (npm ci in tests/): ${e.message}`);
    process.exit(SKIP);
  }
}

const grpc = need("@grpc/grpc-js");
const loader = need("@grpc/proto-loader");
const { ReflectionService } = need("@grpc/reflection");
const { ReflectionV1AlphaImplementation } = need(
  "@grpc/reflection/build/src/implementations/reflection-v1alpha.js",
);

const protoDir = process.argv[2];
let mode = "both";
for (let i = 3; i < process.argv.length; i++) {
  if (process.argv[i] === "--reflection") mode = process.argv[++i];
}
if (!protoDir || !["both", "v1alpha", "none", "v1alpha-counted", "v1alpha-oneshot"].includes(mode)) {
  console.error(
    "usage: node grpcjs_server.mjs PROTO_DIR [--reflection both|v1alpha|none|v1alpha-counted|v1alpha-oneshot]",
  );
  process.exit(2);
}

const def = loader.loadSync(path.join(protoDir, "conchtest/v1/test.proto"), {
  includeDirs: [protoDir],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const pkg = grpc.loadPackageDefinition(def);

// ---- google.rpc.Status, by hand (fields 1 code, 2 message, 3 details) ----

function varint(n) {
  const out = [];
  n = BigInt.asUintN(64, BigInt(n));
  do {
    let b = Number(n & 0x7fn);
    n >>= 7n;
    if (n !== 0n) b |= 0x80;
    out.push(b);
  } while (n !== 0n);
  return Buffer.from(out);
}
function lenField(num, bytes) {
  return Buffer.concat([varint((num << 3) | 2), varint(bytes.length), bytes]);
}
function statusBin(spec) {
  const parts = [varint(1 << 3), varint(spec.code)];
  if (spec.message) parts.push(lenField(2, Buffer.from(spec.message)));
  for (const d of spec.details || []) {
    const any = Buffer.concat([
      lenField(1, Buffer.from(`type.googleapis.com/${d.type}`)),
      lenField(2, Buffer.from(d.value || [])),
    ]);
    parts.push(lenField(3, any));
  }
  return Buffer.concat(parts);
}
function failure(spec) {
  const md = new grpc.Metadata();
  if ((spec.details || []).length > 0) md.set("grpc-status-details-bin", statusBin(spec));
  return { code: spec.code, details: spec.message, metadata: md };
}
const hasError = (req) => req.error && req.error.code !== 0;

// ---- The service ------------------------------------------------------------

// Failing on purpose, for retries (tests/server_core/test_retry_grpcjs.c):
// a Unary whose payload is "retry:KEY:N[:PUSHBACK]" fails its first N calls
// for KEY with unavailable (and a grpc-retry-pushback-ms trailer of
// PUSHBACK when given), then answers with the number of calls seen for
// KEY as its index and, as its payload, the grpc-previous-rpc-attempts
// header of the answered call ("" when none).
const retryCalls = new Map();

function retryUnary(call, cb, spec) {
  const [key, n, pushback] = spec.split(":");
  const seen = (retryCalls.get(key) ?? 0) + 1;
  retryCalls.set(key, seen);
  if (seen <= Number(n)) {
    const md = new grpc.Metadata();
    if (pushback !== undefined) md.set("grpc-retry-pushback-ms", pushback);
    return cb({ code: grpc.status.UNAVAILABLE, details: `failing ${seen} of ${n}`, metadata: md });
  }
  const prev = call.metadata.get("grpc-previous-rpc-attempts");
  cb(null, { payload: Buffer.from(prev.length > 0 ? String(prev[0]) : ""), index: seen });
}

const impl = {
  Unary(call, cb) {
    const req = call.request;
    if (hasError(req)) return cb(failure(req.error));
    const text = Buffer.from(req.payload).toString();
    if (text.startsWith("retry:")) return retryUnary(call, cb, text.slice(6));
    cb(null, { payload: req.payload, index: v1Streams });
  },
  ServerStream(call) {
    const req = call.request;
    for (let i = 0; i < req.response_count; i++) call.write({ payload: req.payload, index: i });
    if (hasError(req)) return call.emit("error", failure(req.error));
    call.end();
  },
  ClientStream(call, cb) {
    let count = 0;
    let bytes = 0;
    let failed = false;
    call.on("data", (req) => {
      if (failed) return;
      if (hasError(req)) {
        failed = true;
        return cb(failure(req.error));
      }
      count++;
      bytes += req.payload.length;
    });
    call.on("end", () => {
      if (!failed) cb(null, { message_count: count, total_bytes: String(bytes) });
    });
  },
  Bidi(call) {
    let done = false;
    call.on("data", (req) => {
      if (done) return;
      if (hasError(req)) {
        done = true;
        return call.emit("error", failure(req.error));
      }
      call.write({ payload: req.payload });
    });
    call.on("end", () => {
      if (!done) call.end();
    });
  },
};

const server = new grpc.Server();
server.addService(pkg.conchtest.v1.TestService.service, impl);
if (mode === "both") new ReflectionService(def).addToServer(server);
const reflDir = path.join(
  path.dirname(require.resolve("@grpc/reflection/package.json")),
  "build",
  "proto",
);
const { PROTO_LOADER_OPTS } = need("@grpc/reflection/build/src/implementations/common/constants.js");
const reflPkg = (v) =>
  grpc.loadPackageDefinition(
    loader.loadSync(path.join(reflDir, `grpc/reflection/${v}/reflection.proto`), {
      ...PROTO_LOADER_OPTS,
      includeDirs: [reflDir],
    }),
  );
if (mode === "v1alpha" || mode === "v1alpha-counted") {
  new ReflectionV1AlphaImplementation(def).addToServer(server);
}
if (mode === "v1alpha-oneshot") {
  // The package's answers, one per stream.
  const alpha = new ReflectionV1AlphaImplementation(def);
  server.addService(reflPkg("v1alpha").grpc.reflection.v1alpha.ServerReflection.service, {
    ServerReflectionInfo(call) {
      let answered = false;
      call.on("data", (req) => {
        if (answered) return;
        answered = true;
        call.write(alpha.handleServerReflectionRequest(req));
        call.end();
      });
      call.on("end", () => {
        if (!answered) call.end();
      });
    },
  });
}
let v1Streams = 0;
if (mode === "v1alpha-counted" || mode === "v1alpha-oneshot") {
  const v1 = reflPkg("v1");
  server.addService(v1.grpc.reflection.v1.ServerReflection.service, {
    ServerReflectionInfo(call) {
      v1Streams++;
      call.emit("error", { code: grpc.status.UNIMPLEMENTED, details: "no v1 here" });
    },
  });
}

server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(`bind: ${err.message}`);
    process.exit(1);
  }
  process.stdout.write(`LISTENING ${port}\n`);
});

const stop = () => {
  server.forceShutdown();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.on("error", stop);
process.stdin.resume();
