// conch's fault server: an HTTP/2 peer that breaks the Connect protocol on
// purpose, one way per method of the made-up service conchfault.v1.Fault.
// Only Node's built-in modules; see README.md beside this file for every
// scenario, the bytes it sends and the code the client must report.
//
//   node server.mjs [--port N] [--tls-cert F --tls-key F] [--max-streams N]
//
// Listens on 127.0.0.1 (port 0, the default, picks a free port), HTTP/2
// cleartext with prior knowledge (or TLS with ALPN h2), and prints exactly
// one line "LISTENING <port>" to stdout once it accepts connections.  Exits
// on SIGTERM/SIGINT, and when its stdin (if a pipe or socket) closes.
import * as http2 from "node:http2";
import { fstatSync, readFileSync } from "node:fs";
import { Duplex } from "node:stream";
import { setTimeout as delay } from "node:timers/promises";
import * as tls from "node:tls";
import { promisify } from "node:util";
import { gzip } from "node:zlib";

const {
  NGHTTP2_NO_ERROR,
  NGHTTP2_INTERNAL_ERROR,
  NGHTTP2_CANCEL,
  NGHTTP2_REFUSED_STREAM,
} = http2.constants;

const PREFIX = "/conchfault.v1.Fault/";
const SLOW_HEADERS_MS = 5000;

// The small message every scenario sends: protobuf field 1 (bytes/string)
// = "ok", i.e. conchtest.v1.Response{payload: "ok"}.
const MSG = Buffer.from([0x0a, 0x02, 0x6f, 0x6b]);
// 64 MiB of zeros, gzipped once (about 64 KiB on the wire), in the
// background so that startup is not delayed.
const BOMB = promisify(gzip)(Buffer.alloc(64 * 1024 * 1024), { level: 9 });

const CT_PROTO = "application/proto";
const CT_STREAM_PROTO = "application/connect+proto";

// ---------------------------------------------------------------------------
// Command line

