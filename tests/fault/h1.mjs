// conch's HTTP/1.1 fault server: a raw net.Server that breaks HTTP/1.1 on
// purpose, one way per method of the made-up service conchfault.v1.Fault.
// Only Node's built-in modules.
//
//   node h1.mjs [--port N]
//
// Listens on 127.0.0.1 and prints exactly one line "LISTENING <port>" to
// stdout.  Exits on SIGTERM/SIGINT, and when its stdin (a pipe) closes.
//
// Requests are read as HTTP/1.1 (Content-Length or chunked bodies); the
// scenario is the last path segment:
//   Echo         200, Content-Length, the message "ok"; kept alive
//   EchoStream   200 chunked Connect stream: one message, end-stream {}
//   Garbage      "HELLO WORLD" instead of a status line
//   ShortLength  Content-Length 2, then all 4 bytes of the message
//   LongLength   Content-Length 10, 4 bytes, close
//   ChunkCut     Connect stream: one message chunk, half a chunk, close
//   CloseInHead  half a status line, close
//   Never        reads the request, answers nothing
//   ConnClose    Echo with "Connection: close", then closes
//   IdleClose    Echo (kept alive), then closes the idle connection 50 ms
//                later
//   CloseNext    Echo (kept alive); the next request on this connection is
//                read and the connection closed without an answer (the
//                keep-alive race, seen from the client)
//   Http10       "HTTP/1.0 200", no Content-Length, body until close
//   Continue     "100 Continue" first, then Echo
//   Trailers     Connect stream, chunked, end-stream {} plus chunked
//                trailers (x-trailer: yes), which become HTTP trailers
//   Stats        body (raw, as application/proto):
//                "<connections> <requests> <idle-closes>" so far
import * as net from "node:net";
import { fstatSync } from "node:fs";

const MSG = Buffer.from([0x0a, 0x02, 0x6f, 0x6b]);
const env = (flags, payload) => {
  const b = Buffer.alloc(5 + payload.length);
  b[0] = flags;
  b.writeUInt32BE(payload.length, 1);
  payload.copy(b, 5);
  return b;
};
const END = env(2, Buffer.from("{}"));
const chunk = (b) =>
  Buffer.concat([Buffer.from(b.length.toString(16) + "\r\n"), b,
                 Buffer.from("\r\n")]);

let port = 0;
for (let i = 2; i < process.argv.length; i++) {
  if (process.argv[i] === "--port") port = Number(process.argv[++i]);
}

let connections = 0;
let requests = 0;
let idleCloses = 0; // connections IdleClose has closed

function echo(sock, extra = "") {
  sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\n" +
             `content-length: 4\r\n${extra}\r\n`);
  sock.write(MSG);
}

function streamHead(sock) {
  sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n" +
             "transfer-encoding: chunked\r\n\r\n");
}

function answer(sock, path) {
  const name = path.slice(path.lastIndexOf("/") + 1);
  switch (name) {
    case "Echo":
      echo(sock);
      return true;
    case "EchoStream":
      streamHead(sock);
      sock.write(chunk(env(0, MSG)));
      sock.write(chunk(END));
      sock.write("0\r\n\r\n");
      return true;
    case "Garbage":
      sock.end("HELLO WORLD\r\n\r\n");
      return false;
    case "ShortLength":
      sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\n" +
                 "content-length: 2\r\n\r\n");
      sock.write(MSG);
      return true;
    case "LongLength":
      sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\n" +
                 "content-length: 10\r\n\r\n");
      sock.end(MSG);
      return false;
    case "ChunkCut": {
      streamHead(sock);
      sock.write(chunk(env(0, MSG)));
      const c = chunk(env(0, MSG));
      sock.end(c.subarray(0, 6));
      return false;
    }
    case "CloseInHead":
      sock.end("HTTP/1.1 200 O");
      return false;
    case "Never":
      return false;
    case "ConnClose":
      echo(sock, "connection: close\r\n");
      sock.end();
      return false;
    case "IdleClose":
      echo(sock);
      setTimeout(() => {
        sock.destroy();
        idleCloses++;
      }, 50);
      return true;
    case "CloseNext":
      echo(sock);
      sock.closeNext = true;
      return true;
    case "Http10":
      sock.end(Buffer.concat([
        Buffer.from("HTTP/1.0 200 OK\r\ncontent-type: application/proto\r\n\r\n"),
        MSG]));
      return false;
    case "Continue":
      sock.write("HTTP/1.1 100 Continue\r\n\r\n");
      echo(sock);
      return true;
    case "Trailers":
      sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n" +
                 "transfer-encoding: chunked\r\ntrailer: x-trailer\r\n\r\n");
      sock.write(chunk(env(0, MSG)));
      sock.write(chunk(END));
      sock.write("0\r\nx-trailer: yes\r\n\r\n");
      return true;
    case "Stats": {
      const body = `${connections} ${requests} ${idleCloses}`;
      sock.write("HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\n" +
                 `content-length: ${body.length}\r\n\r\n${body}`);
      return true;
    }
    default:
      sock.write("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
      return true;
  }
}

// One request at a time: head, then a Content-Length or chunked body.
function serve(sock) {
  connections++;
  let buf = Buffer.alloc(0);
  let live = true;
  sock.on("error", () => {});
  sock.on("data", (d) => {
    if (!live) return;
    buf = Buffer.concat([buf, d]);
    for (;;) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.subarray(0, end).toString("latin1");
      const lines = head.split("\r\n");
      const path = lines[0].split(" ")[1] || "/";
      let len = 0;
      let chunked = false;
      for (const l of lines.slice(1)) {
        const [k, v] = [l.slice(0, l.indexOf(":")).toLowerCase(),
                        l.slice(l.indexOf(":") + 1).trim()];
        if (k === "content-length") len = Number(v);
        if (k === "transfer-encoding" && v === "chunked") chunked = true;
      }
      let rest = buf.subarray(end + 4);
      if (chunked) {
        const term = rest.indexOf("0\r\n\r\n");
        if (term < 0) return;
        rest = rest.subarray(term + 5);
      } else {
        if (rest.length < len) return;
        rest = rest.subarray(len);
      }
      buf = rest;
      requests++;
      if (sock.closeNext) {
        sock.destroy();
        live = false;
        return;
      }
      if (!answer(sock, path)) {
        live = false;
        return;
      }
    }
  });
}

const server = net.createServer(serve);
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
const quit = () => process.exit(0);
process.on("SIGTERM", quit);
process.on("SIGINT", quit);
try {
  if (fstatSync(0).isFIFO() || fstatSync(0).isSocket()) {
    process.stdin.on("end", quit);
    process.stdin.on("close", quit);
    process.stdin.resume();
  }
} catch {
  // no stdin
}
