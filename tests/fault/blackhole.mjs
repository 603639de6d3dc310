// A peer that went silent: it accepts TCP connections, sends the HTTP/2
// server preface (an empty SETTINGS frame) and then reads everything and
// answers nothing, PINGs included.  For keepalive tests.
//
//   node blackhole.mjs   (prints "LISTENING <port>"; exits on SIGTERM or
//                         when stdin, a pipe, closes)
import * as net from "node:net";
import { fstatSync } from "node:fs";

const SETTINGS = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
const sockets = new Set();
const server = net.createServer((sock) => {
  sockets.add(sock);
  sock.on("close", () => sockets.delete(sock));
  sock.on("error", () => {});
  sock.on("data", () => {}); // read and drop
  sock.write(SETTINGS);
});
function stop() {
  for (const s of sockets) s.destroy();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
try {
  const st = fstatSync(0);
  if (st.isFIFO() || st.isSocket()) {
    process.stdin.on("end", stop);
    process.stdin.on("error", stop);
    process.stdin.resume();
  }
} catch {
  // no stdin
}
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
