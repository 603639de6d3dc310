// The peer side of tools/bench/run.sh: a connect-node client doing what
// conch-bench does, against the same server, in the same run.
//
//   node bench-client.mjs unary  URL CONCURRENCY SECONDS PAYLOAD_BYTES
//   node bench-client.mjs stream URL SECONDS MESSAGE_BYTES
//
// Prints one JSON line like conch-bench: calls or bytes, seconds, and the
// CPU time of this process (user + system).
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

import { TestService } from "./gen/conchtest/v1/test_pb.js";

const [mode, url, ...args] = process.argv.slice(2);

function client(readMaxBytes) {
  const transport = createConnectTransport({
    baseUrl: url,
    httpVersion: "2",
    useBinaryFormat: true,
    readMaxBytes,
  });
  return createClient(TestService, transport);
}

function cpuSeconds(start) {
  const u = process.cpuUsage(start);
  return (u.user + u.system) / 1e6;
}

async function unary(conc, secs, bytes) {
  const c = client(4 * 1024 * 1024);
  const payload = new Uint8Array(bytes);
  await c.unary({ payload }); // warm up the connection
  let calls = 0;
  let errors = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const deadline = t0 + secs * 1000;
  async function worker() {
    while (performance.now() < deadline) {
      try {
        await c.unary({ payload });
        calls++;
      } catch {
        errors++;
      }
    }
  }
  await Promise.all(Array.from({ length: conc }, worker));
  const seconds = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ mode: "unary", calls, errors, seconds: +seconds.toFixed(3), cpu_seconds: +cpuSeconds(c0).toFixed(3) }));
}

async function stream(secs, bytes) {
  const c = client(bytes + 1024);
  const ac = new AbortController();
  let total = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const deadline = t0 + secs * 1000;
  try {
    for await (const m of c.serverStream(
      { responseCount: 1000000000, responseSize: bytes },
      { signal: ac.signal },
    )) {
      total += m.payload.length;
      if (performance.now() >= deadline) {
        ac.abort();
      }
    }
  } catch {
    // the abort ends the stream
  }
  const seconds = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ mode: "stream", bytes: total, seconds: +seconds.toFixed(3), cpu_seconds: +cpuSeconds(c0).toFixed(3) }));
}

if (mode === "unary") {
  await unary(Number(args[0]), Number(args[1]), Number(args[2]));
} else if (mode === "stream") {
  await stream(Number(args[0]), Number(args[1]));
} else {
  console.error("usage: bench-client.mjs unary URL CONC SECS BYTES | stream URL SECS BYTES");
  process.exit(2);
}
process.exit(0);