function usage(msg) {
  process.stderr.write(`server.mjs: ${msg}\n` +
    "usage: node server.mjs [--port N] [--tls-cert F --tls-key F] " +
    "[--max-streams N]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const opt = { port: 0, cert: null, key: null, maxStreams: 1000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--port") {
      const s = value();
      if (!/^[0-9]+$/.test(s) || Number(s) > 65535) usage(`bad port ${s}`);
      opt.port = Number(s);
    } else if (a === "--tls-cert") {
      opt.cert = value();
    } else if (a === "--tls-key") {
      opt.key = value();
    } else if (a === "--max-streams") {
      // A small SETTINGS_MAX_CONCURRENT_STREAMS makes clients queue calls.
      const s = value();
      if (!/^[0-9]+$/.test(s) || Number(s) < 1) usage(`bad stream count ${s}`);
      opt.maxStreams = Number(s);
    } else {
      usage(`unknown argument ${a}`);
    }
  }
  if ((opt.cert === null) !== (opt.key === null)) {
    usage("--tls-cert and --tls-key go together");
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Helpers

function envelope(flags, payload) {
  const b = Buffer.alloc(5 + payload.length);
  b[0] = flags;
  b.writeUInt32BE(payload.length, 1);
  payload.copy(b, 5);
  return b;
}

// A prefix that claims |len| bytes, without them.
function prefix(flags, len) {
  const b = Buffer.alloc(5);
  b[0] = flags;
  b.writeUInt32BE(len, 1);
  return b;
}

const END_OK = envelope(0x02, Buffer.from("{}"));

function readBody(stream) {
  return new Promise((resolve) => {
    const chunks = [];
    stream.on("data", (c) => chunks.push(c));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    // A reset stream never ends; nothing is answered then.
    stream.on("close", () => resolve(null));
  });
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Writes |data| on the stream and resolves once it has been handed to the
// HTTP/2 session (so a following RST/GOAWAY/close comes after it).
function write(stream, data) {
  return new Promise((resolve) => stream.write(data, () => resolve()));
}

function respond(stream, headers, opts) {
  if (!stream.destroyed) stream.respond(headers, opts);
}

// The sockets of every session: |tcp|, to destroy (the session's own socket
// handle refuses destroy()), and |frames|, to write raw frames to.  Under
// TLS, HTTP/2 runs over a JS stream spliced onto the TLS socket (see the
// end of this file) so raw writes queue in order instead of colliding with
// Node's native TLS writes.
const connections = new WeakMap();
let nextConnection = null; // set right before Node creates the session

function connectionOf(session) {
  return connections.get(session);
}

// Drops the connection abruptly -- no further frame, no GOAWAY of Node's
// own -- once everything already queued on the session has reached the
// peer.  A PING round trip proves that: its ACK comes after the frames
// queued before it.  (If no ACK arrives within a second, drop anyway.)
function killConnection(session) {
  const conn = connectionOf(session);
  let done = false;
  const kill = () => {
    if (done) return;
    done = true;
    if (conn !== undefined) conn.tcp.destroy();
    else session.destroy();
  };
  setTimeout(kill, 1000).unref();
  setImmediate(() => {
    if (session.destroyed || !session.ping(kill)) kill();
  });
}

// A GOAWAY frame written straight to the socket: Node's session.goaway()
// replaces a last-stream-id of 0 with the last stream it processed, so it
// cannot say "not even stream 1 was processed".  Only used right before
// killConnection(), so nghttp2 never learns of it.
function rawGoaway(session, lastStreamId, code) {
  const conn = connectionOf(session);
  if (conn === undefined) return false;
  const f = Buffer.alloc(9 + 8);
  f.writeUIntBE(8, 0, 3); // length
  f[3] = 0x07; // GOAWAY
  f[4] = 0; // flags
  f.writeUInt32BE(0, 5); // stream 0
  f.writeUInt32BE(lastStreamId & 0x7fffffff, 9);
  f.writeUInt32BE(code, 13);
  conn.frames.write(f);
  return true;
}

function isStreamRequest(headers) {
  return String(headers["content-type"] ?? "")
    .toLowerCase().startsWith("application/connect+");
}

// Splits complete envelopes off |buf|; returns [envelopes, rest].
function splitEnvelopes(buf) {
  const out = [];
  let off = 0;
  while (buf.length - off >= 5) {
    const len = buf.readUInt32BE(off + 1);
    if (buf.length - off - 5 < len) break;
    out.push(buf.subarray(off, off + 5 + len));
    off += 5 + len;
  }
  return [out, buf.subarray(off)];
}

// ---------------------------------------------------------------------------
// Correct answers (Echo, EchoStream, SlowHeaders)

async function echoUnary(stream, headers) {
  const body = await readBody(stream);
  if (body === null) return;
  const h = { ":status": 200, "content-type": headers["content-type"] ??
    CT_PROTO };
  if (headers["content-encoding"] !== undefined) {
    h["content-encoding"] = headers["content-encoding"];
  }
  respond(stream, h);
  stream.end(body);
}

function streamHeaders(headers) {
  const h = { ":status": 200, "content-type": headers["content-type"] };
  if (headers["connect-content-encoding"] !== undefined) {
    h["connect-content-encoding"] = headers["connect-content-encoding"];
  }
  return h;
}

// Echoes each request envelope as it arrives (full duplex), then {}.
function echoStream(stream, headers) {
  respond(stream, streamHeaders(headers));
  let pending = Buffer.alloc(0);
  stream.on("data", (c) => {
    const [envs, rest] = splitEnvelopes(Buffer.concat([pending, c]));
    pending = Buffer.from(rest);
    for (const e of envs) stream.write(e);
  });
  stream.on("end", () => {
    if (!stream.destroyed) stream.end(END_OK);
  });
}

async function slowHeaders(stream, headers) {
  const body = await readBody(stream);
  if (body === null) return;
  await sleep(SLOW_HEADERS_MS);
  if (stream.destroyed) return;
  if (!isStreamRequest(headers)) {
    const h = { ":status": 200, "content-type": headers["content-type"] ??
      CT_PROTO };
    if (headers["content-encoding"] !== undefined) {
      h["content-encoding"] = headers["content-encoding"];
    }
    respond(stream, h);
    stream.end(body);
    return;
  }
  respond(stream, streamHeaders(headers));
  stream.end(Buffer.concat([...splitEnvelopes(body)[0], END_OK]));
}

// ---------------------------------------------------------------------------
// Scenarios.  Each gets (stream, headers) after the request HEADERS; the
// ones that answer after the body call readBody() first.

// A streaming 200 answer whose body is |chunks| (then END_STREAM).
function streamAnswer(chunks, extraHeaders = {}) {
  return async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 200, "content-type": CT_STREAM_PROTO,
      ...extraHeaders });
    stream.end(Buffer.concat(chunks));
  };
}

// Headers and the first message (unary: the whole body, without END_STREAM)
// of a normal answer.
async function startAnswer(stream, headers) {
  if ((await readBody(stream)) === null) return false;
  if (isStreamRequest(headers)) {
    respond(stream, { ":status": 200, "content-type": CT_STREAM_PROTO });
    await write(stream, envelope(0x00, MSG));
  } else {
    respond(stream, { ":status": 200, "content-type": CT_PROTO });
    await write(stream, MSG);
  }
  return true;
}

