// Drives tools/conformance-server as the Connect conformance suite drives a
// server under test, with connect-node clients as the callers.
//
//   node server_runner.mjs --server PATH
//
// For each protocol (Connect, gRPC, gRPC-Web) the server is started anew:
// a size-delimited ServerCompatRequest on its stdin (HTTP/2, no TLS), then
// stdin closed, as the suite's runner does; a size-delimited
// ServerCompatResponse with host and port read from its stdout.  Then
// every case below runs in each codec and compression the features file
// declares (requests and responses compressed); each checks what the suite
// checks of the ConformanceService's answer (data, headers, trailers,
// errors and details, the echoed RequestInfo).  At the end the server gets
// SIGTERM and must exit 0 (within 10 s).  Also checked: the
// message_receive_limit of the ServerCompatRequest, that a server started
// for HTTP/1.1, TLS (its certificate returned as pem_cert) or both answers
// in each protocol that HTTP version carries, that one asked for TLS
// client certificates (client_tls_cert: a self-signed client certificate,
// as the suite makes) answers a client presenting that certificate and
// refuses one presenting none or another, that a request for HTTP/3 is
// refused with a message and exit status 3, that a frame that does not
// parse, a client_tls_cert that is no certificate and one without use_tls
// exit 2, and that SIGTERM while a call runs ends it and exits 0 at once.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { create, createRegistry, equals, fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";

import {
  BidiStreamRequestSchema,
  ClientStreamRequestSchema,
  ConformancePayload_RequestInfoSchema,
  ConformanceService,
  IdempotentUnaryRequestSchema,
  ServerStreamRequestSchema,
  UnaryRequestSchema,
  file_conformance_v1_service,
} from "./gen/conformance/v1/service_pb.js";
import {
  compressionDeflate,
  compressionSnappy,
  compressionZstd,
} from "conch-interop-node/compressions.mjs";
import { parseFeatures } from "./lib.mjs";
import { compatRequest, parseCompatResponse } from "./server_compat.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const registry = createRegistry(file_conformance_v1_service);

function usage() {
  process.stderr.write("usage: node server_runner.mjs --server PATH " +
    "[--config FILE]\n");
  process.exit(2);
}
const argv = process.argv.slice(2);
let serverPath = null;
let configPath = join(here, "../../../tools/conformance-server/config.yaml");
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--server" && i + 1 < argv.length) serverPath = argv[++i];
  else if (argv[i] === "--config" && i + 1 < argv.length) {
    configPath = argv[++i];
  } else usage();
}
if (serverPath === null) usage();
const features = parseFeatures(readFileSync(configPath, "utf8"));

function startServer(req) {
  const child = spawn(serverPath, [], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })));
  // The request, then the end of stdin: the server must serve on.
  child.stdin.end(compatRequest(req));
  const listening = new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    child.stdout.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
        resolve(parseCompatResponse(buf.subarray(4, 4 + buf.readUInt32BE(0))));
      }
    });
    exited.then((e) => reject(new Error(
      `server exited (${e.code ?? e.signal}) before answering: ${stderr}`)));
    setTimeout(() => reject(new Error("no ServerCompatResponse in 20 s")),
      20000).unref();
  });
  return { child, listening, exited, stderr: () => stderr };
}

// SIGTERM to a server of startServer(): resolves to how it exited, or to
// {code: "still running 10 s after SIGTERM"} (then it is killed).
async function stopServer(srv) {
  srv.child.kill("SIGTERM");
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => {
      srv.child.kill("SIGKILL");
      resolve({ code: "still running 10 s after SIGTERM" });
    }, 10000);
  });
  const e = await Promise.race([srv.exited, late]);
  clearTimeout(timer);
  return e;
}

// ---------------------------------------------------------------------------
// Checks

class Failure extends Error {}
function check(cond, msg) {
  if (!cond) throw new Failure(msg);
}

function bytes(s) {
  return new TextEncoder().encode(s);
}

function sameBytes(a, b) {
  return a !== undefined && b !== undefined &&
    Buffer.from(a).equals(Buffer.from(b));
}

