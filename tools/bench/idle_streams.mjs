// Opens idle server streams for tools/bench/compare_server.sh: COUNT gRPC
// (or Connect, application/connect+proto) calls of process.Process/Start
// over CONNS h2c connections to URL, and waits until each has its first
// response message.  Then prints "OPEN <count>" and holds them, idle,
// until its stdin closes.
//
//   node tools/bench/idle_streams.mjs URL COUNT CONNS [grpc|connect]
import * as http2 from "node:http2";

const [url, count, conns] = [
  process.argv[2],
  Number(process.argv[3]),
  Number(process.argv[4]),
];
const protocol = process.argv[5] ?? "grpc";
const headers =
  protocol === "connect"
    ? {
        "content-type": "application/connect+proto",
        "connect-protocol-version": "1",
      }
    : { "content-type": "application/grpc", te: "trailers" };
const body = Buffer.alloc(5); // an empty StartRequest, enveloped
const sessions = [];
let open = 0;

function fail(msg) {
  process.stderr.write(`idle_streams: ${msg}\n`);
  process.exit(1);
}

for (let c = 0; c < conns; c++) {
  const s = http2.connect(url);
  s.on("error", (e) => fail(e.message));
  sessions.push(s);
  const per = Math.floor(count / conns) + (c < count % conns ? 1 : 0);
  for (let i = 0; i < per; i++) {
    const req = s.request({
      ":method": "POST",
      ":path": "/process.Process/Start",
      ...headers,
    });
    let seen = 0;
    req.on("data", (d) => {
      if (seen === 0 && (seen += d.length) >= 5 && ++open === count) {
        process.stdout.write(`OPEN ${open}\n`);
      }
    });
    req.on("end", () => fail("a stream ended"));
    req.on("error", (e) => fail(e.message));
    req.end(body);
  }
}
process.stdin.on("data", () => {});
process.stdin.on("end", () => {
  for (const s of sessions) s.destroy();
  process.exit(0);
});