// Node's stream.close(code) first ends the writable side (an empty DATA
// frame with END_STREAM) and whether the RST_STREAM still follows depends
// on timing.  stream.destroy(error) skips the END_STREAM and resets with
// INTERNAL_ERROR, or with CANCEL when the error is Node's own AbortError
// (whose class is only reachable through an API that throws one).
const AbortErrorClass = await delay(1, undefined,
  { signal: AbortSignal.abort() }).then(() => Error, (e) => e.constructor);

function rstAfterMessage(code) {
  return async (stream, headers) => {
    if (!(await startAnswer(stream, headers))) return;
    stream.destroy(code === NGHTTP2_CANCEL
      ? new AbortErrorClass()
      : new Error("fault: RST_STREAM INTERNAL_ERROR"));
  };
}

const scenarios = {
  Echo: echoUnary,
  EchoStream: echoStream,

  WrongContentType: async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 200, "content-type": "text/html" });
    stream.end("<html>");
  },

  WrongCodec: async (stream, headers) => {
    if ((await readBody(stream)) === null) return;
    if (isStreamRequest(headers)) {
      respond(stream, { ":status": 200,
        "content-type": "application/connect+json" });
      stream.end(Buffer.concat([envelope(0x00, Buffer.from("{}")), END_OK]));
    } else {
      respond(stream, { ":status": 200, "content-type": "application/json" });
      stream.end("{}");
    }
  },

  MissingEndStream: streamAnswer([envelope(0x00, MSG)]),

  BytesAfterEndStream: streamAnswer([envelope(0x00, MSG), END_OK,
    Buffer.from([0x00, 0x00, 0x00])]),

  TruncatedEnvelope: streamAnswer([prefix(0x00, 100), Buffer.alloc(10, 0x61)]),

  HugeLength: async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 200, "content-type": CT_STREAM_PROTO });
    // No END_STREAM: the stream stays open until the client gives up.
    stream.write(Buffer.concat([prefix(0x00, 0xffffffff),
      Buffer.alloc(16, 0x61)]));
  },

  BadGzip: streamAnswer([envelope(0x01, Buffer.from("this is not gzip")),
    END_OK], { "connect-content-encoding": "gzip" }),

  UnknownFlag: streamAnswer([envelope(0x40, MSG), END_OK]),

  RstMidStream: rstAfterMessage(NGHTTP2_INTERNAL_ERROR),
  RstCancel: rstAfterMessage(NGHTTP2_CANCEL),

  RstRefused: (stream) => {
    // Before reading the body and before any HEADERS: "not processed".
    stream.close(NGHTTP2_REFUSED_STREAM);
  },

  Goaway: async (stream) => {
    if ((await readBody(stream)) === null) return;
    const session = stream.session;
    // Stream ids of one client are odd and rising: id - 2 is the previous
    // one, 0 when this is the first.  This stream was never processed.
    const last = Math.max(0, stream.id - 2);
    if (!rawGoaway(session, last, NGHTTP2_NO_ERROR)) {
      session.goaway(NGHTTP2_NO_ERROR, last);
    }
    killConnection(session);
  },

  GoawayAfterHeaders: async (stream, headers) => {
    if (!(await startAnswer(stream, headers))) return;
    const session = stream.session;
    session.goaway(NGHTTP2_NO_ERROR, stream.id);
    killConnection(session);
  },

  CloseMidMessage: async (stream, headers) => {
    if ((await readBody(stream)) === null) return;
    const session = stream.session;
    if (isStreamRequest(headers)) {
      respond(stream, { ":status": 200, "content-type": CT_STREAM_PROTO });
      // 7 of the envelope's 9 bytes: the prefix and half the payload.
      await write(stream, envelope(0x00, MSG).subarray(0, 7));
    } else {
      respond(stream, { ":status": 200, "content-type": CT_PROTO,
        "content-length": String(MSG.length) });
      await write(stream, MSG.subarray(0, 2));
    }
    killConnection(session);
  },

  NeverAnswer: async (stream) => {
    await readBody(stream);
  },

  SlowHeaders: slowHeaders,

  EndStreamBadJson: streamAnswer([envelope(0x02, Buffer.from("{not json"))]),

  EndStreamMetadataWrongType: streamAnswer([envelope(0x02,
    Buffer.from('{"metadata":{"x":"notarray"}}'))]),

  UnaryGzipBomb: async (stream) => {
    if ((await readBody(stream)) === null) return;
    const bomb = await BOMB;
    respond(stream, { ":status": 200, "content-type": CT_PROTO,
      "content-encoding": "gzip" });
    stream.end(bomb);
  },

  StreamGzipBomb: async (stream, headers) => {
    const bomb = await BOMB;
    return streamAnswer([envelope(0x01, bomb), END_OK],
      { "connect-content-encoding": "gzip" })(stream, headers);
  },

  UnaryErrorJson: async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 503, "content-type": "application/json" });
    stream.end('{"code":"resource_exhausted","message":"m"}');
  },

  UnaryHtml503: async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 503, "content-type": "text/html" });
    stream.end("<html><body>503 Service Unavailable</body></html>");
  },

  // The first request with a given x-fault-key header is refused
  // unprocessed (RST_STREAM REFUSED_STREAM, or a GOAWAY below its stream id
  // and a closed connection); later ones are echoed.  A client that retries
  // refused streams transparently succeeds.
  RefuseOnce: async (stream, headers) => {
    if (firstTime(headers)) {
      stream.close(NGHTTP2_REFUSED_STREAM);
      return;
    }
    await echoAny(stream, headers);
  },

  GoawayOnce: async (stream, headers) => {
    if (firstTime(headers)) {
      await scenarios.Goaway(stream, headers);
      return;
    }
    await echoAny(stream, headers);
  },

  Http400Stream: async (stream) => {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 400 }, { endStream: true });
  },
};