// The echoed requests must be the requests sent, in order.
function checkRequests(info, schema, sent) {
  check(info !== undefined, "no RequestInfo");
  check(info.requests.length === sent.length,
    `${info.requests.length} requests echoed, ${sent.length} sent`);
  info.requests.forEach((a, i) => {
    const m = anyUnpack(a, schema);
    check(m !== undefined && equals(schema, m, sent[i]),
      `echoed request ${i} differs from the one sent`);
  });
}

function checkHeaderEcho(info, name, value) {
  const h = info.requestHeaders.find((x) => x.name === name);
  check(h !== undefined && h.value.includes(value),
    `request header ${name} not echoed`);
}

function detailInfo(err) {
  const d = err.details.find((x) =>
    x.type === ConformancePayload_RequestInfoSchema.typeName);
  return d === undefined ? undefined
    : fromBinary(ConformancePayload_RequestInfoSchema, d.value);
}

async function expectError(p, code) {
  try {
    await p;
  } catch (e) {
    const err = ConnectError.from(e);
    check(err.code === code,
      `expected ${Code[code]}, got ${Code[err.code]}: ${err.rawMessage}`);
    return err;
  }
  throw new Failure(`expected ${Code[code]}, the call succeeded`);
}

// A queue of requests for a full-duplex call: push() sends one.
function requestQueue() {
  const waiting = [];
  const items = [];
  let done = false;
  return {
    push(v) {
      if (waiting.length) waiting.shift()({ value: v, done: false });
      else items.push(v);
    },
    end() {
      done = true;
      for (const w of waiting.splice(0)) w({ value: undefined, done: true });
    },
    // An async generator: connect-node needs return() and throw() too.
    async *[Symbol.asyncIterator]() {
      for (;;) {
        if (items.length) {
          yield items.shift();
          continue;
        }
        if (done) return;
        const r = await new Promise((res) => waiting.push(res));
        if (r.done) return;
        yield r.value;
      }
    },
  };
}

// ---------------------------------------------------------------------------
// Cases: each takes (client, ctx) and throws Failure when it fails.
// ctx: { protocol, codec }.

const hdrs = [{ name: "x-custom-header", value: ["a", "b"] }];
const trls = [{ name: "x-custom-trailer", value: ["t"] }];
const detail = {
  typeUrl: "type.googleapis.com/connectrpc.conformance.v1.UnaryRequest",
  value: new Uint8Array([0x12, 0x02, 0x68, 0x69]), // request_data "hi"
};

function callOpts(extra = {}) {
  let header;
  let trailer;
  return {
    opts: {
      headers: { "x-conch-test": "yes" },
      onHeader: (h) => (header = h),
      onTrailer: (t) => (trailer = t),
      ...extra,
    },
    header: () => header,
    trailer: () => trailer,
  };
}

function checkCustomHeaders(o) {
  check(o.header()?.get("x-custom-header") === "a, b",
    `response header x-custom-header: ${o.header()?.get("x-custom-header")}`);
  check(o.trailer()?.get("x-custom-trailer") === "t",
    `response trailer x-custom-trailer: ${o.trailer()?.get("x-custom-trailer")}`);
}

