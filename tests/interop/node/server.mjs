// The interop peer of conch's tests: conchtest.v1.TestService served by
// connect-node (Connect, gRPC and gRPC-Web on one port), and the services
// of protoc-gen-conch's test protos (stubgen.mjs).
//
//   node server.mjs [--port N] [--tls-cert F --tls-key F [--tls-client-ca F]]
//                   [--http1]
//
// Listens on 127.0.0.1 (port 0, the default, picks a free port) and prints
// exactly one line "LISTENING <port>" to stdout once it accepts connections.
// Transports:
//   default           HTTP/2 cleartext, prior knowledge (h2c, no Upgrade)
//   --tls-cert/--key  HTTP/2 over TLS, ALPN "h2" only
//   --tls-client-ca   (with TLS) require a client certificate signed by F
//   --http1           HTTP/1.1 instead (cleartext, or TLS with ALPN
//                     "http/1.1"): for tests of what conch does without h2
// Exits on SIGTERM/SIGINT, and when its stdin (if a pipe or socket) closes,
// so a crashed test harness never leaves it behind.
//
// Behaviour (see tests/proto/conchtest/v1/test.proto):
// * response payload = the request payload, or, when response_size is
//   non-zero, response_size bytes of the pattern byte[i] = i % 256;
// * delay_ms is waited before each response and before ending the call
//   (Unary: once, before answering; ClientStream: once, after the request
//   stream ended; Bidi: before answering each request);
// * response_headers / response_trailers are appended (repeated values
//   allowed; "-bin" values are sent base64, standard alphabet, unpadded);
// * request_headers (first response of every call) lists every header field
//   of the received HEADERS frame, pseudo-headers (":path", ...) included,
//   grouped by lower-case name in order of first appearance, one value per
//   received field; "-bin" values are split on "," and base64-decoded;
// * timeout_ms = the handler's remaining time at the start of the call (the
//   request's connect-timeout-ms / grpc-timeout less the few ms spent getting
//   there), -1 without a deadline;
// * error: after the delay, the call fails with ErrorSpec's code, message
//   and details (raw {type, value} details, so any bytes can be sent).  The
//   requested headers/trailers were already set on the handler context, and
//   connect-node sends those with errors in every protocol (Connect unary:
//   headers + "trailer-" headers; Connect streams: end-stream metadata;
//   gRPC: trailers), so they are not copied into the error's metadata too
//   (that would send every trailer twice);
// * the call's abort signal (client RST_STREAM, deadline) stops any wait.
import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { createHash } from "node:crypto";
import { fstatSync, readFileSync } from "node:fs";

import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
} from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import { allCompressions } from "./compressions.mjs";

import { TestService } from "./gen/conchtest/v1/test_pb.js";
import { stubgenRoutes } from "./stubgen.mjs";

const MIB = 1024 * 1024;
// Room for 64 MiB messages plus envelope and slack.
const MAX_MESSAGE_BYTES = 128 * MIB;

// ---------------------------------------------------------------------------
// Command line

function usage(msg) {
  process.stderr.write(
    `server.mjs: ${msg}\n` +
      "usage: node server.mjs [--port N] [--tls-cert F --tls-key F " +
      "[--tls-client-ca F]] [--http1]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opt = { port: 0, cert: null, key: null, clientCa: null, http1: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--port": {
        const s = value();
        if (!/^[0-9]+$/.test(s) || Number(s) > 65535) usage(`bad port ${s}`);
        opt.port = Number(s);
        break;
      }
      case "--tls-cert":
        opt.cert = value();
        break;
      case "--tls-key":
        opt.key = value();
        break;
      case "--tls-client-ca":
        opt.clientCa = value();
        break;
      case "--http1":
        opt.http1 = true;
        break;
      default:
        usage(`unknown argument ${a}`);
    }
  }
  if ((opt.cert === null) !== (opt.key === null)) {
    usage("--tls-cert and --tls-key go together");
  }
  if (opt.clientCa !== null && opt.cert === null) {
    usage("--tls-client-ca needs --tls-cert/--tls-key");
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Helpers

// The raw request header list (name, value, name, value, ...), captured
// per call because connect's Headers object merges repeated fields.
const kRawHeaders = createContextKey([], { description: "raw headers" });

const PATTERN_BLOCK = Buffer.alloc(256);
for (let i = 0; i < 256; i++) PATTERN_BLOCK[i] = i;

function pattern(n) {
  return n === 0 ? new Uint8Array(0) : Buffer.alloc(n, PATTERN_BLOCK);
}

function isBin(name) {
  return name.toLowerCase().endsWith("-bin");
}

function b64Unpadded(bytes) {
  return Buffer.from(bytes).toString("base64").replace(/=+$/, "");
}

function headerValue(name, bytes) {
  return isBin(name)
    ? b64Unpadded(bytes)
    : Buffer.from(bytes).toString("latin1");
}

function appendHeaders(target, list) {
  for (const h of list) {
    for (const v of h.values) target.append(h.name, headerValue(h.name, v));
  }
}

function receivedHeaders(ctx) {
  const raw = ctx.values.get(kRawHeaders);
  const byName = new Map();
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = String(raw[i]).toLowerCase();
    const value = String(raw[i + 1]);
    let values = byName.get(name);
    if (values === undefined) {
      values = [];
      byName.set(name, values);
    }
    if (isBin(name)) {
      for (const part of value.split(",")) {
        values.push(new Uint8Array(Buffer.from(part.trim(), "base64")));
      }
    } else {
      values.push(new Uint8Array(Buffer.from(value, "latin1")));
    }
  }
  return [...byName].map(([name, values]) => ({ name, values }));
}

