// The real E2B JavaScript SDK (npm `e2b`, pinned in package.json) against an
// envd-compatible process server: `conch serve`, or the connect-node server
// of tests/api/node started with --http1.
//
//   node sdk_test.mjs --url http://127.0.0.1:PORT [--access-token T]
//                     [--no-pty] [--no-files] [--only REGEX] [--verbose]
//                     [--server-user NAME] [--workdir DIR]
//
// --no-files: the server has neither /files nor filesystem.Filesystem; the
// sandbox.files cases are skipped.
// --server-user: the user the server runs processes as by default (`conch
// serve --user`, or the user it runs as), when not the suite's own;
// --workdir: the server's default cwd (`conch serve --workdir`).
//
// (E2B_SANDBOX_URL and E2B_ACCESS_TOKEN stand in for --url and
// --access-token.)  With E2B_DEBUG=true the SDK creates no cloud sandbox:
// Sandbox.create() returns at once (sandboxId "debug_sandbox_id") and every
// call goes straight to envd at E2B_SANDBOX_URL, Connect protocol with the
// JSON codec over HTTP/1.1 (undici).  The SDK has no setting for envd's
// access token in debug mode (the cloud API hands it out), so the suite
// passes it the way Sandbox.connect() does: the constructor's
// envdAccessToken option, through a subclass.
//
// One line per case ("ok", "FAIL" or "skip"), then "N passed, N failed,
// N skipped"; exits 1 on any failure.  Every process the suite starts
// carries CONCH_E2B_RUN=<id> in its environment; the last case reads
// /proc to check that none of them is still running.
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";

// ---------------------------------------------------------------------------
// Command line

function usage(msg) {
  process.stderr.write(
    `sdk_test.mjs: ${msg}\n` +
      "usage: node sdk_test.mjs --url http://HOST:PORT [--access-token T] " +
      "[--no-pty] [--only REGEX] [--verbose]\n",
  );
  process.exit(2);
}

const opt = {
  url: process.env.E2B_SANDBOX_URL || "",
  token: process.env.E2B_ACCESS_TOKEN || "",
  pty: true,
  files: true, // envd's /files and filesystem.Filesystem (conch serve has both)
  only: null,
  verbose: false,
  serverUser: null,
  workdir: null,
};
{
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--url": opt.url = value(); break;
      case "--access-token": opt.token = value(); break;
      case "--no-pty": opt.pty = false; break;
      case "--no-files": opt.files = false; break;
      case "--only": opt.only = new RegExp(value()); break;
      case "--verbose": opt.verbose = true; break;
      case "--server-user": opt.serverUser = value(); break;
      case "--workdir": opt.workdir = value(); break;
      default: usage(`unknown argument ${a}`);
    }
  }
}
if (!/^https?:\/\/[^/]+$/.test(opt.url)) usage("--url http://HOST:PORT needed");

// Read by the SDK when each ConnectionConfig is built.
process.env.E2B_DEBUG = "true";
process.env.E2B_SANDBOX_URL = opt.url;
delete process.env.E2B_API_KEY;

const {
  AuthenticationError,
  CommandExitError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
} = await import("e2b");

// ---------------------------------------------------------------------------
// Helpers

const RUN_ID = randomBytes(6).toString("hex");
const MiB = 1024 * 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Failure extends Error {}

function check(cond, msg) {
  if (!cond) throw new Failure(msg);
}

function show(v) {
  const s = typeof v === "string" ? JSON.stringify(v) : String(v);
  return s.length > 200 ? `${s.slice(0, 200)}... (${s.length} chars)` : s;
}

function eq(actual, expected, what) {
  if (actual !== expected) {
    throw new Failure(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

function describe(e) {
  if (e === undefined) return "nothing";
  return `${e?.name ?? typeof e}: ${e?.message ?? e}`;
}

// Resolves to the rejection of |p| (fails if it resolves or takes longer
// than |ms|).
async function rejection(p, what, ms = 20000) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Failure(`${what}: still pending after ${ms} ms`)), ms);
  });
  try {
    const v = await Promise.race([p.then(
      (r) => { throw new Failure(`${what}: expected an error, got ${show(JSON.stringify(r))}`); },
      (e) => e), guard]);
    return v;
  } finally {
    clearTimeout(timer);
  }
}

function isA(e, cls, what) {
  if (e instanceof Failure) throw e;
  check(e instanceof cls, `${what}: expected ${cls.name}, got ${describe(e)}`);
}

// The SDK runs every command as `/bin/bash -l -c CMD` (a PTY: `bash -i
// -l`), so the user's ~/.profile and ~/.bashrc run first; on a developer's
// machine they may take seconds (pyenv, nvm, ...).  Cases point HOME at an
// empty directory through `envs` (the request's envs come last and win),
// except the ones that check HOME itself.
const QUIET_HOME = fs.mkdtempSync(`${os.tmpdir()}/conch-e2b-home-`);
process.on("exit", () => fs.rmSync(QUIET_HOME, { recursive: true, force: true }));

// The environment that tags a process as the suite's (and the case's).
let caseName = "";
function mark(extra = {}) {
  return { HOME: QUIET_HOME, CONCH_E2B_RUN: RUN_ID, CONCH_E2B_CASE: caseName,
    ...extra };
}
// ... keeping the user's own HOME (and login scripts).
function markHome(extra = {}) {
  const e = mark(extra);
  delete e.HOME;
  return e;
}

