// A ConformanceService server (proto/conformance/v1/service.proto) on
// connect-node, standing in for the conformance suite's reference server
// when conch's conformance client is tested.
//
//   node server.mjs [--tls-cert F --tls-key F [--tls-client-ca F]] [--http1]
//
// Listens on 127.0.0.1 (a free port) and prints one line "LISTENING <port>"
// to stdout once it accepts connections.  Connect, gRPC and gRPC-Web share
// the port; HTTP/2 only: cleartext with prior knowledge (h2c) by default,
// TLS with ALPN "h2" with --tls-cert/--tls-key, and then a client
// certificate signed by F is required with --tls-client-ca.  Exits on
// SIGTERM/SIGINT, and when its stdin (a pipe or socket) closes.  With
// --http1 it speaks HTTP/1.1 instead (cleartext, or TLS with ALPN
// "http/1.1"): the suite's HTTP/1.1 cases (Connect and gRPC-Web; no
// full-duplex bidi).
//
// Behaviour, as the reference server's (connectrpc/conformance
// internal/app/referenceserver), restated:
// * Every method echoes a RequestInfo: the request headers it received
//   (one value per received field, pseudo-headers left out), the deadline
//   it saw on entering the handler (milliseconds left, truncated; absent
//   without one; the reference reads it later, when it echoes) and the
//   requests as Any messages.
// * Unary, IdempotentUnary, ClientStream (answer after the client
//   half-closed, with every request in the RequestInfo): no definition ⇒ a
//   payload with only the RequestInfo; an error ⇒ that error, with the
//   RequestInfo appended to its details, at once; data ⇒ the payload after
//   response_delay_ms.  Headers and trailers as defined, also with errors.
// * ServerStream: one response per data item, each after the delay, the
//   RequestInfo in the first; then the error if any (RequestInfo appended
//   when no response went out).
// * BidiStream: the first request's definition and full_duplex.  Full
//   duplex: each request received is answered by the next data item (after
//   the delay), echoing the requests since the previous response (the first
//   with headers and deadline too); a request with no item left stops the
//   reading.  Half duplex: everything is read first.  Items left over go
//   out next; then the error (RequestInfo appended when no response went
//   out).
// * Unimplemented: not implemented (unimplemented).
// * raw_response in a definition: the HTTP response is written exactly as
//   described (status, headers, unary or envelope-framed body, trailers)
//   instead of the RPC's own; streams read all requests first.  Node's
//   HTTP/2 cannot send a status outside 100..599 (such a raw response
//   resets the stream instead).
// Requests are checked as the reference server checks them (protocol,
// codec, compression, TLS and client certificate against the runner's
// x-expect-* headers; te for gRPC; timeout header syntax; one request per
// test case; no request trailers): each problem is a line
// "FEEDBACK {"test": ..., "message": ...}" on stdout, after LISTENING.
// Response compression: the request's (gzip, br, zstd, deflate or snappy),
// else the first of the client's accepted list, for every message
// (connect-go's default compress-min-bytes, 0).  Where connect-node's wire
// forms differ from connect-go's: headers go out with the first response
// message, not ahead of delays; gRPC-Web errors always end with a trailers
// frame (connect-go answers trailers-only when there are no custom
// headers).
import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { fstatSync, readFileSync } from "node:fs";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";

import { create, createRegistry, toBinary } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
} from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from
  "@connectrpc/connect-node";

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
import { Compression } from "./gen/conformance/v1/config_pb.js";
// deflate, zstd and snappy as the interop peer speaks them (Node's zlib,
// @mongodb-js/zstd, the snappy package's frame format): its workspace
// package, a dependency of ours (tests/package.json).
import {
  compressionDeflate,
  compressionSnappy,
  compressionZstd,
} from "conch-interop-node/compressions.mjs";

// ---------------------------------------------------------------------------
// Command line