const cases = {
  async "unary/success"(client) {
    const req = create(UnaryRequestSchema, {
      responseDefinition: {
        responseHeaders: hdrs,
        responseTrailers: trls,
        response: { case: "responseData", value: bytes("unary data") },
      },
      requestData: bytes("request"),
    });
    const o = callOpts();
    const res = await client.unary(req, o.opts);
    check(sameBytes(res.payload?.data, bytes("unary data")), "wrong data");
    checkRequests(res.payload.requestInfo, UnaryRequestSchema, [req]);
    checkHeaderEcho(res.payload.requestInfo, "x-conch-test", "yes");
    check(res.payload.requestInfo.timeoutMs === undefined,
      "a timeout echoed for a call without one");
    checkCustomHeaders(o);
  },

  async "unary/no-definition"(client) {
    const req = create(UnaryRequestSchema, { requestData: bytes("x") });
    const res = await client.unary(req);
    check(res.payload?.data.length === 0, "data without a definition");
    checkRequests(res.payload.requestInfo, UnaryRequestSchema, [req]);
  },

  async "unary/error-with-details"(client) {
    const req = create(UnaryRequestSchema, {
      responseDefinition: {
        responseHeaders: hdrs,
        responseTrailers: trls,
        response: {
          case: "error",
          value: {
            code: Code.ResourceExhausted,
            message: "soirée 🎉",
            details: [detail],
          },
        },
      },
    });
    const o = callOpts();
    const err = await expectError(client.unary(req, o.opts),
      Code.ResourceExhausted);
    check(err.rawMessage === "soirée 🎉", `message ${err.rawMessage}`);
    check(err.details.length === 2, `${err.details.length} details`);
    check(err.details[0].type === "connectrpc.conformance.v1.UnaryRequest" &&
      sameBytes(err.details[0].value, detail.value), "first detail differs");
    const d = err.details[1];
    check(d.type === ConformancePayload_RequestInfoSchema.typeName,
      `second detail ${d.type}`);
    checkRequests(fromBinary(ConformancePayload_RequestInfoSchema, d.value),
      UnaryRequestSchema, [req]);
    // Trailers-only or not, the custom metadata comes with the error.
    const md = new Headers(err.metadata);
    check(md.get("x-custom-trailer") === "t" ||
      o.trailer()?.get("x-custom-trailer") === "t", "no trailer with error");
  },

  async "unary/error-code-out-of-range"(client) {
    // Code 99 does not exist: the server ends the call as unknown.
    const req = create(UnaryRequestSchema, {
      responseDefinition: {
        response: { case: "error", value: { code: 99, message: "odd" } },
      },
    });
    const err = await expectError(client.unary(req), Code.Unknown);
    check(err.rawMessage === "odd", `message ${err.rawMessage}`);
  },

  async "unary/timeout-echoed"(client) {
    const req = create(UnaryRequestSchema, {
      responseDefinition: { response: { case: "responseData",
        value: bytes("x") } },
    });
    const res = await client.unary(req, { timeoutMs: 5000 });
    const t = Number(res.payload.requestInfo.timeoutMs);
    check(t > 3000 && t <= 5000, `timeout echoed as ${t}`);
  },

  async "unary/deadline-exceeded"(client) {
    const req = create(UnaryRequestSchema, {
      responseDefinition: {
        responseDelayMs: 3000,
        response: { case: "responseData", value: bytes("late") },
      },
    });
    await expectError(client.unary(req, { timeoutMs: 300 }),
      Code.DeadlineExceeded);
  },

  async "unary/delay"(client) {
    const req = create(UnaryRequestSchema, {
      responseDefinition: {
        responseDelayMs: 200,
        response: { case: "responseData", value: bytes("slow") },
      },
    });
    const t0 = Date.now();
    const res = await client.unary(req);
    check(Date.now() - t0 >= 190, "the delay was not kept");
    check(sameBytes(res.payload.data, bytes("slow")), "wrong data");
  },

  async "server-stream/success"(client) {
    const req = create(ServerStreamRequestSchema, {
      responseDefinition: {
        responseHeaders: hdrs,
        responseTrailers: trls,
        responseData: [bytes("one"), bytes("two"), bytes("three")],
        responseDelayMs: 20,
      },
    });
    const o = callOpts();
    const got = [];
    for await (const r of client.serverStream(req, o.opts)) got.push(r);
    check(got.length === 3, `${got.length} responses`);
    ["one", "two", "three"].forEach((s, i) =>
      check(sameBytes(got[i].payload.data, bytes(s)), `response ${i}`));
    checkRequests(got[0].payload.requestInfo, ServerStreamRequestSchema,
      [req]);
    check(got[1].payload.requestInfo === undefined, "info in response 1");
    checkCustomHeaders(o);
  },

  async "server-stream/error-mid-stream"(client) {
    const req = create(ServerStreamRequestSchema, {
      responseDefinition: {
        responseData: [bytes("one"), bytes("two")],
        error: { code: Code.Aborted, message: "mid-stream" },
      },
    });
    const got = [];
    const err = await expectError((async () => {
      for await (const r of client.serverStream(req)) got.push(r);
    })(), Code.Aborted);
    check(got.length === 2, `${got.length} responses before the error`);
    check(err.rawMessage === "mid-stream", `message ${err.rawMessage}`);
    check(err.details.length === 0, "RequestInfo with the error after data");
  },

  async "server-stream/error-only"(client) {
    const req = create(ServerStreamRequestSchema, {
      responseDefinition: {
        error: { code: Code.FailedPrecondition, message: "at once" },
      },
    });
    const err = await expectError((async () => {
      for await (const _ of client.serverStream(req)) {
        // none expected
      }
    })(), Code.FailedPrecondition);
    check(detailInfo(err) !== undefined, "no RequestInfo detail");
  },

  async "client-stream/success"(client) {
    const reqs = [0, 1, 2, 3].map((i) => create(ClientStreamRequestSchema, {
      responseDefinition: i === 0
        ? {
          responseHeaders: hdrs,
          responseTrailers: trls,
          response: { case: "responseData", value: bytes("all") },
        }
        : undefined,
      requestData: bytes(`req ${i}`),
    }));
    const o = callOpts();
    const res = await client.clientStream((async function* () {
      yield* reqs;
    })(), o.opts);
    check(sameBytes(res.payload.data, bytes("all")), "wrong data");
    checkRequests(res.payload.requestInfo, ClientStreamRequestSchema, reqs);
    checkCustomHeaders(o);
  },

  async "client-stream/error"(client) {
    const reqs = [0, 1].map((i) => create(ClientStreamRequestSchema, {
      responseDefinition: i === 0
        ? { response: { case: "error",
          value: { code: Code.InvalidArgument, message: "no" } } }
        : undefined,
    }));
    const err = await expectError(client.clientStream((async function* () {
      yield* reqs;
    })()), Code.InvalidArgument);
    check(detailInfo(err) !== undefined, "no RequestInfo detail");
  },

  async "bidi/half-duplex"(client) {
    const reqs = [0, 1, 2].map((i) => create(BidiStreamRequestSchema, {
      responseDefinition: i === 0
        ? { responseData: [bytes("r1"), bytes("r2")], responseTrailers: trls }
        : undefined,
      requestData: bytes(`req ${i}`),
    }));
    const o = callOpts();
    const got = [];
    for await (const r of client.bidiStream((async function* () {
      yield* reqs;
    })(), o.opts)) got.push(r);
    check(got.length === 2, `${got.length} responses`);
    checkRequests(got[0].payload.requestInfo, BidiStreamRequestSchema, reqs);
    check(o.trailer()?.get("x-custom-trailer") === "t", "no trailer");
  },

  async "bidi/full-duplex"(client) {
    const q = requestQueue();
    const mk = (i) => create(BidiStreamRequestSchema, {
      responseDefinition: i === 0
        ? {
          responseData: [bytes("f0"), bytes("f1"), bytes("f2")],
          error: { code: Code.DataLoss, message: "after three" },
        }
        : undefined,
      fullDuplex: i === 0,
      requestData: bytes(`req ${i}`),
    });
    const sent = [mk(0)];
    q.push(sent[0]);
    const it = client.bidiStream(q)[Symbol.asyncIterator]();
    const got = [];
    let err;
    try {
      for (let i = 0; i < 3; i++) {
        const r = await it.next();
        check(!r.done, `stream ended after ${i} responses`);
        got.push(r.value);
        // Each response echoes exactly the request that caused it.
        checkRequests(r.value.payload.requestInfo, BidiStreamRequestSchema,
          [sent[i]]);
        if (i < 2) {
          sent.push(mk(i + 1));
          q.push(sent[i + 1]);
        }
      }
      q.end();
      const r = await it.next();
      check(r.done, "a fourth response");
    } catch (e) {
      if (e instanceof Failure) throw e;
      err = ConnectError.from(e);
    }
    check(got.length === 3, `${got.length} responses (${err})`);
    check(err?.code === Code.DataLoss, `ended with ${err?.code}`);
    checkHeaderEcho(got[0].payload.requestInfo, "x-conch-test", "yes");
  },

  async "unimplemented"(client) {
    await expectError(client.unimplemented({}), Code.Unimplemented);
  },

  async "idempotent-unary"(client) {
    const req = create(IdempotentUnaryRequestSchema, {
      responseDefinition: {
        response: { case: "responseData", value: bytes("get") },
      },
      requestData: bytes("idempotent"),
    });
    const res = await client.idempotentUnary(req);
    check(sameBytes(res.payload.data, bytes("get")), "wrong data");
    checkRequests(res.payload.requestInfo, IdempotentUnaryRequestSchema,
      [req]);
  },
};