// Live (not zombie) processes whose environment carries this run's tag
// (and |tagCase| if given): [{pid, comm, case}].
function taggedProcesses(tagCase) {
  const out = [];
  for (const d of fs.readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(d)) continue;
    let env;
    let stat;
    try {
      env = fs.readFileSync(`/proc/${d}/environ`, "latin1").split("\0");
      stat = fs.readFileSync(`/proc/${d}/stat`, "latin1");
    } catch {
      continue; // gone, or not ours to read
    }
    if (!env.includes(`CONCH_E2B_RUN=${RUN_ID}`)) continue;
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    if (state === "Z" || state === "X") continue;
    const c = env.find((x) => x.startsWith("CONCH_E2B_CASE="));
    if (tagCase !== undefined && c !== `CONCH_E2B_CASE=${tagCase}`) continue;
    out.push({
      pid: Number(d),
      comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
      case: c ? c.slice("CONCH_E2B_CASE=".length) : "",
    });
  }
  return out;
}

// A live process |pid| (not a zombie).
function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

// Waits up to |ms| for |pred| to hold; returns whether it did.
async function eventually(pred, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await pred()) return true;
    if (Date.now() >= end) return false;
    await sleep(50);
  }
}

async function expectGone(what, pids = [], ms = 5000) {
  const ok = await eventually(() =>
    taggedProcesses(caseName).length === 0 && pids.every((p) => !alive(p)), ms);
  if (!ok) {
    const left = taggedProcesses(caseName).map((p) => `${p.pid} (${p.comm})`);
    const pl = pids.filter(alive);
    throw new Failure(`${what}: still running after ${ms} ms: ` +
      `${[...left, ...pl.map(String)].join(", ")}`);
  }
}

// The server's own user (the suite runs on the server's machine, as the
// same user, unless --server-user names it), from /etc/passwd.
function selfUser() {
  const uid = process.geteuid();
  for (const line of fs.readFileSync("/etc/passwd", "utf8").split("\n")) {
    const f = line.split(":");
    if (f.length >= 7 && (opt.serverUser !== null ? f[0] === opt.serverUser
      : Number(f[2]) === uid)) {
      return { name: f[0], home: f[5], uid: Number(f[2]), gid: Number(f[3]) };
    }
  }
  if (opt.serverUser !== null) usage(`--server-user ${opt.serverUser}: no such user`);
  const i = os.userInfo();
  return { name: i.username, home: i.homedir };
}
const ME = selfUser();
// The quiet HOME must be the server user's to read (login shells source
// its files).
if (opt.serverUser !== null) fs.chownSync(QUIET_HOME, ME.uid, ME.gid);

// The suite's sandbox: E2B_DEBUG and E2B_SANDBOX_URL decide where it goes;
// envd's access token (if the server wants one) through the constructor.
function sandboxWithToken(token) {
  return class extends Sandbox {
    constructor(o) {
      super({ ...o, envdAccessToken: token || undefined });
    }
  };
}

// ---------------------------------------------------------------------------
// Cases

const cases = [];
function test(name, fn, { skip } = {}) {
  cases.push({ name, fn, skip });
}

let sbx; // the sandbox every case uses
// Processes a case started; killed (through the SDK) when the case ends.
let started = [];
function track(h) {
  started.push(h.pid);
  return h;
}

test("run: stdout, stderr, exit code 0", async () => {
  const r = await sbx.commands.run("echo out; echo err >&2", { envs: mark() });
  eq(r.exitCode, 0, "exitCode");
  eq(r.stdout, "out\n", "stdout");
  eq(r.stderr, "err\n", "stderr");
  check(!r.error, `error: expected none, got ${show(r.error)}`);
});

test("run: non-zero exit -> CommandExitError", async () => {
  const e = await rejection(sbx.commands.run(
    "echo partial; echo oops >&2; exit 3", { envs: mark() }), "exit 3");
  isA(e, CommandExitError, "exit 3");
  eq(e.exitCode, 3, "exitCode");
  eq(e.stdout, "partial\n", "stdout");
  eq(e.stderr, "oops\n", "stderr");
  eq(e.error, "exit status 3", "error");
  eq(e.message, "exit status 3", "message");
});

test("run: killed by a signal -> exitCode -1, 'signal: killed'", async () => {
  const e = await rejection(sbx.commands.run("kill -9 $$", { envs: mark() }),
    "kill -9 $$");
  isA(e, CommandExitError, "kill -9 $$");
  eq(e.exitCode, -1, "exitCode");
  eq(e.error, "signal: killed", "error");
});

test("run: unknown command -> exit 127 and a message on stderr", async () => {
  const e = await rejection(sbx.commands.run("no-such-command-e2b-suite",
    { envs: mark() }), "unknown command");
  isA(e, CommandExitError, "unknown command");
  eq(e.exitCode, 127, "exitCode");
  check(e.stderr.includes("no-such-command-e2b-suite"),
    `stderr names the command: ${show(e.stderr)}`);
});

