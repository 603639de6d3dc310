// conch serve over HTTP/1.1, as envd is reached: connect-node's Connect
// transport with httpVersion "1.1" (Node's http module, keep-alive agent)
// for a unary call, a server stream, a client stream (its request body
// streamed in, chunked) and the errors.  The server binary comes from
// $CONCH_SERVE_BIN.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";

import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

// Generated once, in the workspace package of the Node process server.
import { Process, Signal } from "conch-api-node/gen/process/process_pb.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const top = path.resolve(here, "../../../..");
const bin = process.env.CONCH_SERVE_BIN ??
  path.join(top, "build/tools/conch/conch");

let server;
let client;
const started = [];

before(async () => {
  server = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--no-token"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: server.stdout });
  const port = await new Promise((resolve, reject) => {
    server.once("exit", (code) => reject(new Error(`server exited: ${code}`)));
    lines.on("line", (line) => {
      const m = /^LISTENING (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
  });
  const transport = createConnectTransport({
    baseUrl: `http://127.0.0.1:${port}`,
    httpVersion: "1.1",
    useBinaryFormat: true,
  });
  client = createClient(Process, transport);
});

after(async () => {
  const exited = new Promise((resolve) => server.once("exit", resolve));
  server.kill("SIGTERM");
  const code = await exited;
  assert.equal(code, 0, "conch serve exits 0 on SIGTERM");
  for (const pid of started) {
    assert.throws(() => process.kill(pid, 0), /ESRCH/, `pid ${pid} is gone`);
  }
});

const text = (b) => new TextDecoder().decode(b);
const bytes = (s) => new TextEncoder().encode(s);
const byPid = (pid) => ({ selector: { case: "pid", value: pid } });

async function collect(stream, onStart) {
  const r = { pid: 0, out: "", end: null, kinds: [], times: [] };
  for await (const res of stream) {
    const ev = res.event?.event;
    r.kinds.push(ev?.case);
    r.times.push(Date.now());
    if (ev?.case === "start") {
      r.pid = ev.value.pid;
      started.push(r.pid);
      if (onStart) await onStart(r.pid);
    } else if (ev?.case === "data" && ev.value.output.case === "stdout") {
      r.out += text(ev.value.output.value);
    } else if (ev?.case === "end") {
      r.end = ev.value;
    }
  }
  return r;
}

test("HTTP/1.1: Start streams events as they happen", async () => {
  const r = await collect(client.start({
    process: { cmd: "sh", args: ["-c", "echo a; sleep 1; echo b"] },
  }));
  assert.deepEqual(r.kinds, ["start", "data", "data", "end"]);
  assert.equal(r.out, "a\nb\n");
  assert.equal(r.end.status, "exit status 0");
  // "a" came a second before "b": not buffered to the end.
  assert.ok(r.times[2] - r.times[1] >= 700, `${r.times}`);
});

test("HTTP/1.1: List, SendSignal, StreamInput, errors", async () => {
  const r = await collect(client.start({
    process: { cmd: "cat" }, tag: "node-h1",
  }), async (pid) => {
    const listed = (await client.list({})).processes.find((p) => p.pid === pid);
    assert.equal(listed.tag, "node-h1");
    async function* input() {
      yield { event: { case: "start", value: { process: byPid(pid) } } };
      for (const s of ["one ", "two\n"]) {
        yield { event: { case: "data",
          value: { input: { input: { case: "stdin", value: bytes(s) } } } } };
        await new Promise((res) => setTimeout(res, 50));
      }
    }
    await client.streamInput(input());
    await client.closeStdin({ process: byPid(pid) });
  });
  assert.equal(r.out, "one two\n");
  assert.equal(r.end.exitCode, 0);
  await assert.rejects(client.sendSignal({ process: byPid(999999),
    signal: Signal.SIGKILL }), (e) => {
    assert.ok(e instanceof ConnectError);
    assert.equal(e.code, Code.NotFound);
    assert.equal(e.rawMessage, "process with pid 999999 not found");
    return true;
  });
  // Many calls in a row reuse the agent's keep-alive connections.
  for (let i = 0; i < 20; i++) await client.list({});
});