// Headers every call sends; the server must echo them.
const testHeaders = { "x-conch-test": "yes" };

// ---------------------------------------------------------------------------
// Run

const COMPRESSIONS = {
  COMPRESSION_IDENTITY: null,
  COMPRESSION_GZIP: compressionGzip,
  COMPRESSION_BR: compressionBrotli,
  COMPRESSION_ZSTD: compressionZstd,
  COMPRESSION_DEFLATE: compressionDeflate,
  COMPRESSION_SNAPPY: compressionSnappy,
};

const PROTOCOLS = {
  PROTOCOL_CONNECT: ["connect", 1, createConnectTransport],
  PROTOCOL_GRPC: ["grpc", 2, createGrpcTransport],
  PROTOCOL_GRPC_WEB: ["grpc-web", 3, createGrpcWebTransport],
};

let failures = 0;
const totals = {};

async function runProtocol(pname) {
  const [protocol, pnum, makeTransport] = PROTOCOLS[pname];
  const srv = startServer({ protocol: pnum, httpVersion: 2 });
  const { host, port } = await srv.listening;
  const codecs = features.codecs ?? ["CODEC_PROTO"];
  const comps = features.compressions ?? ["COMPRESSION_IDENTITY"];
  for (const codec of codecs) {
    for (const comp of comps) {
      for (const get of protocol === "connect" &&
        features.supportsConnectGet ? [false, true] : [false]) {
        const transport = makeTransport({
          baseUrl: `http://${host}:${port}`,
          httpVersion: "2",
          useBinaryFormat: codec === "CODEC_PROTO",
          jsonOptions: { registry },
          sendCompression: COMPRESSIONS[comp] ?? undefined,
          acceptCompression: COMPRESSIONS[comp] ? [COMPRESSIONS[comp]] : [],
          compressMinBytes: 0,
          useHttpGet: get,
          interceptors: [(next) => (req) => {
            for (const [k, v] of Object.entries(testHeaders)) {
              if (!req.header.has(k)) req.header.set(k, v);
            }
            return next(req);
          }],
        });
        const client = createClient(ConformanceService, transport);
        const names = get ? ["idempotent-unary"] : Object.keys(cases);
        for (const name of names) {
          const label = `${protocol}/${codec}/${comp}${get ? "/GET" : ""}/` +
            name;
          try {
            await cases[name](client, { protocol, codec });
            totals[protocol] = (totals[protocol] ?? 0) + 1;
          } catch (e) {
            failures++;
            process.stdout.write(`FAIL ${label}: ${e.stack ?? e}\n`);
          }
        }
      }
    }
  }
  const e = await stopServer(srv);
  if (e.code !== 0) {
    failures++;
    process.stdout.write(`FAIL ${protocol}: server exited ${e.code ?? e.signal}` +
      ` on SIGTERM: ${srv.stderr()}\n`);
  }
}