function usage(msg) {
  process.stderr.write(
    `server.mjs: ${msg}\n` +
      "usage: node server.mjs [--tls-cert F --tls-key F [--tls-client-ca F]] " +
      "[--http1]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opt = { cert: null, key: null, clientCa: null, http1: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--http1") {
      opt.http1 = true;
      continue;
    }
    if (i + 1 >= argv.length) usage(`${a} needs a value`);
    switch (a) {
      case "--tls-cert":
        opt.cert = argv[++i];
        break;
      case "--tls-key":
        opt.key = argv[++i];
        break;
      case "--tls-client-ca":
        opt.clientCa = argv[++i];
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
// Per-request context: the raw header list (connect's Headers object merges
// repeated fields) and the slot through which a handler takes over the
// HTTP response for a raw_response.

const kRequest = createContextKey(null, { description: "request slot" });

// The deadline as the handler sees it on entry: what the request carried,
// less the time it took to reach the handler.  (Taken on entry rather than
// when the echo is built, so that a slow request stream under load does
// not eat into it; the suite allows 500 ms.)
function seenTimeout(ctx) {
  const t = ctx.timeoutMs();
  return t === undefined ? undefined : BigInt(Math.max(0, Math.floor(t)));
}

function requestInfo(ctx, requests, timeoutMs) {
  const slot = ctx.values.get(kRequest);
  const byName = new Map();
  const raw = slot?.rawHeaders ?? [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = String(raw[i]).toLowerCase();
    if (name.startsWith(":")) continue;
    if (!byName.has(name)) byName.set(name, []);
    byName.get(name).push(String(raw[i + 1]));
  }
  const init = {
    requestHeaders: [...byName].map(([name, value]) => ({ name, value })),
    requests,
    timeoutMs,
  };
  if (ctx.requestMethod === "GET") {
    const params = new Map();
    for (const [k, v] of new URL(ctx.url).searchParams) {
      if (!params.has(k)) params.set(k, []);
      params.get(k).push(v);
    }
    init.connectGetInfo = {
      queryParams: [...params].map(([name, value]) => ({ name, value })),
    };
  }
  return create(ConformancePayload_RequestInfoSchema, init);
}

function addHeaders(target, list) {
  for (const h of list ?? []) {
    for (const v of h.value) target.append(h.name, v);
  }
}

function abortError(signal) {
  const r = signal.reason;
  return r instanceof ConnectError
    ? r
    : new ConnectError("call aborted", Code.Canceled);
}

// Waits |ms| unless the call is aborted first.
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

// The requested error as a ConnectError, with |info| (if any) appended to
// its details.
function makeError(err, info) {
  const details = err.details.map((d) => ({
    type: d.typeUrl.slice(d.typeUrl.lastIndexOf("/") + 1),
    value: d.value,
  }));
  if (info !== undefined) {
    details.push({
      type: ConformancePayload_RequestInfoSchema.typeName,
      value: toBinary(ConformancePayload_RequestInfoSchema, info),
    });
  }
  return new ConnectError(err.message ?? "", err.code, undefined, details);
}

// ---------------------------------------------------------------------------
// Raw responses

async function contents(mc) {
  let bytes;
  switch (mc?.data.case) {
    case "binary":
      bytes = mc.data.value;
      break;
    case "text":
      bytes = Buffer.from(mc.data.value, "utf8");
      break;
    case "binaryMessage":
      bytes = mc.data.value.value;
      break;
    default:
      bytes = new Uint8Array(0);
  }
  switch (mc?.compression ?? Compression.UNSPECIFIED) {
    case Compression.GZIP:
      return gzipSync(bytes);
    case Compression.BR:
      return brotliCompressSync(bytes);
    case Compression.DEFLATE:
      return deflateSync(bytes);
    case Compression.ZSTD:
      return Buffer.from(await compressionZstd.compress(bytes));
    case Compression.SNAPPY:
      return Buffer.from(await compressionSnappy.compress(bytes));
    default:
      return Buffer.from(bytes);
  }
}

async function rawBody(raw) {
  switch (raw.body.case) {
    case "unary":
      return await contents(raw.body.value);
    case "stream": {
      const parts = [];
      for (const item of raw.body.value.items) {
        const payload = await contents(item.payload);
        const prefix = Buffer.alloc(5);
        prefix[0] = item.flags & 0xff;
        prefix.writeUInt32BE(item.length ?? payload.length, 1);
        parts.push(prefix, payload);
      }
      return Buffer.concat(parts);
    }
    default:
      return null;
  }
}

function headerObject(list, init) {
  const obj = init;
  for (const h of list) {
    const name = h.name.toLowerCase();
    obj[name] = [...(obj[name] ?? []), ...h.value];
  }
  return obj;
}

// Writes |raw| as the response of |slot| and keeps connect-node from
// writing anything after it.  Through Node's compatibility API, whose own
// trailer handling owns the stream.  With trailers the headers are sent
// first, so that even without a body there are two header blocks; without
// trailers end() sends headers and body together, or the headers alone
// with END_STREAM (a gRPC trailers-only response).
async function sendRaw(slot, raw) {
  const res = slot.res;
  slot.raw = true;
  try {
    const body = await rawBody(raw);
    for (const [name, value] of Object.entries(headerObject(raw.headers, {}))) {
      res.setHeader(name, value);
    }
    res.statusCode = raw.statusCode || 200;
    if (raw.trailers.length > 0) {
      res.writeHead(res.statusCode);
      res.addTrailers(headerObject(raw.trailers, {}));
    }
    res.end(body ?? undefined);
  } catch (e) {
    process.stderr.write(`server.mjs: raw response: ${e.message}\n`);
    if (res.stream !== undefined) {
      res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    } else {
      res.destroy();
    }
  }
  return new ConnectError("raw response sent instead", Code.Aborted);
}

// The response object connect-node writes to: the real one, until a
// handler sent a raw response; from then on its writes go nowhere.
function guardResponse(slot) {
  const ended = [];
  return new Proxy(slot.res, {
    get(target, prop) {
      if (slot.raw) {
        switch (prop) {
          case "headersSent":
            return true;
          case "writeHead":
          case "addTrailers":
          case "setHeader":
          case "flush":
            return () => {};
          case "write":
            return (data, enc, cb) => {
              if (typeof cb === "function") queueMicrotask(() => cb());
              return true;
            };
          case "once":
          case "on":
            return (event, fn) => {
              if (event === "end" || event === "finish") ended.push(fn);
            };
          case "end":
            return () => {
              for (const fn of ended.splice(0)) queueMicrotask(fn);
            };
          default:
            break;
        }
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

// ---------------------------------------------------------------------------
// The service

async function unaryLike(schema, req, ctx) {
  const info = requestInfo(ctx, [anyPack(schema, req)], seenTimeout(ctx));
  return answerUnary(req.responseDefinition, info, ctx);
}

// The one answer of Unary, IdempotentUnary and ClientStream.
async function answerUnary(def, info, ctx) {
  if (def === undefined) return { payload: { requestInfo: info } };
  if (def.rawResponse !== undefined) {
    throw await sendRaw(ctx.values.get(kRequest), def.rawResponse);
  }
  addHeaders(ctx.responseHeader, def.responseHeaders);
  addHeaders(ctx.responseTrailer, def.responseTrailers);
  if (def.response.case === "error") throw makeError(def.response.value, info);
  await sleep(def.responseDelayMs, ctx.signal);
  const data =
    def.response.case === "responseData" ? def.response.value : undefined;
  return { payload: { data, requestInfo: info } };
}

const service = {
  unary(req, ctx) {
    return unaryLike(UnaryRequestSchema, req, ctx);
  },

  idempotentUnary(req, ctx) {
    return unaryLike(IdempotentUnaryRequestSchema, req, ctx);
  },

  async clientStream(reqs, ctx) {
    const timeout = seenTimeout(ctx);
    const requests = [];
    let def;
    for await (const r of reqs) {
      if (requests.length === 0) def = r.responseDefinition;
      requests.push(anyPack(ClientStreamRequestSchema, r));
    }
    return answerUnary(def, requestInfo(ctx, requests, timeout), ctx);
  },

  async *serverStream(req, ctx) {
    const def = req.responseDefinition;
    if (def === undefined) return;
    if (def.rawResponse !== undefined) {
      throw await sendRaw(ctx.values.get(kRequest), def.rawResponse);
    }
    const info = requestInfo(ctx, [anyPack(ServerStreamRequestSchema, req)],
      seenTimeout(ctx));
    addHeaders(ctx.responseHeader, def.responseHeaders);
    addHeaders(ctx.responseTrailer, def.responseTrailers);
    let sent = 0;
    for (const data of def.responseData) {
      await sleep(def.responseDelayMs, ctx.signal);
      yield { payload: { data, requestInfo: sent === 0 ? info : undefined } };
      sent++;
    }
    if (def.error !== undefined) {
      throw makeError(def.error, sent === 0 ? info : undefined);
    }
  },

  async *bidiStream(reqs, ctx) {
    const timeout = seenTimeout(ctx);
    let def;
    let fullDuplex = false;
    let requests = [];
    let sent = 0;
    let first = true;
    for await (const r of reqs) {
      requests.push(anyPack(BidiStreamRequestSchema, r));
      if (first) {
        first = false;
        def = r.responseDefinition;
        fullDuplex = r.fullDuplex;
        if (def?.rawResponse !== undefined) {
          for await (const _ of reqs) {
            // Drained before the raw response, as the reference does.
          }
          throw await sendRaw(ctx.values.get(kRequest), def.rawResponse);
        }
        addHeaders(ctx.responseHeader, def?.responseHeaders);
        addHeaders(ctx.responseTrailer, def?.responseTrailers);
      }
      if (!fullDuplex) continue;
      const items = def?.responseData ?? [];
      if (sent >= items.length) break;
      const info =
        sent === 0
          ? requestInfo(ctx, requests, timeout)
          : create(ConformancePayload_RequestInfoSchema, { requests });
      await sleep(def.responseDelayMs, ctx.signal);
      yield { payload: { data: items[sent], requestInfo: info } };
      sent++;
      requests = [];
    }
    if (def === undefined) return;
    for (; sent < def.responseData.length; sent++) {
      await sleep(def.responseDelayMs, ctx.signal);
      yield {
        payload: {
          data: def.responseData[sent],
          requestInfo: sent === 0 ? requestInfo(ctx, requests, timeout)
            : undefined,
        },
      };
    }
    if (def.error !== undefined) {
      throw makeError(def.error,
        sent === 0 ? requestInfo(ctx, requests, timeout) : undefined);
    }
  },
  // unimplemented: left out; connect answers "unimplemented".
};

// ---------------------------------------------------------------------------
// Server

const opt = parseArgs(process.argv.slice(2));
const slots = new WeakMap();

const connectHandler = connectNodeAdapter({
  routes(router) {
    router.service(ConformanceService, service);
  },
  acceptCompression: [compressionGzip, compressionBrotli, compressionZstd,
    compressionDeflate, compressionSnappy],
  compressMinBytes: 0,
  // The JSON codec writes RequestInfo.requests (google.protobuf.Any) with
  // the suite's types, as the reference server does (Go's global registry).
  jsonOptions: { registry: createRegistry(file_conformance_v1_service) },
  contextValues(req) {
    return createContextValues().set(kRequest, slots.get(req) ?? null);
  },
});

// ---------------------------------------------------------------------------
// Checks of the client's requests, as the reference server makes them
// (referenceserver/checks.go): the runner adds x-test-case-name and
// x-expect-* headers to every request, and each mismatch is reported as a
// line "FEEDBACK {"test": ..., "message": ...}" on stdout, which fails the
// test case in the runner.

const callsPerTest = new Map();

// The values of |name| as separate fields.
function fieldValues(raw, name) {
  const out = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (String(raw[i]).toLowerCase() === name) out.push(String(raw[i + 1]));
  }
  return out;
}

function protocolOf(ct) {
  if (ct === "application/grpc" || ct.startsWith("application/grpc+")) {
    return 2;
  }
  if (ct === "application/grpc-web" || ct.startsWith("application/grpc-web+")) {
    return 3;
  }
  return ct.startsWith("application/") ? 1 : 0;
}

function codecOf(ct) {
  if (ct === "application/grpc" || ct === "application/grpc-web") {
    return "proto";
  }
  for (const p of ["application/grpc+", "application/grpc-web+",
    "application/connect+", "application/"]) {
    if (ct.startsWith(p)) return ct.slice(p.length);
  }
  return null;
}

const COMPRESSION_NAMES = ["", "identity", "gzip", "br", "zstd", "deflate",
  "snappy"];
const CODEC_NAMES = ["", "proto", "json"];

// Returns the test case name, or null after answering the request itself.
function checkRequest(req, res) {
  const raw = req.rawHeaders ?? [];
  const one = (name, feedback) => {
    const v = fieldValues(raw, name);
    if (v.length > 1 && feedback) {
      feedback(`${name} header appears ${v.length} times; should appear ` +
        "just once");
    }
    return v[0];
  };
  const test = one("x-test-case-name", null);
  if (test === undefined) {
    res.writeHead(400, { "content-type": "text/plain" });
    res.end("missing x-test-case-name header\n");
    return null;
  }
  const feedback = (message) => {
    process.stdout.write(`FEEDBACK ${JSON.stringify({ test, message })}\n`);
  };
  const count = (callsPerTest.get(test) ?? 0) + 1;
  callsPerTest.set(test, count);
  if (count > 1) {
    feedback(`client sent another request (#${count}) for the same test case`);
  }
  const version = one("x-expect-http-version", feedback);
  if (version !== undefined && Number(version) !== req.httpVersionMajor) {
    feedback(`expected HTTP version ${version}; instead got ` +
      `${req.httpVersionMajor}`);
  }
  let ct = one("content-type", feedback) ?? "";
  let getEncoding;
  if (req.method === "GET") {
    // A Connect GET has no body and no content-type: the query says it.
    const q = new URL(req.url ?? "/", "http://x").searchParams;
    if (q.get("connect") !== "v1") {
      feedback(`GET without connect=v1 in the query ("${req.url}")`);
    }
    if (ct !== "") feedback("GET request with a content-type");
    const enc = q.get("encoding");
    if (enc === null) feedback("GET without encoding in the query");
    if (q.get("message") === null) feedback("GET without message");
    ct = q.get("connect") === "v1" && enc !== null ? `application/${enc}` : "";
    getEncoding = q.get("compression") ?? "identity";
  }
  const protocol = one("x-expect-protocol", feedback);
  if (protocol !== undefined) {
    const got = protocolOf(ct);
    if (got !== Number(protocol)) {
      feedback(`expected protocol ${protocol}; instead got ${got} ` +
        `(content-type "${ct}")`);
    } else if (got === 2 && one("te", feedback) !== "trailers") {
      feedback("gRPC protocol client should use 'te: trailers' header");
    }
  }
  if (protocol === "1") {
    const t = one("connect-timeout-ms", feedback);
    if (t !== undefined && !/^[0-9]{1,10}$/.test(t)) {
      feedback(`invalid value for "connect-timeout-ms" header: "${t}"`);
    }
  } else if (protocol !== undefined) {
    const t = one("grpc-timeout", feedback);
    if (t !== undefined && !/^[0-9]{1,8}[HMSmun]$/.test(t)) {
      feedback(`invalid value for "grpc-timeout" header: "${t}"`);
    }
  }
  const codec = one("x-expect-codec", feedback);
  if (codec !== undefined && codecOf(ct) !== CODEC_NAMES[Number(codec)]) {
    feedback(`expected codec ${CODEC_NAMES[Number(codec)]}; instead got ` +
      `${codecOf(ct)}`);
  }
  const compression = one("x-expect-compression", feedback);
  if (compression !== undefined) {
    const header = protocolOf(ct) >= 2 ? "grpc-encoding"
      : ct.startsWith("application/connect+") ? "connect-content-encoding"
        : "content-encoding";
    const got = getEncoding ?? one(header, feedback) ?? "identity";
    const want = COMPRESSION_NAMES[Number(compression)];
    if (got !== want) {
      feedback(`expected compression ${want}; instead got ${got} (${header})`);
    }
  }
  const tls = one("x-expect-tls", feedback);
  const encrypted = !!req.socket.encrypted;
  if (tls !== undefined && (tls === "true") !== encrypted) {
    feedback(encrypted ? "expecting plain-text request but instead was TLS"
      : "expecting TLS request but instead was plain-text");
  }
  if (encrypted) {
    const want = one("x-expect-client-cert", feedback) ?? "";
    const got = req.socket.getPeerCertificate()?.subject?.CN ?? "";
    if (want !== got) {
      feedback(`expecting client cert "${want}", instead was "${got}"`);
    }
  }
  const method = one("x-expect-http-method", feedback);
  if (method !== req.method) {
    feedback(`expected HTTP method "${method}", got "${req.method}"`);
  }
  req.once("end", () => {
    if (Object.keys(req.trailers ?? {}).length > 0) {
      feedback("request should NOT include any HTTP trailers");
    }
  });
  return test;
}

function handler(req, res) {
  if (checkRequest(req, res) === null) return;
  if (req.httpVersionMajor === 1) {
    // connect-node answers every bidi call over HTTP/1.1 with 505; the
    // reference server (connect-go) serves them half duplex, as the suite
    // expects.  The version is read only for that check.
    Object.defineProperty(req, "httpVersion", { value: "2.0" });
  }
  const slot = { rawHeaders: req.rawHeaders ?? [], res, raw: false };
  slots.set(req, slot);
  connectHandler(req, guardResponse(slot));
}

const h2Options = {
  settings: { maxConcurrentStreams: 1000 },
  maxSessionMemory: 256,
};

const tlsClientCa = opt.clientCa !== null
  ? { ca: readFileSync(opt.clientCa), requestCert: true,
    rejectUnauthorized: true }
  : {};
let server;
if (opt.http1 && opt.cert !== null) {
  server = https.createServer({
    cert: readFileSync(opt.cert),
    key: readFileSync(opt.key),
    ALPNProtocols: ["http/1.1"],
    ...tlsClientCa,
  }, handler);
} else if (opt.http1) {
  server = http.createServer(handler);
} else if (opt.cert !== null) {
  server = http2.createSecureServer({
    ...h2Options,
    cert: readFileSync(opt.cert),
    key: readFileSync(opt.key),
    allowHTTP1: false,
    ALPNProtocols: ["h2"],
    ...tlsClientCa,
  }, handler);
} else {
  server = http2.createServer(h2Options, handler);
}
if (opt.http1) {
  // As Go's http.Server (the reference server's): idle connections are
  // kept, not closed after Node's 5 s, which races a client's next request
  // on them.
  server.keepAliveTimeout = 0;
}

server.on("session", (session) => session.on("error", () => {}));
server.on("error", (e) => {
  process.stderr.write(`server.mjs: ${e.stack ?? e}\n`);
  process.exit(1);
});
server.on("tlsClientError", () => {}); // expected in the certificate tests

function shutdown() {
  process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);

// Exit when the parent closes our stdin, when that is a pipe or socket.
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

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