const seenKeys = new Set();

function firstTime(headers) {
  const key = String(headers["x-fault-key"] ?? "");
  if (seenKeys.has(key)) return false;
  seenKeys.add(key);
  return true;
}

// Echo for unary requests, EchoStream for streaming ones.
async function echoAny(stream, headers) {
  const ctype = String(headers["content-type"] ?? "");
  if (ctype.startsWith("application/connect+")) {
    await scenarios.EchoStream(stream, headers);
  } else {
    await scenarios.Echo(stream, headers);
  }
}

async function onStream(stream, headers) {
  stream.on("error", () => {}); // resets are part of the game
  const path = String(headers[":path"] ?? "");
  const name = path.startsWith(PREFIX) ? path.slice(PREFIX.length) : "";
  const scenario = Object.hasOwn(scenarios, name) ? scenarios[name] : null;
  if (scenario === null) {
    if ((await readBody(stream)) === null) return;
    respond(stream, { ":status": 404 }, { endStream: true });
    return;
  }
  try {
    await scenario(stream, headers);
  } catch (e) {
    process.stderr.write(`fault server: ${name}: ${e.stack ?? e}\n`);
    if (!stream.destroyed) stream.close(NGHTTP2_INTERNAL_ERROR);
  }
}

// ---------------------------------------------------------------------------
// Server

const opt = parseArgs(process.argv.slice(2));
const h2Options = {
  settings: {
    maxConcurrentStreams: opt.maxStreams,
    initialWindowSize: 1024 * 1024,
  },
  maxSessionMemory: 256,
};
const server = http2.createServer(h2Options);
server.on("stream", (stream, headers) => {
  onStream(stream, headers);
});

// A pair of connected in-memory duplex streams.
function duplexPair() {
  const mk = () => new Duplex({
    read() {},
    write(chunk, encoding, cb) {
      peer(this).push(chunk);
      cb();
    },
    final(cb) {
      peer(this).push(null);
      cb();
    },
    destroy(err, cb) {
      peer(this).destroy();
      cb(err);
    },
  });
  const a = mk();
  const b = mk();
  const peer = (x) => (x === a ? b : a);
  return [a, b];
}

let listener;
if (opt.cert === null) {
  server.prependListener("connection", (sock) => {
    nextConnection = { tcp: sock, frames: sock };
  });
  listener = server;
} else {
  listener = tls.createServer({ cert: readFileSync(opt.cert),
    key: readFileSync(opt.key), ALPNProtocols: ["h2"] }, (tlsSock) => {
    const [inner, outer] = duplexPair();
    tlsSock.on("error", () => tlsSock.destroy());
    tlsSock.on("close", () => outer.destroy());
    outer.on("error", () => {});
    inner.on("error", () => {});
    tlsSock.pipe(outer);
    outer.on("data", (c) => tlsSock.write(c));
    outer.on("end", () => tlsSock.end());
    nextConnection = { tcp: tlsSock, frames: tlsSock };
    server.emit("connection", inner);
  });
  listener.on("tlsClientError", () => {});
}
server.on("session", (session) => {
  if (nextConnection !== null) connections.set(session, nextConnection);
  nextConnection = null;
  session.on("error", () => {});
});
listener.on("error", (e) => {
  process.stderr.write(`fault server: ${e.stack ?? e}\n`);
  process.exit(1);
});

function shutdown() {
  process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);

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

listener.listen(opt.port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${listener.address().port}\n`);
});