// A server started with message_receive_limit 1024 takes a request of
// under 1 KiB and refuses a larger one with resource_exhausted.
async function receiveLimit() {
  const srv = startServer({ protocol: 1, httpVersion: 2,
    messageReceiveLimit: 1024 });
  const { host, port } = await srv.listening;
  for (const [pname, [protocol, , makeTransport]] of
    Object.entries(PROTOCOLS)) {
    if (!(features.protocols ?? []).includes(pname)) continue;
    const client = createClient(ConformanceService, makeTransport({
      baseUrl: `http://${host}:${port}`, httpVersion: "2",
    }));
    try {
      const small = create(UnaryRequestSchema, {
        requestData: new Uint8Array(900) });
      await client.unary(small);
      const big = create(UnaryRequestSchema, {
        requestData: new Uint8Array(2000) });
      await expectError(client.unary(big), Code.ResourceExhausted);
      totals[protocol] = (totals[protocol] ?? 0) + 1;
    } catch (e) {
      failures++;
      process.stdout.write(`FAIL ${protocol}/receive-limit: ${e.stack ?? e}\n`);
    }
  }
  const e = await stopServer(srv);
  if (e.code !== 0) {
    failures++;
    process.stdout.write(`FAIL receive-limit: server exited ` +
      `${e.code ?? e.signal}: ${srv.stderr()}\n`);
  }
}