test("run: onStdout/onStderr called in arrival order", async () => {
  const seen = [];
  const cb = (kind) => (chunk) => {
    for (const line of chunk.split("\n")) if (line !== "") seen.push(`${kind}:${line}`);
  };
  const r = await sbx.commands.run(
    "for i in 1 2 3 4 5; do echo o$i; sleep 0.1; echo e$i >&2; sleep 0.1; done",
    { envs: mark(), onStdout: cb("out"), onStderr: cb("err") });
  const want = [];
  for (let i = 1; i <= 5; i++) want.push(`out:o${i}`, `err:e${i}`);
  eq(seen.join(" "), want.join(" "), "callback order");
  eq(r.stdout, "o1\no2\no3\no4\no5\n", "stdout");
  eq(r.stderr, "e1\ne2\ne3\ne4\ne5\n", "stderr");
});

test("run: envs (and USER, HOME, LOGNAME of the user)", async () => {
  const r = await sbx.commands.run(
    'printf "%s|%s|%s|%s|%s|%s\\n" "$FOO" "$SPACED" "$UNI" "$USER" "$HOME" "$LOGNAME"',
    { envs: markHome({ FOO: "bar", SPACED: "a b  c", UNI: "ünï€😀" }) });
  eq(r.stdout, `bar|a b  c|ünï€😀|${ME.name}|${ME.home}|${ME.name}\n`, "stdout");
});

test("run: cwd", async () => {
  const r = await sbx.commands.run("pwd", { cwd: "/tmp", envs: mark() });
  eq(r.stdout, "/tmp\n", "pwd in /tmp");
  const r2 = await sbx.commands.run("pwd", { envs: mark() });
  eq(r2.stdout, `${opt.workdir ?? ME.home}\n`,
    opt.workdir ? "default cwd (the server's --workdir)" : "default cwd (the user's home)");
});

test("run: missing cwd -> InvalidArgumentError", async () => {
  const e = await rejection(sbx.commands.run("pwd",
    { cwd: "/nonexistent-e2b-suite", envs: mark() }), "missing cwd");
  isA(e, InvalidArgumentError, "missing cwd");
  check(e.message.includes("/nonexistent-e2b-suite") &&
    e.message.includes("does not exist"),
  `message: ${show(e.message)}`);
});

test("run: 10 MiB of stdout and 1 MiB of stderr intact", async () => {
  // Numbered lines: 8 bytes each, so loss or reordering shows.
  const lines = (n) => {
    const a = new Array(n);
    for (let i = 0; i < n; i++) a[i] = String(i + 1).padStart(7, "0");
    return `${a.join("\n")}\n`;
  };
  const r = await sbx.commands.run(
    "seq -w 1 1310720; seq -w 1 131072 | sed 's/^/0/' >&2",
    { envs: mark(), timeoutMs: 45000 });
  eq(r.stdout.length, 10 * MiB, "stdout length");
  eq(r.stderr.length, 1 * MiB, "stderr length");
  check(r.stdout === lines(1310720), "stdout content differs");
  check(r.stderr === lines(131072), "stderr content differs");
});

test("run: UTF-8 split across reads, NUL and invalid bytes", async () => {
  // 10 bytes a line; 32 KiB reads split characters.
  const r = await sbx.commands.run("yes '€😀é' | head -c 300000",
    { envs: mark() });
  check(r.stdout === "€😀é\n".repeat(30000),
    `stdout differs (${r.stdout.length} chars)`);
  const b = await sbx.commands.run("printf 'a\\000b\\001\\377c\\n'",
    { envs: mark() });
  eq(b.stdout, "a\u0000b\u0001\uFFFDc\n", "bytes");
});

test("run: timeoutMs kills the process -> TimeoutError", async () => {
  const t0 = Date.now();
  const e = await rejection(sbx.commands.run("sleep 30",
    { envs: mark(), timeoutMs: 1000 }), "sleep 30, timeoutMs 1000");
  isA(e, TimeoutError, "sleep 30, timeoutMs 1000");
  check(e.message.includes("timeoutMs"), `message: ${show(e.message)}`);
  const took = Date.now() - t0;
  check(took >= 900 && took < 8000, `took ${took} ms`);
  await expectGone("the timed-out process");
});

test("run: timeoutMs 0 (no limit) and requestTimeoutMs bound only the start", async () => {
  const r = await sbx.commands.run("sleep 0.3; echo done",
    { envs: mark(), timeoutMs: 0 });
  eq(r.stdout, "done\n", "timeoutMs 0");
  // requestTimeoutMs bounds the handshake (until the StartEvent), not the
  // command: the server must send the StartEvent before the process ends.
  const r2 = await sbx.commands.run("sleep 1.5; echo done",
    { envs: mark(), requestTimeoutMs: 600 });
  eq(r2.stdout, "done\n", "requestTimeoutMs 600, command 1.5 s");
});

test("run: stdin off by default (cat sees EOF at once)", async () => {
  const r = await sbx.commands.run("cat; echo rc=$?",
    { envs: mark(), timeoutMs: 5000 });
  eq(r.stdout, "rc=0\n", "stdout");
});