function seenTimeout(ctx) {
  const t = ctx.timeoutMs();
  return t === undefined ? -1n : BigInt(Math.max(0, Math.round(t)));
}

function abortError(signal) {
  const r = signal.reason;
  if (r instanceof ConnectError) return r;
  return new ConnectError("call aborted", Code.Canceled, undefined, undefined,
    r);
}

// Waits |ms| milliseconds unless the call is aborted first.
function sleep(ms, signal) {
  if (signal.aborted) return Promise.reject(abortError(signal));
  if (!ms) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

function makeError(spec) {
  if (!Number.isInteger(spec.code) || spec.code < 1 || spec.code > 16) {
    return new ConnectError(`test asked for invalid code ${spec.code}`,
      Code.Internal);
  }
  const details = spec.details.map((d) => ({ type: d.type, value: d.value }));
  return new ConnectError(spec.message, spec.code, undefined, details);
}

function responsePayload(req) {
  return req.responseSize !== 0 ? pattern(req.responseSize) : req.payload;
}

// ---------------------------------------------------------------------------
// The service

const testService = {
  async unary(req, ctx) {
    const timeoutMs = seenTimeout(ctx);
    const requestHeaders = receivedHeaders(ctx);
    appendHeaders(ctx.responseHeader, req.responseHeaders);
    appendHeaders(ctx.responseTrailer, req.responseTrailers);
    await sleep(req.delayMs, ctx.signal);
    if (req.error !== undefined) throw makeError(req.error);
    return { payload: responsePayload(req), index: 0, requestHeaders,
      timeoutMs };
  },

  async *serverStream(req, ctx) {
    const timeoutMs = seenTimeout(ctx);
    const requestHeaders = receivedHeaders(ctx);
    appendHeaders(ctx.responseHeader, req.responseHeaders);
    appendHeaders(ctx.responseTrailer, req.responseTrailers);
    for (let i = 0; i < req.responseCount; i++) {
      await sleep(req.delayMs, ctx.signal);
      yield {
        payload: responsePayload(req),
        index: i,
        requestHeaders: i === 0 ? requestHeaders : [],
        timeoutMs,
      };
    }
    await sleep(req.delayMs, ctx.signal);
    if (req.error !== undefined) throw makeError(req.error);
  },

  async clientStream(reqs, ctx) {
    const timeoutMs = seenTimeout(ctx);
    const requestHeaders = receivedHeaders(ctx);
    const hash = createHash("sha256");
    let first;
    let count = 0;
    let total = 0n;
    for await (const r of reqs) {
      if (first === undefined) {
        first = r;
        appendHeaders(ctx.responseHeader, r.responseHeaders);
        appendHeaders(ctx.responseTrailer, r.responseTrailers);
      }
      count++;
      total += BigInt(r.payload.length);
      hash.update(r.payload);
    }
    const delayMs = first?.delayMs ?? 0;
    await sleep(delayMs, ctx.signal);
    if (first?.error !== undefined) throw makeError(first.error);
    return {
      payload: pattern(first?.responseSize ?? 0),
      index: 0,
      requestHeaders,
      timeoutMs,
      messageCount: count,
      totalBytes: total,
      sha256: new Uint8Array(hash.digest()),
    };
  },

  async *bidi(reqs, ctx) {
    const timeoutMs = seenTimeout(ctx);
    const requestHeaders = receivedHeaders(ctx);
    let index = 0;
    for await (const r of reqs) {
      // Headers can only change until the first response is on its way.
      if (index === 0) appendHeaders(ctx.responseHeader, r.responseHeaders);
      appendHeaders(ctx.responseTrailer, r.responseTrailers);
      await sleep(r.delayMs, ctx.signal);
      if (r.error !== undefined) throw makeError(r.error);
      yield {
        payload: responsePayload(r),
        index,
        requestHeaders: index === 0 ? requestHeaders : [],
        timeoutMs,
      };
      index++;
    }
  },
  // unimplemented: left out on purpose; connect answers "unimplemented".
};

// ---------------------------------------------------------------------------
// Server

const opt = parseArgs(process.argv.slice(2));

const handler = connectNodeAdapter({
  routes(router) {
    router.service(TestService, testService);
    // The services of protoc-gen-conch's tests (stubgen.mjs).
    stubgenRoutes(router);
  },
  // gzip, br, zstd, deflate, snappy and the toy x-xor (compressions.mjs):
  // a response goes in the request's compression, else in the first of
  // the client's accepted list the server has.
  acceptCompression: allCompressions,
  compressMinBytes: 1024,
  readMaxBytes: MAX_MESSAGE_BYTES,
  writeMaxBytes: MAX_MESSAGE_BYTES,
  // conch always sends connect-protocol-version: 1; hold it to that.
  requireConnectProtocolHeader: true,
  contextValues(req) {
    return createContextValues().set(kRawHeaders, req.rawHeaders ?? []);
  },
});

const h2Options = {
  settings: {
    maxConcurrentStreams: 4096,
    initialWindowSize: 4 * MIB,
    maxFrameSize: 1 * MIB,
    maxHeaderListSize: 4 * MIB,
  },
  maxSessionMemory: 1024, // MB; the default 10 refuses streams under load
  maxHeaderListPairs: 4096,
  maxOutstandingPings: 64,
  // Rapid-reset protection: Node 20 cannot configure it (these two options
  // only exist in newer Node versions), so its nghttp2 defaults apply: a
  // connection that resets more than 1000 streams in a burst (refilled at
  // 33 per second) gets GOAWAY INTERNAL_ERROR.
  streamResetBurst: 100000,
  streamResetRate: 100000,
};

let server;
if (opt.http1) {
  if (opt.cert !== null) {
    server = https.createServer({
      cert: readFileSync(opt.cert),
      key: readFileSync(opt.key),
      ALPNProtocols: ["http/1.1"],
      ...(opt.clientCa !== null
        ? { ca: readFileSync(opt.clientCa), requestCert: true,
          rejectUnauthorized: true }
        : {}),
    }, handler);
  } else {
    server = http.createServer(handler);
  }
  server.keepAliveTimeout = 60000;
} else if (opt.cert !== null) {
  server = http2.createSecureServer({
    ...h2Options,
    cert: readFileSync(opt.cert),
    key: readFileSync(opt.key),
    allowHTTP1: false,
    ALPNProtocols: ["h2"],
    ...(opt.clientCa !== null
      ? { ca: readFileSync(opt.clientCa), requestCert: true,
        rejectUnauthorized: true }
      : {}),
  }, handler);
} else {
  server = http2.createServer(h2Options, handler);
}

if (!opt.http1) {
  server.on("session", (session) => {
    // Connection-level receive window (stream 0), beyond the 64 KiB default.
    session.on("connect", () => {
      try {
        session.setLocalWindowSize(32 * MIB);
      } catch {
        // The session may already be gone.
      }
    });
    session.on("error", () => {});
  });
}
server.on("error", (e) => {
  process.stderr.write(`server.mjs: ${e.stack ?? e}\n`);
  process.exit(1);
});
server.on("tlsClientError", () => {}); // expected in hostname/cert tests

function shutdown() {
  process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);

// Exit when the parent closes our stdin, but only when stdin is a pipe or
// socket (not /dev/null or a terminal, where "closed" says nothing).
let watchStdin = false;
try {
  const st = fstatSync(0);
  watchStdin = st.isFIFO() || st.isSocket();
} catch {
  watchStdin = false;
}
if (watchStdin) {
  process.stdin.on("data", () => {});
  process.stdin.on("end", shutdown);
  process.stdin.on("close", shutdown);
  process.stdin.on("error", shutdown);
}

server.listen(opt.port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
