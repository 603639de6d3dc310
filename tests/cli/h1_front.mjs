// An HTTP/1.1-only front for a server that speaks HTTP/1.1 on TCP (conch
// serve): as envd itself is, it answers an HTTP/2 preface in HTTP/1.1 (400,
// Node's own reply) and streams requests and responses through as they
// come.  Prints "LISTENING <port>"; exits when its stdin closes.
//
//   node h1_front.mjs BACKEND_PORT
//
// For tests of what the client sends and how it takes errors:
// H1_FRONT_LOG=FILE appends one line per request, "METHOD PATH HEADERS"
// (the headers as JSON); H1_FRONT_ERROR=JSON answers every request with
// that Connect error body (HTTP 409) instead of passing it on.
import * as fs from "node:fs";
import * as http from "node:http";

const backend = Number(process.argv[2]);
const agent = new http.Agent({ keepAlive: true });
const hop = new Set(["connection", "keep-alive", "transfer-encoding",
  "upgrade", "proxy-connection", "te"]);

function strip(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers)) if (!hop.has(k)) out[k] = v;
  return out;
}

const log = process.env.H1_FRONT_LOG;
const error = process.env.H1_FRONT_ERROR;

const server = http.createServer((req, res) => {
  if (log) {
    fs.appendFileSync(log,
      `${req.method} ${req.url} ${JSON.stringify(req.headers)}\n`);
  }
  if (error) {
    req.resume();
    res.writeHead(409, { "content-type": "application/json" });
    res.end(error);
    return;
  }
  const up = http.request({ host: "127.0.0.1", port: backend, agent,
    method: req.method, path: req.url, headers: strip(req.headers) },
  (r) => {
    res.writeHead(r.statusCode, strip(r.headers));
    res.flushHeaders();
    r.on("data", (d) => res.write(d));
    r.on("end", () => res.end());
    r.on("error", () => res.destroy());
  });
  up.on("error", () => res.destroy());
  req.on("data", (d) => up.write(d));
  req.on("end", () => up.end());
  res.on("close", () => { if (!res.writableFinished) up.destroy(); });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
process.stdin.on("end", () => process.exit(0));
process.stdin.on("error", () => process.exit(0));
process.stdin.resume();