test("background: pid, wait(), handle output", async () => {
  const chunks = [];
  const h = track(await sbx.commands.run("sleep 0.2; echo $$; echo bg-err >&2",
    { envs: mark(), background: true, onStdout: (d) => chunks.push(d) }));
  check(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`);
  eq(h.exitCode, undefined, "exitCode while running");
  const r = await h.wait();
  eq(r.exitCode, 0, "exitCode");
  // bash -c execs nothing here: $$ is the process the server started.
  eq(r.stdout, `${h.pid}\n`, "stdout ($$ is the pid)");
  eq(r.stderr, "bg-err\n", "stderr");
  eq(h.stdout, r.stdout, "handle.stdout");
  eq(h.stderr, r.stderr, "handle.stderr");
  eq(h.exitCode, 0, "handle.exitCode");
  eq(chunks.join(""), r.stdout, "onStdout");
});

test("background: wait() on a failing command -> CommandExitError", async () => {
  const h = track(await sbx.commands.run("echo x; exit 5",
    { envs: mark(), background: true }));
  const e = await rejection(h.wait(), "wait()");
  isA(e, CommandExitError, "wait()");
  eq(e.exitCode, 5, "exitCode");
  eq(e.stdout, "x\n", "stdout");
});

test("background: handle.kill() -> true; wait() reports the kill", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true }));
  check(alive(h.pid), `pid ${h.pid} is not running`);
  eq(await h.kill(), true, "kill()");
  const e = await rejection(h.wait(), "wait() after kill()");
  isA(e, CommandExitError, "wait() after kill()");
  eq(e.exitCode, -1, "exitCode");
  eq(e.error, "signal: killed", "error");
  await expectGone("the killed process", [h.pid]);
});

test("commands.kill(pid): true, then false once gone", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true }));
  eq(await sbx.commands.kill(h.pid), true, "kill(running pid)");
  await rejection(h.wait(), "wait()");
  eq(await sbx.commands.kill(h.pid), false, "kill(ended pid)");
  eq(await sbx.commands.kill(99999999), false, "kill(unknown pid)");
  await expectGone("the killed process", [h.pid]);
});

test("commands.list(): pid, cmd, args, envs, cwd, no tag; ended ones gone", async () => {
  const big = "x".repeat(4096); // a response worth compressing
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark({ LIST_A: "1", LIST_BIG: big }), cwd: "/tmp", background: true }));
  const h2 = track(await sbx.commands.run("exit 0",
    { envs: mark(), background: true }));
  await h2.wait();
  const list = await sbx.commands.list();
  check(Array.isArray(list), "list is an array");
  const p = list.find((x) => x.pid === h.pid);
  check(p !== undefined, `pid ${h.pid} not listed: ${show(JSON.stringify(list))}`);
  eq(p.cmd, "/bin/bash", "cmd");
  eq(JSON.stringify(p.args), JSON.stringify(["-l", "-c", "sleep 30"]), "args");
  eq(p.envs.LIST_A, "1", "envs.LIST_A");
  eq(p.envs.LIST_BIG, big, "envs.LIST_BIG");
  eq(p.envs.CONCH_E2B_RUN, RUN_ID, "envs.CONCH_E2B_RUN");
  eq(p.cwd, "/tmp", "cwd");
  eq(p.tag, undefined, "tag");
  check(list.every((x) => x.pid !== h2.pid), `ended pid ${h2.pid} still listed`);
  eq(await h.kill(), true, "kill()");
  await rejection(h.wait(), "wait()");
  const after = await sbx.commands.list();
  check(after.every((x) => x.pid !== h.pid), `killed pid ${h.pid} still listed`);
});

test("sendStdin/closeStdin (commands and handle) with stdin: true", async () => {
  const h = track(await sbx.commands.run("cat; echo eof",
    { envs: mark(), background: true, stdin: true }));
  await sbx.commands.sendStdin(h.pid, "hello\n");
  await h.sendStdin(new TextEncoder().encode("wörld\n"));
  await sbx.commands.sendStdin(h.pid, new Uint8Array([0x62, 0x00, 0x79, 0x0a]));
  await sbx.commands.closeStdin(h.pid);
  const r = await h.wait();
  eq(r.stdout, "hello\nwörld\nb\u0000y\neof\n", "stdout");

  const h2 = track(await sbx.commands.run("wc -c",
    { envs: mark(), background: true, stdin: true }));
  const data = new Uint8Array(300 * 1024).fill(0x41);
  await h2.sendStdin(data);
  await h2.closeStdin();
  const r2 = await h2.wait();
  eq(r2.stdout.trim(), String(data.length), "wc -c of 300 KiB");
});

test("sendStdin without stdin: true -> SandboxError", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true }));
  const e = await rejection(sbx.commands.sendStdin(h.pid, "x"), "sendStdin");
  isA(e, SandboxError, "sendStdin");
  check(e.message.includes("stdin not enabled or closed"),
    `message: ${show(e.message)}`);
  eq(await h.kill(), true, "kill()");
});

test("sendStdin/closeStdin/connect to a gone pid -> NotFoundError", async () => {
  const pid = 99999999;
  isA(await rejection(sbx.commands.sendStdin(pid, "x"), "sendStdin"),
    NotFoundError, "sendStdin");
  isA(await rejection(sbx.commands.closeStdin(pid), "closeStdin"),
    NotFoundError, "closeStdin");
  const e = await rejection(sbx.commands.connect(pid), "connect");
  isA(e, NotFoundError, "connect");
  check(e.message.includes(`process with pid ${pid} not found`),
    `message: ${show(e.message)}`);
});

test("sendStdin: requestTimeoutMs on a write the process does not read", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true, stdin: true }));
  const t0 = Date.now();
  const e = await rejection(sbx.commands.sendStdin(h.pid,
    new Uint8Array(2 * MiB), { requestTimeoutMs: 700 }), "sendStdin 2 MiB");
  isA(e, TimeoutError, "sendStdin 2 MiB");
  check(e.message.includes("requestTimeoutMs"), `message: ${show(e.message)}`);
  check(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms`);
  // The server is still there, and so is the process.
  const list = await sbx.commands.list();
  check(list.some((x) => x.pid === h.pid), `pid ${h.pid} not listed`);
  eq(await h.kill(), true, "kill()");
  await expectGone("the process", [h.pid]);
});

