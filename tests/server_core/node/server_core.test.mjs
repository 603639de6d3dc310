// The server core of libconch (conch/server.h) called by clients nobody
// here wrote: connect-node in its three protocols (Connect, gRPC,
// gRPC-Web), binary and JSON, with and without gzip, every stream kind;
// Connect and gRPC-Web also over HTTP/1.1 (httpVersion "1.1"); then raw
// HTTP/2 requests for what no well-behaved client sends (wrong content
// type, unknown compression, bad timeout, GET), and a raw HTTP/1.1 one.  The
// server is tests/server_core/peer.c ($CONCH_SERVER_CORE_PEER).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import * as http from "node:http";
import * as http2 from "node:http2";

import { create } from "@bufbuild/protobuf";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  compressionGzip,
} from "@connectrpc/connect-node";

import {
  TestService,
  ErrorDetailSchema,
} from "../../interop/node/gen/conchtest/v1/test_pb.js";

const bin = process.env.CONCH_SERVER_CORE_PEER;
let server;
let port;

before(async () => {
  assert.ok(bin, "CONCH_SERVER_CORE_PEER is not set");
  server = spawn(bin, [], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: server.stdout });
  port = await new Promise((resolve, reject) => {
    server.once("exit", (code) => reject(new Error(`peer exited: ${code}`)));
    lines.on("line", (line) => {
      const m = /^LISTENING (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
  });
});

after(async () => {
  const exited = new Promise((resolve) => server.once("exit", resolve));
  server.stdin.end(); // graceful shutdown
  const code = await exited;
  assert.equal(code, 0);
});

const makers = {
  connect: createConnectTransport,
  grpc: createGrpcTransport,
  "grpc-web": createGrpcWebTransport,
};

function clientForHttp(proto, binary, gzip, http) {
  const transport = makers[proto]({
    baseUrl: `http://127.0.0.1:${port}`,
    httpVersion: http,
    useBinaryFormat: binary,
    sendCompression: gzip ? compressionGzip : undefined,
    acceptCompression: gzip ? [compressionGzip] : [],
  });
  return createClient(TestService, transport);
}

const enc = new TextEncoder();
const dec = new TextDecoder();

// HTTP/2, and HTTP/1.1 for the protocols that do not need trailers (the
// server tells the two apart by the first bytes).
const runs = [];
for (const proto of Object.keys(makers)) {
  for (const http of proto === "grpc" ? ["2"] : ["2", "1.1"]) {
    runs.push([proto, http]);
  }
}

for (const [proto, http] of runs) {
  for (const binary of [true, false]) {
    for (const gzip of [false, true]) {
      const name = `${proto}${http === "1.1" ? " http/1.1" : ""} ${binary ? "binary" : "json"}${gzip ? " gzip" : ""}`;
      const clientFor = (p, b, g) => clientForHttp(p, b, g, http);

      test(`${name}: unary with metadata`, async () => {
        const client = clientFor(proto, binary, gzip);
        let headers, trailers;
        const res = await client.unary(
          {
            payload: enc.encode("x".repeat(5000)),
            responseHeaders: [{ name: "x-resp", values: [enc.encode("h1")] }],
            responseTrailers: [{ name: "x-trl", values: [enc.encode("t1")] }],
          },
          {
            headers: { "x-echo": "hello" },
            timeoutMs: 30000,
            onHeader: (h) => (headers = h),
            onTrailer: (t) => (trailers = t),
          },
        );
        assert.equal(dec.decode(res.payload), "x".repeat(5000));
        assert.equal(res.requestHeaders[0].name, "x-echo");
        assert.equal(dec.decode(res.requestHeaders[0].values[0]), "hello");
        assert.ok(res.timeoutMs > 20000 && res.timeoutMs <= 30000);
        assert.equal(headers.get("x-resp"), "h1");
        assert.equal(trailers.get("x-trl"), "t1");
      });

      test(`${name}: server stream`, async () => {
        const client = clientFor(proto, binary, gzip);
        const got = [];
        for await (const r of client.serverStream({
          responseCount: 4,
          responseSize: 30000,
        })) {
          got.push(r.index);
          assert.equal(r.payload.length, 30000);
        }
        assert.deepEqual(got, [0, 1, 2, 3]);
      });

      test(`${name}: client stream`, async () => {
        const client = clientFor(proto, binary, gzip);
        async function* reqs() {
          for (let i = 0; i < 5; i++) yield { payload: new Uint8Array(i * 10) };
        }
        const res = await client.clientStream(reqs());
        assert.equal(res.messageCount, 5);
        assert.equal(Number(res.totalBytes), 100);
      });

      test(`${name}: bidi`, async () => {
        const client = clientFor(proto, binary, gzip);
        async function* reqs() {
          for (let i = 0; i < 3; i++) yield { payload: enc.encode(`m${i}`) };
        }
        const got = [];
        for await (const r of client.bidi(reqs())) {
          got.push(`${r.index}:${dec.decode(r.payload)}`);
        }
        assert.deepEqual(got, ["0:m0", "1:m1", "2:m2"]);
      });

      test(`${name}: error with details`, async () => {
        const client = clientFor(proto, binary, gzip);
        const detail = create(ErrorDetailSchema, {
          type: "t",
          value: enc.encode("v"),
        });
        await assert.rejects(
          client.unary({
            error: {
              code: Code.NotFound,
              message: "no such thing",
              details: [
                {
                  type: "type.googleapis.com/conchtest.v1.ErrorDetail",
                  value: (await import("@bufbuild/protobuf")).toBinary(
                    ErrorDetailSchema,
                    detail,
                  ),
                },
              ],
            },
          }),
          (err) => {
            const e = ConnectError.from(err);
            assert.equal(e.code, Code.NotFound);
            assert.equal(e.rawMessage, "no such thing");
            const d = e.findDetails(ErrorDetailSchema);
            assert.equal(d.length, 1);
            assert.equal(d[0].type, "t");
            assert.equal(dec.decode(d[0].value), "v");
            return true;
          },
        );
      });

      test(`${name}: unknown method`, async () => {
        const client = clientFor(proto, binary, gzip);
        await assert.rejects(client.unimplemented({}), (err) => {
          assert.equal(ConnectError.from(err).code, Code.Unimplemented);
          return true;
        });
      });

      test(`${name}: deadline`, async () => {
        const client = clientFor(proto, binary, gzip);
        await assert.rejects(
          client.unary({ delayMs: 1 }, { timeoutMs: 300 }),
          (err) => {
            assert.equal(ConnectError.from(err).code, Code.DeadlineExceeded);
            return true;
          },
        );
      });
    }
  }
}

function clientFor(proto, binary, gzip) {
  return clientForHttp(proto, binary, gzip, "2");
}

// Raw HTTP/2: what the server answers to requests no client library sends.
function h2request(headers, body) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", reject);
    const req = session.request(headers);
    const chunks = [];
    let head;
    let trailers = {};
    req.on("response", (h) => (head = h));
    req.on("trailers", (t) => (trailers = t));
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      session.close();
      resolve({ head, trailers, body: Buffer.concat(chunks) });
    });
    req.on("error", reject);
    if (headers[":method"] !== "GET") req.end(body ?? Buffer.alloc(0));
  });
}