// SIGTERM while a call waits out a 10 s delay: the server ends the call
// and exits 0 at once (well before the delay), and the client's call
// fails.
async function sigtermWhileBusy() {
  const srv = startServer({ protocol: 1, httpVersion: 2 });
  const { host, port } = await srv.listening;
  const client = createClient(ConformanceService, createConnectTransport({
    baseUrl: `http://${host}:${port}`, httpVersion: "2",
  }));
  const call = client.unary(create(UnaryRequestSchema, {
    responseDefinition: { responseDelayMs: 10000,
      response: { case: "responseData", value: bytes("late") } },
  })).then(() => "succeeded", (e) => ConnectError.from(e));
  // A second call on the same HTTP/2 connection, answered at once: the
  // server has read the first call's stream before it.
  await client.unary(create(UnaryRequestSchema, {}));
  const t0 = Date.now();
  const e = await stopServer(srv);
  const outcome = await call;
  const ms = Date.now() - t0;
  if (e.code !== 0 || ms > 8000 || outcome === "succeeded") {
    failures++;
    process.stdout.write(`FAIL sigterm-while-busy: exit ${e.code ?? e.signal}` +
      ` after ${ms} ms, call ${outcome}: ${srv.stderr()}\n`);
  } else {
    totals.lifecycle = (totals.lifecycle ?? 0) + 1;
  }
}

// A frame that is not a ServerCompatRequest: exit status 2, a message.
async function badRequest() {
  const child = spawn(serverPath, [], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })));
  child.stdin.end(Buffer.from([0, 0, 0, 3, 0xff, 0xff, 0xff]));
  const e = await exited;
  if (e.code !== 2 || !/does not parse/.test(stderr)) {
    failures++;
    process.stdout.write(`FAIL bad-request: exit ${e.code ?? e.signal}, ` +
      `stderr ${JSON.stringify(stderr)}\n`);
  } else {
    totals.lifecycle = (totals.lifecycle ?? 0) + 1;
  }
}

// A server started for |req| answers a unary call in each declared
// protocol over HTTP |http| ("1.1" or "2"; gRPC over HTTP/2 only), over
// TLS with the certificate it returned when |req| asks for TLS, presenting
// the client certificate |creds| ({cert, key}) when given, and refuses the
// handshake of each client in |refusedCreds| ({cert, key}, or {} for no
// certificate); then it exits 0 on SIGTERM.
async function served(name, req, http, creds = null, refusedCreds = []) {
  const srv = startServer(req);
  let resp;
  try {
    resp = await srv.listening;
  } catch (e) {
    failures++;
    process.stdout.write(`FAIL serve ${name}: ${e.message}\n`);
    return;
  }
  const tls = req.useTls === true;
  if (tls && !resp.pemCert) {
    failures++;
    process.stdout.write(`FAIL serve ${name}: no pem_cert\n`);
  }
  for (const [pname, [protocol, , makeTransport]] of
    Object.entries(PROTOCOLS)) {
    if (!(features.protocols ?? []).includes(pname)) continue;
    if (http === "1.1" && pname === "PROTOCOL_GRPC") continue;
    const clientFor = (c) => createClient(ConformanceService, makeTransport({
      baseUrl: `${tls ? "https" : "http"}://${resp.host}:${resp.port}`,
      httpVersion: http,
      nodeOptions: tls ? { ca: resp.pemCert, ...(c ?? {}) } : undefined,
    }));
    const call = (c) => clientFor(c).unary(create(UnaryRequestSchema, {
      responseDefinition: {
        response: { case: "responseData", value: bytes("served") } },
    }));
    try {
      const res = await call(creds);
      check(sameBytes(res.payload?.data, bytes("served")),
        "wrong payload");
      totals.served = (totals.served ?? 0) + 1;
    } catch (e) {
      failures++;
      process.stdout.write(`FAIL serve ${name} ${protocol}: ` +
        `${e.stack ?? e}\n`);
    }
    for (const [i, c] of refusedCreds.entries()) {
      try {
        await call(c);
        failures++;
        process.stdout.write(`FAIL serve ${name} ${protocol}: client ` +
          `${i} without an accepted certificate was served\n`);
      } catch (e) {
        // The handshake fails (the transport error surfaces as
        // unavailable, internal or unknown depending on the protocol, or
        // as aborted when the client was still writing its request as
        // the refusal reset the connection: TLS 1.3 checks the client's
        // certificate after the client considers the handshake done).
        if (e instanceof ConnectError && e.code !== Code.Unavailable &&
          e.code !== Code.Internal && e.code !== Code.Unknown &&
          e.code !== Code.Aborted) {
          failures++;
          process.stdout.write(`FAIL serve ${name} ${protocol}: client ` +
            `${i}: ${e.message}\n`);
        } else {
          totals.refusedClient = (totals.refusedClient ?? 0) + 1;
        }
      }
    }
  }
  const e = await stopServer(srv);
  if (e.code !== 0) {
    failures++;
    process.stdout.write(`FAIL serve ${name}: server exited ` +
      `${e.code ?? e.signal}: ${srv.stderr()}\n`);
  }
}