test("disconnect() leaves it running; connect(pid) re-attaches", async () => {
  const seen = [];
  const h = track(await sbx.commands.run(
    "i=0; while [ $i -lt 25 ]; do echo tick$i; i=$((i+1)); sleep 0.1; done; echo bye >&2",
    { envs: mark(), background: true, onStdout: (d) => seen.push(d) }));
  check(await eventually(() => seen.length > 0, 5000), "no output before disconnect");
  await h.disconnect();
  const n = seen.length;
  await sleep(500);
  eq(seen.length, n, "callbacks after disconnect()");
  check(alive(h.pid), "the process died with disconnect()");
  check((await sbx.commands.list()).some((x) => x.pid === h.pid),
    "not listed after disconnect()");
  const later = [];
  const errs = [];
  const h2 = await sbx.commands.connect(h.pid,
    { onStdout: (d) => later.push(d), onStderr: (d) => errs.push(d) });
  eq(h2.pid, h.pid, "connect().pid");
  const r = await h2.wait();
  eq(r.exitCode, 0, "exitCode");
  const text = later.join("");
  check(/tick\d+\n/.test(text) && text.endsWith("tick24\n"),
    `re-attached stdout: ${show(text)}`);
  check(!text.includes("tick0\n"), "output from before the re-attach replayed");
  eq(errs.join(""), "bye\n", "re-attached stderr");
});

test("connect(pid) to a process that just ended -> its exit", async () => {
  const h = track(await sbx.commands.run("exit 7",
    { envs: mark(), background: true }));
  isA(await rejection(h.wait(), "wait()"), CommandExitError, "wait()");
  const h2 = await sbx.commands.connect(h.pid);
  const e = await rejection(h2.wait(), "wait() after connect");
  isA(e, CommandExitError, "wait() after connect");
  eq(e.exitCode, 7, "exitCode");
});

test("timeoutMs of a background command kills it after disconnect()", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true, timeoutMs: 2000 }));
  await h.disconnect();
  await sleep(700);
  check(alive(h.pid), "died with disconnect()");
  await expectGone("past its timeoutMs", [h.pid], 6000);
});

test("connect(pid, {timeoutMs}) becomes the process's deadline", async () => {
  const h = track(await sbx.commands.run("sleep 30",
    { envs: mark(), background: true, timeoutMs: 0 }));
  await h.disconnect();
  const h2 = await sbx.commands.connect(h.pid, { timeoutMs: 1000 });
  const e = await rejection(h2.wait(), "wait() on connect with timeoutMs 1000");
  isA(e, TimeoutError, "wait() on connect with timeoutMs 1000");
  await expectGone("past the connect's timeoutMs", [h.pid]);
});

test("50 commands in parallel", async () => {
  const n = 50;
  const rs = await Promise.all(Array.from({ length: n }, (_, i) =>
    sbx.commands.run(`sleep 0.2; echo $((${i} * ${i})); echo e${i} >&2`,
      { envs: mark() })));
  for (let i = 0; i < n; i++) {
    eq(rs[i].stdout, `${i * i}\n`, `stdout of #${i}`);
    eq(rs[i].stderr, `e${i}\n`, `stderr of #${i}`);
  }
  const hs = await Promise.all(Array.from({ length: n }, () =>
    sbx.commands.run("sleep 30", { envs: mark(), background: true })));
  hs.forEach(track);
  const pids = new Set(hs.map((h) => h.pid));
  eq(pids.size, n, "distinct pids");
  const list = await sbx.commands.list();
  eq(list.filter((x) => pids.has(x.pid)).length, n, "listed");
  const killed = await Promise.all(hs.map((h) => h.kill()));
  check(killed.every((k) => k === true), "kill() of each");
  const ends = await Promise.all(hs.map((h) => h.wait().catch((e) => e)));
  check(ends.every((e) => e instanceof CommandExitError && e.exitCode === -1),
    "each ends killed");
  await expectGone("the killed processes", [...pids]);
});

test("user: the server's own user", async () => {
  const r = await sbx.commands.run('id -un; echo "$HOME"',
    { envs: markHome(), user: ME.name });
  eq(r.stdout, `${ME.name}\n${ME.home}\n`, "stdout");
});

test("user: unknown -> AuthenticationError", async () => {
  const e = await rejection(sbx.commands.run("true",
    { envs: mark(), user: "no-such-user-e2b" }), "unknown user");
  isA(e, AuthenticationError, "unknown user");
  check(e.message.includes("invalid username: 'no-such-user-e2b'"),
    `message: ${show(e.message)}`);
});

const noToken = opt.token ? undefined
  : "the server was not started with --access-token";

test("access token: the right one works (every case uses it)", async () => {
  const r = await sbx.commands.run("echo ok", { envs: mark() });
  eq(r.stdout, "ok\n", "stdout");
  check(Array.isArray(await sbx.commands.list()), "list()");
}, { skip: noToken });