const path = "/conchtest.v1.TestService/Unary";

test("raw: a content type that is no RPC is 415", async () => {
  const r = await h2request({
    ":method": "POST",
    ":path": path,
    "content-type": "text/plain",
  });
  assert.equal(r.head[":status"], 415);
});

test("raw: GET without a query is 405", async () => {
  const r = await h2request({ ":method": "GET", ":path": path });
  assert.equal(r.head[":status"], 405);
});

test("raw: Connect GET, JSON, percent-encoded", async () => {
  const msg = encodeURIComponent(JSON.stringify({ payload: "aGkh" }));
  const r = await h2request({
    ":method": "GET",
    ":path": `${path}?connect=v1&encoding=json&message=${msg}`,
  });
  assert.equal(r.head[":status"], 200);
  assert.equal(r.head["content-type"], "application/json");
  assert.equal(JSON.parse(r.body).payload, "aGkh");
});

test("raw: Connect GET, proto, base64 and gzip", async () => {
  const { gzipSync } = await import("node:zlib");
  // conchtest.v1.Request{payload: "hi!"}: field 1, length 3.
  const pb = gzipSync(Buffer.from([0x0a, 3, 0x68, 0x69, 0x21]));
  const b64 = pb.toString("base64url");
  const r = await h2request({
    ":method": "GET",
    ":path": `${path}?connect=v1&encoding=proto&base64=1&compression=gzip&message=${b64}`,
  });
  assert.equal(r.head[":status"], 200);
  assert.equal(r.head["content-type"], "application/proto");
  // The gzipped request was read; the 5-byte answer is under the server's
  // default compress-min (1 KiB), so it goes out plain, with no
  // Content-Encoding (test_server_policy's compress_min has the large
  // case).
  assert.equal(r.head["content-encoding"], undefined);
  assert.deepEqual([...r.body.subarray(0, 5)], [0x0a, 3, 0x68, 0x69, 0x21]);
});