// A server started for |req| exits |code| at once with a message matching
// |re| on stderr.
async function refused(name, req, code = 3, re = /not supported/) {
  const srv = startServer(req);
  srv.listening.catch(() => {});
  const e = await srv.exited;
  if (e.code !== code || !re.test(srv.stderr())) {
    failures++;
    process.stdout.write(`FAIL refuse ${name}: exit ${e.code ?? e.signal}, ` +
      `stderr ${JSON.stringify(srv.stderr())}\n`);
  } else {
    totals.refused = (totals.refused ?? 0) + 1;
  }
}

// Self-signed client certificates made with the openssl command (RSA,
// PKCS#1 keys, as the suite hands them out): |name| -> {cert, key} PEM.
function makeClientCert(dir, name) {
  const cert = join(dir, `${name}.pem`);
  const key = join(dir, `${name}.key`);
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes",
    "-keyout", key, "-out", cert, "-days", "2", "-subj",
    `/O=ConnectRPC/CN=${name}`, "-addext", "extendedKeyUsage=clientAuth"],
  { stdio: ["ignore", "ignore", "pipe"] });
  execFileSync("openssl", ["rsa", "-in", key, "-traditional", "-out", key],
    { stdio: ["ignore", "ignore", "pipe"] });
  return { cert: readFileSync(cert), key: readFileSync(key) };
}

// ServerCompatRequest.client_tls_cert: the client with that certificate is
// served over HTTP/2 and HTTP/1.1; one with no certificate or another
// self-signed one is refused.  Junk in the field, or the field without
// use_tls, is bad input.
async function clientCerts() {
  const dir = mkdtempSync(join(tmpdir(), "conch-srv-mtls-"));
  try {
    const good = makeClientCert(dir, "conformance-client");
    const other = makeClientCert(dir, "someone-else");
    for (const http of ["2", "1.1"]) {
      await served(`TLS client certificates HTTP/${http}`, { protocol: 1,
        httpVersion: http === "2" ? 2 : 1, useTls: true,
        clientTlsCert: good.cert }, http, good, [{}, other]);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  await refused("a client_tls_cert that is no certificate", { protocol: 1,
    httpVersion: 2, useTls: true,
    clientTlsCert: "-----BEGIN CERTIFICATE-----\n" }, 2, /client_tls_cert/);
  await refused("client_tls_cert without use_tls", { protocol: 1,
    httpVersion: 2, clientTlsCert: "x" }, 2, /without use_tls/);
}

const deadline = setTimeout(() => {
  process.stdout.write("FAIL: the run took over 400 s\n");
  process.exit(1);
}, 400000);

for (const p of features.protocols ?? []) {
  await runProtocol(p);
}
await receiveLimit();
await sigtermWhileBusy();
await badRequest();
await served("HTTP/1.1", { protocol: 1, httpVersion: 1 }, "1.1");
await served("TLS", { protocol: 1, httpVersion: 2, useTls: true }, "2");
await served("TLS HTTP/1.1", { protocol: 1, httpVersion: 1, useTls: true },
  "1.1");
await refused("HTTP/3", { protocol: 1, httpVersion: 3 });
await clientCerts();
clearTimeout(deadline);
for (const [k, v] of Object.entries(totals)) {
  process.stdout.write(`passed ${k}: ${v}\n`);
}
process.stdout.write(failures === 0 ? "ok\n" : `${failures} failed\n`);
process.exit(failures === 0 ? 0 : 1);