test("access token: a wrong or missing one -> AuthenticationError (401)", async () => {
  for (const [what, token] of [["wrong token", `${opt.token}-wrong`],
    ["no token", ""]]) {
    const bad = await sandboxWithToken(token).create();
    const e1 = await rejection(bad.commands.run("echo no", { envs: mark() }),
      `${what}: run`);
    isA(e1, AuthenticationError, `${what}: run`);
    check(e1.message.includes("401"), `${what}: run: message ${show(e1.message)}`);
    const e2 = await rejection(bad.commands.list(), `${what}: list`);
    isA(e2, AuthenticationError, `${what}: list`);
    const e3 = await rejection(bad.commands.kill(1), `${what}: kill`);
    isA(e3, AuthenticationError, `${what}: kill`);
  }
  eq(taggedProcesses(caseName).length, 0, "processes started without a token");
}, { skip: noToken });

const noPty = opt.pty ? undefined : "the server has no PTYs (--no-pty)";

// Collects PTY output; waitFor(re) resolves once the text matches.
function ptyOutput() {
  const dec = new TextDecoder();
  const o = {
    text: "",
    onData: (d) => { o.text += dec.decode(d, { stream: true }); },
    async waitFor(re, what, ms = 8000) {
      if (!(await eventually(() => re.test(o.text), ms))) {
        throw new Failure(`${what}: no ${re} in PTY output ${show(o.text)}`);
      }
    },
  };
  return o;
}

test("pty: create, TERM/LANG, sendInput, resize, exit", async () => {
  const out = ptyOutput();
  const h = track(await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData,
    envs: mark(), timeoutMs: 30000 }));
  check(h.pid > 0, `pid ${h.pid}`);
  const send = (s) => sbx.pty.sendInput(h.pid, new TextEncoder().encode(s));
  await send("echo T=$TERM L=$LANG C=$LC_ALL; stty size; echo $((6*7))X\n");
  await out.waitFor(/T=xterm-256color L=C\.UTF-8 C=C\.UTF-8/, "TERM/LANG");
  await out.waitFor(/24 80/, "stty size");
  await out.waitFor(/42X/, "arithmetic");
  await sbx.pty.resize(h.pid, { cols: 120, rows: 40 });
  await send("stty size\n");
  await out.waitFor(/40 120/, "stty size after resize");
  const listed = (await sbx.commands.list()).find((x) => x.pid === h.pid);
  check(listed !== undefined && listed.cmd === "/bin/bash" &&
    JSON.stringify(listed.args) === '["-i","-l"]', "pty listed");
  await send("exit 0\n");
  const r = await h.wait();
  eq(r.exitCode, 0, "exitCode");
}, { skip: noPty });

test("pty: kill -> true, then false; connect re-attaches", async () => {
  const out = ptyOutput();
  const h = track(await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData,
    envs: mark(), timeoutMs: 30000 }));
  await h.disconnect();
  const out2 = ptyOutput();
  const h2 = await sbx.pty.connect(h.pid, { onData: out2.onData });
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode("echo again$((1+1))\n"));
  await out2.waitFor(/again2/, "output after pty.connect");
  eq(await sbx.pty.kill(h.pid), true, "pty.kill");
  const e = await rejection(h2.wait(), "wait() after pty.kill");
  isA(e, CommandExitError, "wait() after pty.kill");
  eq(e.exitCode, -1, "exitCode");
  eq(await sbx.pty.kill(h.pid), false, "pty.kill once gone");
  await expectGone("the killed PTY", [h.pid]);
}, { skip: noPty });

// Last: nothing the suite started is still running.
// ---------------------------------------------------------------------------
// sandbox.files: write and read go through envd's /files only (POST and GET;
// the SDK calls no Filesystem RPC for them), so they need nothing of the
// filesystem.Filesystem service.

const noFiles = opt.files ? undefined
  : "the server has no files: neither /files nor filesystem.Filesystem (--no-files)";
const FILES_DIR = fs.mkdtempSync(`${os.tmpdir()}/conch-e2b-files-`);
fs.chmodSync(FILES_DIR, 0o1777); // a server running as another user writes here
process.on("exit", () => fs.rmSync(FILES_DIR, { recursive: true, force: true }));

test("files.write: text, read back as text, bytes and a stream", async () => {
  const p = `${FILES_DIR}/one/deep/a.txt`;
  const info = await sbx.files.write(p, "hello, files\n");
  eq(info.path, p, "path");
  eq(info.name, "a.txt", "name");
  eq(info.type, "file", "type");
  eq(await sbx.files.read(p), "hello, files\n", "read text");
  const b = await sbx.files.read(p, { format: "bytes" });
  check(b instanceof Uint8Array, "bytes: a Uint8Array");
  eq(Buffer.from(b).toString(), "hello, files\n", "read bytes");
  const st = await sbx.files.read(p, { format: "stream" });
  const parts = [];
  for await (const c of st) parts.push(Buffer.from(c));
  eq(Buffer.concat(parts).toString(), "hello, files\n", "read stream");
}, { skip: noFiles });