test("raw: Connect GET of a method with side effects is 405", async () => {
  const r = await h2request({
    ":method": "GET",
    ":path":
      "/conchtest.v1.TestService/ServerStream?connect=v1&encoding=json&message=%7B%7D",
  });
  assert.equal(r.head[":status"], 405);
});

test("raw: Connect GET with a message that does not decode is 400", async () => {
  const r = await h2request({
    ":method": "GET",
    ":path": `${path}?connect=v1&encoding=proto&base64=1&message=%ZZ`,
  });
  assert.equal(r.head[":status"], 400);
  assert.equal(JSON.parse(r.body).code, "invalid_argument");
});

test("raw: Connect unary to an unknown path is 404", async () => {
  const r = await h2request({
    ":method": "POST",
    ":path": "/nope.v1.Nope/Nope",
    "content-type": "application/proto",
  });
  assert.equal(r.head[":status"], 404);
});

test("raw: an unknown compression is unimplemented", async () => {
  const r = await h2request(
    {
      ":method": "POST",
      ":path": path,
      "content-type": "application/json",
      "content-encoding": "bogus",
    },
    "{}",
  );
  assert.equal(r.head[":status"], 501);
  assert.equal(r.head["content-type"], "application/json");
  assert.equal(r.head["accept-encoding"], "gzip,br,zstd,deflate,snappy");
  assert.equal(JSON.parse(r.body).code, "unimplemented");
});

test("raw: a bad grpc-timeout is invalid_argument, Trailers-Only", async () => {
  const r = await h2request(
    {
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      "grpc-timeout": "soon",
    },
    Buffer.from([0, 0, 0, 0, 0]),
  );
  assert.equal(r.head[":status"], 200);
  assert.equal(r.head["grpc-status"], "3");
  assert.equal(r.head["grpc-accept-encoding"], "gzip,br,zstd,deflate,snappy");
  assert.equal(r.body.length, 0);
});

// A cardinality violation is unimplemented, as in connect-go (since its
// PR 712) and the gRPC status code table.
test("raw: a gRPC unary without a message is unimplemented", async () => {
  const r = await h2request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
  });
  assert.equal(r.trailers["grpc-status"] ?? r.head["grpc-status"], "12");
  assert.equal(
    r.trailers["grpc-message"] ?? r.head["grpc-message"],
    "unary request has zero messages",
  );
});

test("raw: a truncated envelope is invalid_argument", async () => {
  const r = await h2request(
    {
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc-web",
    },
    Buffer.from([0, 0, 0, 0, 9, 1, 2]),
  );
  assert.equal(r.head[":status"], 200);
  const text = r.body.toString("latin1");
  assert.match(text, /grpc-status: 3\r\n/);
});

test("raw: an HTTP/1.1 request is answered in HTTP/1.1", async () => {
  const res = await new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path,
        headers: { "content-type": "application/proto" },
      },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () =>
          resolve({ res, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.on("error", reject);
    req.end();
  });
  assert.equal(res.res.httpVersion, "1.1");
  assert.equal(res.res.statusCode, 200);
  assert.equal(res.res.headers["content-type"], "application/proto");
  assert.equal(Number(res.res.headers["content-length"]), res.body.length);
});
