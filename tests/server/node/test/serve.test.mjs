// conch serve against clients nobody here wrote: connect-node (every RPC of
// process.Process over HTTP/2, once with the binary codec and once with
// JSON, useBinaryFormat: false, which is what the E2B SDKs use) and
// `buf curl` (a few RPCs, JSON in and out of buf).  The server binary comes
// from $CONCH_SERVE_BIN.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
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
const bufBin = path.join(top, "tests/node_modules/.bin/buf"); // the workspace

let server;
let port;
const started = [];
// One client per codec, and the content types the server answered with.
const clients = {};
const seenTypes = { binary: new Set(), json: new Set() };

before(async () => {
  server = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--no-token"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: server.stdout });
  port = await new Promise((resolve, reject) => {
    server.once("exit", (code) => reject(new Error(`server exited: ${code}`)));
    lines.on("line", (line) => {
      const m = /^LISTENING (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
  });
  for (const format of ["binary", "json"]) {
    const transport = createConnectTransport({
      baseUrl: `http://127.0.0.1:${port}`,
      httpVersion: "2",
      useBinaryFormat: format === "binary",
      interceptors: [(next) => async (req) => {
        const res = await next(req);
        seenTypes[format].add(res.header.get("content-type"));
        return res;
      }],
    });
    clients[format] = createClient(Process, transport);
  }
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
const byTag = (tag) => ({ selector: { case: "tag", value: tag } });

// Collects a Start/Connect stream.  |onStart| runs once the pid is known.
// Waits up to |ms| for |pred| to hold; returns whether it did.
async function eventually(pred, ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (await pred()) return true;
    if (Date.now() >= end) return false;
    await new Promise((res) => setTimeout(res, 20));
  }
}

function exists(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function collect(stream, onStart) {
  const r = { pid: 0, out: "", err: "", pty: "", end: null, kinds: [] };
  for await (const res of stream) {
    const ev = res.event?.event;
    r.kinds.push(ev?.case);
    if (ev?.case === "start") {
      r.pid = ev.value.pid;
      started.push(r.pid);
      if (onStart) await onStart(r.pid);
    } else if (ev?.case === "data") {
      const o = ev.value.output;
      r[o.case === "stdout" ? "out" : o.case === "stderr" ? "err" : "pty"] +=
        text(o.value);
    } else if (ev?.case === "end") {
      r.end = ev.value;
    }
  }
  return r;
}

const startWith = (client) => (cmd, args = [], extra = {}, opts = {}) => {
  const { process: proc, ...rest } = extra;
  return client.start({ ...rest, process: { cmd, args, ...proc } }, opts);
};

async function expectCode(promise, code, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof ConnectError, String(e));
    assert.equal(e.code, code, `${Code[e.code]}: ${e.rawMessage}`);
    if (message !== undefined) assert.equal(e.rawMessage, message);
    return true;
  });
}

for (const format of ["binary", "json"]) {
  // This codec's client (made in before()).
  const c = () => clients[format];
  const start = (...a) => startWith(c())(...a);

  test(`${format}: Start: events, output, exit status`, async () => {
    const r = await collect(start("sh", ["-c", "echo out; echo err >&2; exit 2"]));
    assert.equal(r.kinds[0], "start");
    assert.equal(r.kinds.at(-1), "end");
    assert.equal(r.out, "out\n");
    assert.equal(r.err, "err\n");
    assert.equal(r.end.exitCode, 2);
    assert.equal(r.end.exited, true);
    assert.equal(r.end.status, "exit status 2");
    assert.equal(r.end.error, "exit status 2");

    const ok = await collect(start("echo", ["hi"]));
    assert.equal(ok.end.status, "exit status 0");
    assert.equal(ok.end.error, undefined);

    const missing = await collect(start("no-such-cmd-conch"));
    assert.equal(missing.end.exitCode, 127);
    assert.match(missing.err, /no-such-cmd-conch/);
  });

  test(`${format}: Start: envs, cwd, user errors`, async () => {
    const r = await collect(start("sh", ["-c", "echo $A:$(pwd)"], {
      process: { envs: { A: "b" }, cwd: "/tmp" },
    }));
    assert.equal(r.out, "b:/tmp\n");
    await expectCode(collect(start("pwd", [], { process: { cwd: "/nope/x" } })),
      Code.InvalidArgument, "cwd '/nope/x' does not exist");
    const auth = "Basic " + Buffer.from("no-such-user-conch:").toString("base64");
    await expectCode(collect(start("true", [], {}, {
      headers: { authorization: auth },
    })), Code.Unauthenticated, "invalid username: 'no-such-user-conch'");
  });

  test(`${format}: List, Connect by pid and tag, SendSignal`, async () => {
    let listed;
    let attached;
    const r = await collect(start("sleep", ["30"], { tag: `node-tag-${format}` }),
      async (pid) => {
        listed = (await c().list({})).processes.find((p) => p.pid === pid);
        // Two re-attached clients at once, then the kill.
        // Both attached (their StartEvent came) before the kill.
        let attaching = 2;
        let allAttached;
        const attachedBoth = new Promise((res) => { allAttached = res; });
        const onAttach = async () => { if (--attaching === 0) allAttached(); };
        const a = collect(c().connect({ process: byPid(pid) }), onAttach);
        const b = collect(c().connect({ process: byTag(`node-tag-${format}`) }),
          onAttach);
        await Promise.race([attachedBoth, Promise.all([a, b]).then(() => {
          throw new Error("a Connect stream ended before it attached");
        })]);
        await c().sendSignal({ process: byPid(pid), signal: Signal.SIGTERM });
        attached = await Promise.all([a, b]);
      });
    assert.equal(listed.tag, `node-tag-${format}`);
    assert.equal(listed.config.cmd, "sleep");
    assert.deepEqual(listed.config.args, ["30"]);
    assert.equal(r.end.status, "signal: terminated");
    assert.equal(r.end.exitCode, -1);
    for (const a of attached) {
      assert.equal(a.pid, r.pid);
      assert.equal(a.end.status, "signal: terminated");
    }
    await expectCode(c().sendSignal({ process: byPid(r.pid), signal: 2 }),
      Code.NotFound);
    await expectCode(c().sendSignal({ process: byPid(999999),
      signal: Signal.SIGKILL }), Code.NotFound,
      "process with pid 999999 not found");
    // Ended within 30 s: StartEvent and EndEvent again.
    const late = await collect(c().connect({ process: byPid(r.pid) }));
    assert.deepEqual(late.kinds, ["start", "end"]);
  });

  test(`${format}: SendSignal: unsupported signal`, async () => {
    await collect(start("sleep", ["30"]), async (pid) => {
      await expectCode(c().sendSignal({ process: byPid(pid),
        signal: Signal.UNSPECIFIED }), Code.Unimplemented,
        "invalid signal: SIGNAL_UNSPECIFIED");
      await c().sendSignal({ process: byPid(pid), signal: Signal.SIGKILL });
    });
  });

  test(`${format}: SendInput, CloseStdin`, async () => {
    const r = await collect(start("cat"), async (pid) => {
      await c().sendInput({ process: byPid(pid),
        input: { input: { case: "stdin", value: bytes("abc\n") } } });
      await expectCode(c().sendInput({ process: byPid(pid), input: {} }),
        Code.Unimplemented, "invalid input type <nil>");
      await c().closeStdin({ process: byPid(pid) });
    });
    assert.equal(r.out, "abc\n");
    assert.equal(r.end.exitCode, 0);
  });

  test(`${format}: StreamInput`, async () => {
    const r = await collect(start("cat"), async (pid) => {
      async function* input() {
        yield { event: { case: "start", value: { process: byPid(pid) } } };
        for (const s of ["one ", "two ", "three\n"]) {
          yield { event: { case: "data",
            value: { input: { input: { case: "stdin", value: bytes(s) } } } } };
        }
        yield { event: { case: "keepalive", value: {} } };
      }
      await c().streamInput(input());
      await c().closeStdin({ process: byPid(pid) });
    });
    assert.equal(r.out, "one two three\n");
  });

  test(`${format}: PTY: input, Update resize`, async () => {
    let seen = "";
    const stream = start("sh", [], { pty: { size: { cols: 90, rows: 20 } } });
    const r = { pty: "" };
    let pid = 0;
    for await (const res of stream) {
      const ev = res.event.event;
      if (ev.case === "start") {
        pid = ev.value.pid;
        started.push(pid);
        await c().sendInput({ process: byPid(pid),
          input: { input: { case: "pty", value: bytes("stty size\n") } } });
      } else if (ev.case === "data") {
        assert.equal(ev.value.output.case, "pty");
        seen += text(ev.value.output.value);
        if (seen.includes("20 90") && !seen.includes("stage2")) {
          seen += "stage2";
          await c().update({ process: byPid(pid),
            pty: { size: { cols: 132, rows: 43 } } });
          await c().sendInput({ process: byPid(pid),
            input: { input: { case: "pty", value: bytes("stty size; exit\n") } } });
        }
      } else if (ev.case === "end") {
        r.end = ev.value;
      }
    }
    assert.match(seen, /20 90/);
    assert.match(seen, /43 132/);
    assert.equal(r.end.exitCode, 0);
    await expectCode(c().update({ process: byPid(999999),
      pty: { size: { cols: 1, rows: 1 } } }), Code.NotFound);
  });

  test(`${format}: Deadline ends the stream and the process`, async () => {
    let pid = 0;
    await expectCode(collect(start("sleep", ["30"], {}, { timeoutMs: 600 }),
      (p) => { pid = p; }), Code.DeadlineExceeded);
    // Gone once the server has killed it (polled: a loaded machine).
    assert.ok(await eventually(() => !exists(pid), 20000), `${pid} still runs`);
    assert.throws(() => process.kill(pid, 0), /ESRCH/);
  });

  test(`${format}: Keepalive events`, async () => {
    const r = await collect(start("sleep", ["3.2"], {}, {
      headers: { "keepalive-ping-interval": "1" },
    }));
    assert.ok(r.kinds.filter((k) => k === "keepalive").length >= 2,
      r.kinds.join(","));
  });

}

test("the JSON client spoke JSON, the binary client proto", () => {
  assert.deepEqual([...seenTypes.json].sort(),
    ["application/connect+json", "application/json"]);
  assert.deepEqual([...seenTypes.binary].sort(),
    ["application/connect+proto", "application/proto"]);
});

// ---- buf curl ----------------------------------------------------------------

function bufCurl(method, body) {
  return new Promise((resolve) => {
    execFile(bufBin, ["curl", "--schema", "process/process.proto",
      "--protocol", "connect", "--http2-prior-knowledge", "-d",
      JSON.stringify(body), `http://127.0.0.1:${port}/process.Process/${method}`],
    { cwd: path.join(top, "proto"), timeout: 30000 },
    (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout,
      stderr }));
  });
}

// buf curl prints one JSON document per message.
function jsonDocs(s) {
  const docs = [];
  let depth = 0;
  let startAt = -1;
  let inStr = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (inStr) {
      if (c === "\\") i++;
      else if (c === '"') inStr = false;
      continue;
    }
    if (c === '"') inStr = true;
    else if (c === "{") { if (depth++ === 0) startAt = i; }
    else if (c === "}" && --depth === 0) docs.push(JSON.parse(s.slice(startAt, i + 1)));
  }
  return docs;
}

test("buf curl: Start, List, SendSignal", async () => {
  const st = await bufCurl("Start", { process: { cmd: "echo", args: ["buf"] } });
  assert.equal(st.code, 0, st.stderr);
  const events = jsonDocs(st.stdout).map((d) => d.event);
  started.push(events[0].start.pid);
  assert.equal(Buffer.from(events[1].data.stdout, "base64").toString(), "buf\n");
  assert.equal(events.at(-1).end.status, "exit status 0");

  const list = await bufCurl("List", {});
  assert.equal(list.code, 0, list.stderr);

  const sig = await bufCurl("SendSignal", { process: { pid: 999999 },
    signal: "SIGNAL_SIGKILL" });
  assert.notEqual(sig.code, 0);
  assert.match(sig.stderr, /not_found/);
  assert.match(sig.stderr, /process with pid 999999 not found/);
});