test("files.write: bytes (every byte value) and an empty file", async () => {
  const p = `${FILES_DIR}/bytes.bin`;
  const data = new Uint8Array(256 * 64);
  for (let i = 0; i < data.length; i++) data[i] = i & 255;
  await sbx.files.write(p, data.buffer);
  const got = fs.readFileSync(p);
  check(Buffer.compare(got, Buffer.from(data)) === 0, "bytes on disk");
  const back = await sbx.files.read(p, { format: "bytes" });
  check(Buffer.compare(Buffer.from(back), Buffer.from(data)) === 0, "bytes read");
  await sbx.files.write(`${FILES_DIR}/empty`, "");
  eq(await sbx.files.read(`${FILES_DIR}/empty`), "", "empty file");
}, { skip: noFiles });

test("files.write: many files in one request (multipart)", async () => {
  const r = await sbx.files.write([
    { path: `${FILES_DIR}/many/1.txt`, data: "one" },
    { path: `${FILES_DIR}/many/sub/2.txt`, data: "two" },
    { path: `${FILES_DIR}/many/3.bin`, data: new Uint8Array([0, 1, 2]).buffer },
  ]);
  eq(r.length, 3, "entries");
  eq(r[1].name, "2.txt", "second name");
  eq(fs.readFileSync(`${FILES_DIR}/many/sub/2.txt`, "utf8"), "two", "2.txt");
  eq(fs.readFileSync(`${FILES_DIR}/many/3.bin`).length, 3, "3.bin");
}, { skip: noFiles });

test("files.write: a stream (octet-stream), 8 MiB, and gzip", async () => {
  const p = `${FILES_DIR}/stream.bin`;
  const chunk = randomBytes(MiB);
  let n = 0;
  const stream = new ReadableStream({
    pull(c) {
      if (n++ < 8) c.enqueue(new Uint8Array(chunk));
      else c.close();
    },
  });
  await sbx.files.write(p, stream);
  eq(fs.statSync(p).size, 8 * MiB, "size");
  check(Buffer.compare(fs.readFileSync(p).subarray(MiB, 2 * MiB), chunk) === 0,
        "content");
  await sbx.files.write(`${FILES_DIR}/gz.txt`, "zipped text ".repeat(1000), { gzip: true });
  eq(fs.readFileSync(`${FILES_DIR}/gz.txt`, "utf8"), "zipped text ".repeat(1000), "gzip");
}, { skip: noFiles });

test("files.read: a missing file -> NotFoundError (404)", async () => {
  const e = await rejection(sbx.files.read(`${FILES_DIR}/no-such-file`), "read");
  check(/not found|does not exist/i.test(e.message) || e.name === "NotFoundError" ||
        e.name === "FileNotFoundError",
        `read: expected a not-found error, got ${describe(e)}`);
}, { skip: noFiles });

// sandbox.files over filesystem.Filesystem (what needs no /files: list,
// exists, getInfo, makeDir, rename, remove, watchDir).  The tree is made
// here, readable by the server's user.

function filesDir() {
  const d = fs.mkdtempSync("/tmp/conch-e2b-files-");
  fs.chmodSync(d, 0o755);
  if (ME.uid !== undefined && process.geteuid() === 0) fs.chownSync(d, ME.uid, ME.gid);
  return d;
}
function makeTree(d) {
  const own = (p) => {
    if (ME.uid !== undefined && process.geteuid() === 0) fs.chownSync(p, ME.uid, ME.gid);
  };
  fs.mkdirSync(`${d}/sub/deeper`, { recursive: true });
  own(`${d}/sub`);
  own(`${d}/sub/deeper`);
  fs.writeFileSync(`${d}/a.txt`, "hello");
  fs.writeFileSync(`${d}/sub/b.txt`, "b");
  fs.writeFileSync(`${d}/sub/deeper/c.txt`, "c");
  for (const f of ["a.txt", "sub/b.txt", "sub/deeper/c.txt"]) own(`${d}/${f}`);
  fs.symlinkSync(`${d}/a.txt`, `${d}/link`);
}
async function expectError(fn, cls, what) {
  isA(await rejection(fn(), what), cls, what);
}

test("files.list: depth 1 and 3, entries as envd fills them", async () => {
  const d = filesDir();
  try {
    makeTree(d);
    const one = await sbx.files.list(d);
    eq(one.map((e) => e.name).join(","), "a.txt,link,sub", "depth 1 names");
    const a = one[0];
    eq(a.type, "file", "a.txt type");
    eq(a.path, `${d}/a.txt`, "a.txt path");
    eq(a.size, 5, "a.txt size");
    eq(a.owner, ME.name, "a.txt owner");
    check(/^-rw/.test(a.permissions), `permissions ${a.permissions}`);
    check(a.modifiedTime instanceof Date && a.modifiedTime.getTime() > 0,
      `modifiedTime ${a.modifiedTime}`);
    eq(one[1].symlinkTarget, `${d}/a.txt`, "link target");
    eq(one[2].type, "dir", "sub type");
    const all = await sbx.files.list(d, { depth: 3 });
    eq(all.map((e) => e.path.slice(d.length + 1)).join(","),
      "a.txt,link,sub,sub/b.txt,sub/deeper,sub/deeper/c.txt", "depth 3 paths");
    await expectError(() => sbx.files.list(`${d}/none`), NotFoundError, "list of a missing dir");
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
}, { skip: noFiles });

test("files.exists, getInfo", async () => {
  const d = filesDir();
  try {
    makeTree(d);
    eq(await sbx.files.exists(`${d}/a.txt`), true, "exists a.txt");
    eq(await sbx.files.exists(`${d}/nope`), false, "exists nope");
    const i = await sbx.files.getInfo(`${d}/sub`);
    eq(i.name, "sub", "name");
    eq(i.type, "dir", "type");
    await expectError(() => sbx.files.getInfo(`${d}/nope`), NotFoundError, "getInfo nope");
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
}, { skip: noFiles });

test("files.makeDir, rename, remove", async () => {
  const d = filesDir();
  try {
    eq(await sbx.files.makeDir(`${d}/x/y/z`), true, "makeDir new");
    check(fs.statSync(`${d}/x/y/z`).isDirectory(), "x/y/z made");
    eq(await sbx.files.makeDir(`${d}/x/y/z`), false, "makeDir existing");
    fs.writeFileSync(`${d}/x/f`, "data");
    if (ME.uid !== undefined && process.geteuid() === 0) fs.chownSync(`${d}/x/f`, ME.uid, ME.gid);
    const r = await sbx.files.rename(`${d}/x/f`, `${d}/x/new/g`);
    eq(r.path, `${d}/x/new/g`, "rename path");
    eq(fs.readFileSync(`${d}/x/new/g`, "utf8"), "data", "renamed contents");
    await expectError(() => sbx.files.rename(`${d}/x/f`, `${d}/x/h`), NotFoundError,
      "rename of a missing file");
    await sbx.files.remove(`${d}/x`);
    check(!fs.existsSync(`${d}/x`), "x removed");
    await sbx.files.remove(`${d}/x`); // nothing there: no error
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
}, { skip: noFiles });

test("files.watchDir: events (recursive), stop()", async () => {
  const d = filesDir();
  try {
    fs.mkdirSync(`${d}/sub`);
    if (ME.uid !== undefined && process.geteuid() === 0) fs.chownSync(`${d}/sub`, ME.uid, ME.gid);
    const events = [];
    let exited = false;
    const h = await sbx.files.watchDir(d, (e) => events.push(`${e.type}:${e.name}`),
      { recursive: true, onExit: () => { exited = true; } });
    const has = (x) => events.includes(x);
    fs.writeFileSync(`${d}/new.txt`, "1");
    fs.writeFileSync(`${d}/sub/inner.txt`, "2");
    fs.renameSync(`${d}/new.txt`, `${d}/moved.txt`);
    fs.rmSync(`${d}/moved.txt`);
    const want = ["create:new.txt", "write:new.txt", "create:sub/inner.txt",
      "rename:new.txt", "create:moved.txt", "remove:moved.txt"];
    const ok = await eventually(() => want.every(has), 10000);
    await h.stop();
    check(ok, `events ${show(events.join(" "))}, wanted ${want.join(" ")}`);
    check(await eventually(() => exited, 5000), "onExit after stop()");
    await expectError(() => sbx.files.watchDir(`${d}/none`, () => {}), NotFoundError,
      "watchDir of a missing dir");
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
}, { skip: noFiles });

test("no process of the suite left running", async () => {
  const ok = await eventually(() => taggedProcesses().length === 0, 5000);
  if (!ok) {
    const left = taggedProcesses().map((p) => `${p.pid} (${p.comm}, ${p.case})`);
    throw new Failure(`still running: ${left.join(", ")}`);
  }
});

// ---------------------------------------------------------------------------
// Runner

const CASE_TIMEOUT_MS = 60000;
let passed = 0;
let failed = 0;
let skipped = 0;

function line(s) {
  process.stdout.write(`${s}\n`);
}

async function runCase(c) {
  caseName = c.name.replace(/[^A-Za-z0-9]+/g, "_").slice(0, 60);
  started = [];
  const t0 = Date.now();
  let timer;
  try {
    await Promise.race([
      c.fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Failure(
          `timed out after ${CASE_TIMEOUT_MS} ms`)), CASE_TIMEOUT_MS);
      }),
    ]);
    passed++;
    line(`ok   ${c.name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    const msg = e instanceof Failure ? e.message : `unexpected ${describe(e)}`;
    line(`FAIL ${c.name}: ${msg}`);
    if (opt.verbose && !(e instanceof Failure)) line(String(e?.stack ?? e));
  } finally {
    clearTimeout(timer);
    // Whatever the case left running goes (the last case checks that the
    // server killed it).
    for (const pid of started) {
      if (alive(pid)) await sbx.commands.kill(pid).catch(() => {});
    }
  }
}

process.on("unhandledRejection", (e) => {
  if (opt.verbose) line(`(unhandled rejection: ${describe(e)})`);
});

const Sbx = sandboxWithToken(opt.token);
sbx = await Sbx.create();
const sdkVersion = createRequire(import.meta.url)("e2b/package.json").version;
line(`e2b ${sdkVersion} against ${opt.url} (sandbox ${sbx.sandboxId}, run ${RUN_ID}` +
  `${opt.token ? ", access token" : ""}${opt.pty ? "" : ", no PTY"})`);
for (const c of cases) {
  if (opt.only !== null && !opt.only.test(c.name) &&
    !c.name.startsWith("no process")) continue;
  if (c.skip) {
    skipped++;
    line(`skip ${c.name}: ${c.skip}`);
    continue;
  }
  await runCase(c);
}
line(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
