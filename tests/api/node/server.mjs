// An envd-like server on connect-node: the second server of conch's API
// tests (tests/api/test_process.c, test_files.c and test_transfer.c run
// against it and against `conch serve`).  process.Process is here; the
// files half (filesystem.Filesystem and envd's plain HTTP /files) is
// fs.mjs.  Written apart from `conch serve`, on another HTTP/2 stack
// (Node's nghttp2 binding and connect-node's framing, flow control and
// compression), to catch what the API assumes of one server only.
//
//   node server.mjs [--port N] [--retention-ms N] [--access-token T] [--http1]
//
// Listens on 127.0.0.1 (h2c, prior knowledge; with --http1 plain HTTP/1.1
// instead, as envd itself serves and as E2B's SDKs reach it; port 0, the
// default, picks a free port) and prints exactly one line "LISTENING <port>"
// to stdout once it accepts connections.  Exits on SIGTERM/SIGINT/SIGHUP,
// and when its stdin (if a pipe or socket) closes; on its way out it
// SIGKILLs every process it started, and the group of those that lead one
// (a client's tree leader; children stay in this server's group, as
// envd's do, so a shell's background children of an unwrapped command
// can outlive it, as they outlive envd).
//
// Behaviour: /work/shared/ENVD.md ("envd behaviour, RPC by RPC"), with envd's
// codes and messages; see README.md here for what is left out (PTYs, core
// dump notes, a subreaper).
import * as http from "node:http";
import * as http2 from "node:http2";
import { execFile, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Process,
  ProcessEvent_EndEventSchema,
  Signal,
  StartResponseSchema,
} from "./gen/process/process_pb.js";
import { Filesystem } from "./gen/filesystem/filesystem_pb.js";
import { makeFiles } from "./fs.mjs";

const KIB = 1024;
const MIB = 1024 * KIB;
const PIPE_CHUNK = 32 * KIB; // envd's stdChunkSize: one DataEvent at most
const SUB_HIGH = 256 * KIB; // a subscriber this far behind pauses the child
const SUB_LOW = 64 * KIB; // ... until it is back under this
const DEFAULT_KEEPALIVE_S = 90; // envd's default without a valid header
const MAX_KEEPALIVE_S = 86400;
const DRAIN_IDLE_MS = 100; // after the reap: pipes idle this long are closed
const DRAIN_MAX_MS = 1000; // ... and after this long anyway (a grandchild
                           // that keeps writing does not keep the end away)
const DEADLINE_END_WAIT_MS = 5000; // a stream past its deadline waits this
                                   // long for the killed process's end
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:" +
  "/sbin:/bin";

// Go's names of the signals (syscall.Signal.String()), for "signal: <name>".
const SIGNAL_NAMES = [
  null, "hangup", "interrupt", "quit", "illegal instruction",
  "trace/breakpoint trap", "aborted", "bus error",
  "floating point exception", "killed", "user defined signal 1",
  "segmentation fault", "user defined signal 2", "broken pipe",
  "alarm clock", "terminated", "stack fault", "child exited", "continued",
  "stopped (signal)", "stopped", "stopped (tty input)",
  "stopped (tty output)", "urgent I/O condition", "CPU time limit exceeded",
  "file size limit exceeded", "virtual timer expired",
  "profiling timer expired", "window changed", "I/O possible",
  "power failure", "bad system call",
];

// ---------------------------------------------------------------------------
// Command line

function usage(msg) {
  process.stderr.write(
    `server.mjs: ${msg}\n` +
      "usage: node server.mjs [--port N] [--retention-ms N] " +
      "[--access-token T] [--http1]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opt = { port: 0, retentionMs: 30000, token: null, http1: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    const number = (max) => {
      const s = value();
      if (!/^[0-9]+$/.test(s) || Number(s) > max) usage(`bad ${a} ${s}`);
      return Number(s);
    };
    switch (a) {
      case "--port":
        opt.port = number(65535);
        break;
      case "--retention-ms":
        opt.retentionMs = number(86400000);
        break;
      case "--access-token":
        opt.token = value();
        break;
      case "--http1":
        opt.http1 = true;
        break;
      default:
        usage(`unknown argument ${a}`);
    }
  }
  return opt;
}

const opt = parseArgs(process.argv.slice(2));

// ---------------------------------------------------------------------------
// Errors, as envd words them

const err = (code, msg) => new ConnectError(msg, code);

function deadlineError() {
  return err(Code.DeadlineExceeded, "context deadline exceeded");
}

function isDeadline(reason) {
  return reason instanceof ConnectError &&
    reason.code === Code.DeadlineExceeded;
}

// ---------------------------------------------------------------------------
// Users: Authorization: Basic base64("<user>:"), else the server's own user.

// /etc/passwd, parsed again when it changes.
let passwdCache = { key: "", users: [] };

function passwdEntries() {
  let text = "";
  let key = "";
  try {
    const st = fs.statSync("/etc/passwd");
    key = `${st.mtimeMs}:${st.size}:${st.ino}`;
    if (key === passwdCache.key) return passwdCache.users;
    text = fs.readFileSync("/etc/passwd", "utf8");
  } catch {
    text = "";
  }
  const users = [];
  for (const line of text.split("\n")) {
    const f = line.split(":");
    if (f.length < 7 || f[0] === "" || f[0].startsWith("#")) continue;
    users.push({
      name: f[0],
      uid: Number(f[2]),
      gid: Number(f[3]),
      home: f[5] || "/",
    });
  }
  passwdCache = { key, users };
  return users;
}

function selfUser() {
  const uid = process.geteuid();
  const u = passwdEntries().find((e) => e.uid === uid);
  if (u !== undefined) return u;
  const info = os.userInfo();
  return { name: info.username, uid, gid: process.getegid(),
    home: info.homedir || "/" };
}

// Go's Request.BasicAuth: anything but "Basic base64(user:password)" means
// no user was given.
function basicUser(auth) {
  if (typeof auth !== "string" || !/^basic /i.test(auth)) return null;
  const b64 = auth.slice(6);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) {
    return null;
  }
  const raw = Buffer.from(b64, "base64").toString("latin1");
  const colon = raw.indexOf(":");
  return colon < 0 ? null : raw.slice(0, colon);
}

// The user of a call (checked on every RPC, as envd does).
function callUser(ctx) {
  const name = basicUser(ctx.requestHeader.get("authorization"));
  if (name === null) return selfUser();
  const u = passwdEntries().find((e) => e.name === name);
  if (u === undefined) {
    throw err(Code.Unauthenticated, `invalid username: '${name}'`);
  }
  return u;
}

// Keepalive-Ping-Interval, seconds: missing or not a number gives envd's
// default; zero or negative is refused (envd crashes on it).
function keepaliveMs(ctx) {
  const v = ctx.requestHeader.get("keepalive-ping-interval");
  if (v === null || !/^[+-]?[0-9]+$/.test(v.trim())) {
    return DEFAULT_KEEPALIVE_S * 1000;
  }
  const s = Number(v.trim());
  if (s <= 0) {
    throw err(Code.InvalidArgument,
      `invalid Keepalive-Ping-Interval '${v}': must be a positive number ` +
      "of seconds");
  }
  return Math.min(s, MAX_KEEPALIVE_S) * 1000;
}

// The call's Connect-Timeout-Ms (connect-node has validated it), or
// undefined.
function timeoutMs(ctx) {
  const v = ctx.requestHeader.get("connect-timeout-ms");
  return v === null ? undefined : Number(v);
}

// ---------------------------------------------------------------------------
// cwd and environment

function resolveCwd(cwd, user) {
  let p;
  if (cwd === undefined || cwd === "") {
    p = user.home;
  } else if (cwd.startsWith("~")) {
    if (cwd.length > 1 && cwd[1] !== "/") {
      throw err(Code.InvalidArgument,
        `failed to expand path '${cwd}' for user '${user.name}': cannot ` +
        "expand user-specific home dir");
    }
    p = path.join(user.home, cwd.slice(1));
  } else if (cwd.startsWith("/")) {
    p = path.normalize(cwd);
  } else {
    p = path.join(user.home, cwd);
  }
  if (p.length > 1 && p.endsWith("/")) p = p.slice(0, -1);
  try {
    fs.statSync(p);
  } catch (e) {
    if (e.code === "ENOENT") {
      throw err(Code.InvalidArgument, `cwd '${p}' does not exist`);
    }
  }
  return p;
}

const SERVER_PATH = process.env.PATH || DEFAULT_PATH;

function environment(user, envs) {
  const env = {
    PATH: SERVER_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
  };
  for (const [k, v] of Object.entries(envs ?? {})) env[k] = v;
  return env;
}

// ---------------------------------------------------------------------------
// Pipes.  node:child_process's "pipe" stdio is a socketpair, and a process
// whose stdout is a socket is not one whose stdout is a pipe (`echo x >
// /dev/stderr` fails with ENXIO, socket buffers are not 64 KiB, `[ -p
// /dev/stdout ]` is false).  envd gives its processes pipes (os.Pipe), so
// this server does too: FIFOs made in batches by mkfifo(1) in a private
// directory, opened at both ends and unlinked at once, which leaves two
// ends of an anonymous pipe.  The child's end is opened blocking (its own
// open file description), ours non-blocking for the event loop.

const FIFO_BATCH = 256;

class FifoPool {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "conch-api-node-"));
    this.free = [];
    this.seq = 0;
    this.filling = null;
  }

  fill() {
    if (this.filling === null) {
      const names = [];
      for (let i = 0; i < FIFO_BATCH; i++) {
        names.push(path.join(this.dir, `p${this.seq++}`));
      }
      this.filling = new Promise((resolve, reject) => {
        execFile("mkfifo", ["-m", "600", ...names], (e) => {
          this.filling = null;
          if (e) {
            reject(e);
          } else {
            this.free.push(...names);
            resolve();
          }
        });
      });
    }
    return this.filling;
  }

  async take(n) {
    while (this.free.length < n) await this.fill();
    const names = this.free.splice(0, n);
    if (this.free.length < FIFO_BATCH / 2) this.fill().catch(() => {});
    return names;
  }

  remove() {
    try {
      fs.rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
}

const fifos = new FifoPool();
const O = fs.constants;

// Output: the child writes, we read.
function outputPipe(name) {
  const ours = fs.openSync(name, O.O_RDONLY | O.O_NONBLOCK);
  try {
    const theirs = fs.openSync(name, O.O_WRONLY); // a reader exists: no wait
    return { ours, theirs };
  } catch (e) {
    fs.closeSync(ours);
    throw e;
  } finally {
    fs.unlinkSync(name);
  }
}

// Input: we write, the child reads (blocking, so a FIFO opened for reading
// without O_NONBLOCK, once a writer exists).
function inputPipe(name) {
  const opened = [];
  try {
    const probe = fs.openSync(name, O.O_RDONLY | O.O_NONBLOCK);
    opened.push(probe);
    const ours = fs.openSync(name, O.O_WRONLY | O.O_NONBLOCK);
    opened.push(ours);
    const theirs = fs.openSync(name, O.O_RDONLY);
    fs.closeSync(probe);
    return { ours, theirs };
  } catch (e) {
    for (const fd of opened) fs.closeSync(fd);
    throw e;
  } finally {
    fs.unlinkSync(name);
  }
}

// Spawns |file args| with pipes for stdout and stderr, and for stdin unless
// |stdin| is false (then /dev/null).  Returns {child, stdin, stdout, stderr}
// with net.Sockets on our ends.
async function spawnWithPipes(file, args, options, stdin) {
  const names = await fifos.take(stdin ? 3 : 2);
  const ends = [];
  let child;
  try {
    if (stdin) ends.push(inputPipe(names.shift()));
    ends.push(outputPipe(names.shift()), outputPipe(names.shift()));
    const theirs = ends.map((e) => e.theirs);
    child = spawn(file, args, {
      ...options,
      stdio: stdin ? theirs : ["ignore", ...theirs],
    });
  } catch (e) {
    for (const e2 of ends) {
      fs.closeSync(e2.ours);
    }
    throw e;
  } finally {
    for (const e of ends) fs.closeSync(e.theirs);
    for (const n of names) fs.rmSync(n, { force: true });
  }
  if (child.pid === undefined) {
    // Failures libuv reports after the fork come as an "error" event.
    const e = await new Promise((resolve) => child.once("error", resolve));
    for (const e2 of ends) fs.closeSync(e2.ours);
    throw e;
  }
  const sock = (fd, readable) =>
    new net.Socket({ fd, readable, writable: !readable });
  const out = stdin ? ends.slice(1) : ends;
  return {
    child,
    stdin: stdin ? sock(ends[0].ours, false) : null,
    stdout: sock(out[0].ours, true),
    stderr: sock(out[1].ours, true),
  };
}

// ---------------------------------------------------------------------------
// Events

const startMsg = (pid) =>
  create(StartResponseSchema,
    { event: { event: { case: "start", value: { pid } } } });

const keepaliveMsg = create(StartResponseSchema,
  { event: { event: { case: "keepalive", value: {} } } });

function endMsg(code, signal) {
  const e = create(ProcessEvent_EndEventSchema);
  if (code !== null) {
    e.exitCode = code;
    e.exited = true;
    e.status = `exit status ${code}`;
  } else {
    const n = os.constants.signals[signal] ?? 0;
    e.exitCode = -1;
    e.exited = false;
    e.status = SIGNAL_NAMES[n] ? `signal: ${SIGNAL_NAMES[n]}`
      : `signal: signal ${n}`;
  }
  if (!e.exited || e.exitCode !== 0) e.error = e.status;
  return create(StartResponseSchema,
    { event: { event: { case: "end", value: e } } });
}

// ---------------------------------------------------------------------------
// Subscribers: one per Start or Connect stream.  Events wait in a queue the
// stream's generator empties one yield at a time; connect-node only asks for
// the next one once the previous one is written into the HTTP/2 stream, so
// the queue grows exactly when the client (or its flow-control window) does
// not keep up, and past SUB_HIGH bytes the child's pipes are paused.

class Sub {
  constructor(proc) {
    this.proc = proc;
    this.q = [];
    this.bytes = 0;
    this.over = false;
    this.wake = null;
  }

  push(msg, bytes) {
    this.q.push({ msg, bytes });
    this.bytes += bytes;
    if (!this.over && this.bytes > SUB_HIGH) {
      this.over = true;
      this.proc.overChanged(1);
    }
    this.poke();
  }

  shift() {
    const item = this.q.shift();
    this.bytes -= item.bytes;
    if (this.over && this.bytes <= SUB_LOW) {
      this.over = false;
      this.proc.overChanged(-1);
    }
    return item.msg;
  }

  poke() {
    if (this.wake !== null) {
      const w = this.wake;
      this.wake = null;
      w("wake");
    }
  }

  // Resolves "wake" on an event or poke, "timeout" after |ms|.
  wait(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve("timeout");
      }, Math.max(0, ms));
      this.wake = (why) => {
        clearTimeout(t);
        resolve(why);
      };
    });
  }

  drop() {
    if (this.over) {
      this.over = false;
      this.proc.overChanged(-1);
    }
    this.q = [];
    this.bytes = 0;
  }
}

// ---------------------------------------------------------------------------
// Processes

const procs = []; // oldest first; ended ones stay opt.retentionMs
let nextToken = 1;

class Proc {
  constructor(sp, req) {
    const child = sp.child;
    this.child = child;
    this.pid = child.pid;
    this.stdin = sp.stdin;
    this.stdout = sp.stdout;
    this.stderr = sp.stderr;
    this.config = req.process; // as sent, for List
    this.tag = req.tag;
    this.stdinOpen = this.stdin !== null;
    this.subs = new Set();
    this.nover = 0;
    this.exit = null; // {code, signal} once reaped
    this.ended = false;
    this.end = null; // the EndEvent message
    this.outOpen = 2;
    this.deadline = null; // {timer, token}
    this.idle = null;
    this.sawData = false;
    this.drainUntil = 0;
    this.retain = null;

    for (const [s, kind] of [[this.stdout, "stdout"],
      [this.stderr, "stderr"]]) {
      s.on("data", (buf) => this.output(kind, buf));
      s.on("error", () => {});
      s.once("close", () => {
        this.outOpen--;
        this.maybeEnd();
      });
    }
    if (this.stdin !== null) this.stdin.on("error", () => {});
    child.on("error", () => {});
    child.once("exit", (code, signal) => {
      this.exit = { code, signal };
      this.drainUntil = Date.now() + DRAIN_MAX_MS;
      this.clearDeadline();
      // Nobody reads the stdin pipe any more.
      this.stdinOpen = false;
      if (this.stdin !== null) this.stdin.destroy();
      this.armIdle();
      this.maybeEnd();
    });
  }

  output(kind, buf) {
    if (this.subs.size > 0) {
      for (let off = 0; off < buf.length; off += PIPE_CHUNK) {
        const piece = buf.subarray(off, Math.min(buf.length, off + PIPE_CHUNK));
        const msg = create(StartResponseSchema, {
          event: {
            event: {
              case: "data",
              value: { output: { case: kind, value: piece } },
            },
          },
        });
        for (const sub of this.subs) sub.push(msg, piece.length);
      }
    } // else: nobody listens; dropped, as envd does (no replay)
    this.sawData = true;
  }

  streams() {
    return [this.stdout, this.stderr];
  }

  overChanged(d) {
    const before = this.nover;
    this.nover += d;
    if (before === 0 && this.nover > 0) {
      for (const s of this.streams()) s.pause();
      clearTimeout(this.idle);
      this.idle = null;
    } else if (before > 0 && this.nover === 0) {
      for (const s of this.streams()) s.resume();
      if (this.exit !== null) this.armIdle();
    }
  }

  // After the reap the pipes are read while they deliver, then closed (a
  // background grandchild holding them does not keep the process alive;
  // envd closes them after the reap too): once idle, or once DRAIN_MAX_MS
  // have passed.  Never while paused: what is in the pipe then is still the
  // process's output.  "Idle" means no data for DRAIN_IDLE_MS *and* through
  // one more poll phase of the event loop (timers run before polling: a loop
  // that was busy, e.g. spawning, must not mistake unread bytes for
  // silence).
  armIdle() {
    clearTimeout(this.idle);
    this.idle = null;
    this.sawData = false;
    if (this.ended || this.nover > 0 || this.outOpen === 0) return;
    this.idle = setTimeout(() => {
      this.idle = null;
      setImmediate(() => {
        if (this.ended || this.nover > 0 || this.idle !== null) return;
        if (this.sawData && Date.now() < this.drainUntil) {
          this.armIdle();
          return;
        }
        for (const s of this.streams()) s.destroy();
      });
    }, DRAIN_IDLE_MS);
  }

  maybeEnd() {
    if (this.ended || this.exit === null || this.outOpen > 0) return;
    this.ended = true;
    clearTimeout(this.idle);
    this.end = endMsg(this.exit.code, this.exit.signal);
    for (const sub of this.subs) sub.push(this.end, 0);
    this.retain = setTimeout(() => forget(this), opt.retentionMs);
  }

  subscribe() {
    const sub = new Sub(this);
    this.subs.add(sub);
    return sub;
  }

  unsubscribe(sub) {
    if (this.subs.delete(sub)) sub.drop();
  }

  // The deadline of the latest Start or Connect that had one: SIGKILL then,
  // whether or not a client is still there.  Returns its token.
  setDeadline(ms) {
    this.clearDeadline();
    if (this.exit !== null) return 0;
    const token = nextToken++;
    const timer = setTimeout(() => this.kill("SIGKILL"), ms);
    this.deadline = { timer, token };
    return token;
  }

  clearDeadline() {
    if (this.deadline !== null) clearTimeout(this.deadline.timer);
    this.deadline = null;
  }

  deadlineToken() {
    return this.deadline === null ? 0 : this.deadline.token;
  }

  // The pid only (envd signals the pid, not the group).  After the reap
  // the pid may be someone else's: the process is gone anyway.
  kill(sig) {
    if (this.exit !== null) return;
    try {
      process.kill(this.pid, sig);
    } catch (e) {
      if (e.code !== "ESRCH") throw e;
    }
  }

  // Input, in order: resolves once the bytes are in the pipe (envd's
  // blocking write).
  write(data) {
    if (data.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.stdin.write(data, (e) => {
        if (e) reject(e);
        else resolve();
      });
    });
  }

  closeStdin() {
    if (!this.stdinOpen) return;
    this.stdinOpen = false;
    this.stdin.end(); // after what is queued; then the fd is closed
  }
}

function forget(p) {
  const i = procs.indexOf(p);
  if (i >= 0) procs.splice(i, 1);
}

// By pid; by tag the newest running one, else the newest ended one.
function lookup(sel) {
  let ended = null;
  for (let i = procs.length - 1; i >= 0; i--) {
    const p = procs[i];
    if (sel.case === "pid") {
      if (p.pid === sel.value) return p;
      continue;
    }
    if (p.tag !== sel.value) continue;
    if (!p.ended) return p;
    if (ended === null) ended = p;
  }
  return ended;
}

function find(selector, endedOk) {
  const sel = selector?.selector;
  if (sel === undefined || (sel.case !== "pid" && sel.case !== "tag")) {
    throw err(Code.Unimplemented,
      "invalid input type *process.ProcessSelector");
  }
  const p = lookup(sel);
  if (p !== null && (endedOk || !p.ended)) return p;
  throw err(Code.NotFound, sel.case === "pid"
    ? `process with pid ${sel.value} not found`
    : `process with tag ${sel.value} not found`);
}

function killAll() {
  for (const p of procs) {
    // Whole groups where a process leads one (a tree leader), ended ones
    // too: a grandchild may have outlived its parent.  Our children do
    // not lead groups otherwise, and ESRCH says so.
    try {
      process.kill(-p.pid, "SIGKILL");
    } catch {
      // gone already
    }
    try {
      p.kill("SIGKILL");
    } catch {
      // not ours to kill any more
    }
  }
}

// ---------------------------------------------------------------------------
// Following a process: the Start and Connect streams

async function* follow(proc, sub, ctx, kaMs, token) {
  let deadlineHit = false;
  let endBy = 0;
  const onAbort = () => sub.poke();
  ctx.signal.addEventListener("abort", onAbort);
  try {
    yield startMsg(proc.pid);
    for (;;) {
      if (sub.q.length > 0) {
        const msg = sub.shift();
        yield msg;
        if (msg === proc.end) {
          if (deadlineHit) throw deadlineError();
          return;
        }
        continue;
      }
      if (ctx.signal.aborted && !deadlineHit) {
        if (!isDeadline(ctx.signal.reason)) return; // the client went away
        // This stream's deadline.  If it is the process's lifetime, the
        // process is killed and its end is reported first.
        deadlineHit = true;
        if (token === 0 || proc.deadlineToken() !== token) {
          throw deadlineError();
        }
        proc.kill("SIGKILL");
        endBy = Date.now() + DEADLINE_END_WAIT_MS;
        continue;
      }
      const r = await sub.wait(deadlineHit ? endBy - Date.now() : kaMs);
      if (r === "timeout") {
        if (deadlineHit) throw deadlineError();
        if (sub.q.length === 0) yield keepaliveMsg;
      }
    }
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
    proc.unsubscribe(sub);
  }
}

// ---------------------------------------------------------------------------
// The service

function checkInput(proc, input) {
  const c = input?.input?.case;
  if (c !== "stdin" && c !== "pty") {
    throw err(Code.Unimplemented, "invalid input type <nil>");
  }
  if (c === "pty") {
    throw err(Code.Internal,
      "error writing to tty: tty not assigned to process — input should " +
      "be written to the stdin, not the tty");
  }
  if (!proc.stdinOpen) {
    throw err(Code.Internal,
      "error writing to stdin: stdin not enabled or closed");
  }
  return input.input.value;
}

async function writeInput(proc, data) {
  try {
    await proc.write(data);
  } catch (e) {
    throw err(Code.Internal, `error writing to stdin: write: ${e.message}`);
  }
}

const service = {
  async list(_req, ctx) {
    callUser(ctx);
    return {
      processes: procs.filter((p) => !p.ended).map((p) => ({
        config: p.config,
        pid: p.pid,
        tag: p.tag,
      })),
    };
  },

  async *start(req, ctx) {
    const user = callUser(ctx);
    const kaMs = keepaliveMs(ctx);
    const life = timeoutMs(ctx);
    if (life !== undefined && life <= 0) throw deadlineError();
    if (req.pty !== undefined) {
      throw err(Code.Unimplemented,
        "PTY is not supported by this server (tests/api/node/server.mjs)");
    }
    const self = process.geteuid();
    if (self !== 0 && user.uid !== self) {
      throw err(Code.PermissionDenied,
        `cannot run as user '${user.name}': server.mjs is not running as ` +
        "root");
    }
    const cfg = req.process;
    const cwd = resolveCwd(cfg?.cwd, user);
    const args = ["-c", 'exec "$@"', "--", cfg?.cmd ?? "", ...(cfg?.args ?? [])];
    let sp;
    try {
      sp = await spawnWithPipes("/bin/sh", args, {
        cwd,
        env: environment(user, cfg?.envs),
        // No group of its own, as envd starts piped processes (its
        // SendSignal reaches the pid only): a client's tree leader
        // (api/tree.c) must make the group itself, here as there.
        detached: false,
        ...(user.uid !== self ? { uid: user.uid, gid: user.gid } : {}),
      }, req.stdin !== false);
    } catch (e) {
      throw err(Code.Internal, `error starting process: ${e.message}`);
    }
    const proc = new Proc(sp, req);
    // The pid is this process's now: an ended one that had it is forgotten.
    for (const old of procs.filter((p) => p.pid === proc.pid && p.ended)) {
      clearTimeout(old.retain);
      forget(old);
    }
    procs.push(proc);
    const token = life !== undefined ? proc.setDeadline(life) : 0;
    const sub = proc.subscribe();
    yield* follow(proc, sub, ctx, kaMs, token);
  },

  async *connect(req, ctx) {
    callUser(ctx);
    const kaMs = keepaliveMs(ctx);
    const life = timeoutMs(ctx);
    if (life !== undefined && life <= 0) throw deadlineError();
    const proc = find(req.process, true);
    if (proc.ended) {
      yield startMsg(proc.pid);
      yield proc.end;
      return;
    }
    // A Connect's deadline is the process's lifetime from now on.
    const token = life !== undefined ? proc.setDeadline(life) : 0;
    const sub = proc.subscribe();
    yield* follow(proc, sub, ctx, kaMs, token);
  },

  async update(req, ctx) {
    callUser(ctx);
    find(req.process, false);
    if (req.pty !== undefined) {
      // No process here has a terminal.
      throw err(Code.Internal,
        "error resizing tty: tty not assigned to process");
    }
    return {};
  },

  async streamInput(reqs, ctx) {
    callUser(ctx);
    let proc = null;
    for await (const r of reqs) {
      switch (r.event.case) {
        case "start":
          proc = find(r.event.value.process, false);
          break;
        case "data":
          if (proc === null) {
            throw err(Code.Internal,
              "error writing to stdin: no process selected: the first " +
              "message must be a start event");
          }
          if (proc.ended) {
            throw err(Code.Internal,
              "error writing to stdin: stdin not enabled or closed");
          }
          await writeInput(proc, checkInput(proc, r.event.value.input));
          break;
        case "keepalive":
          break;
        default:
          throw err(Code.Unimplemented, "invalid event type <nil>");
      }
    }
    return {};
  },

  async sendInput(req, ctx) {
    callUser(ctx);
    const proc = find(req.process, false);
    await writeInput(proc, checkInput(proc, req.input));
    return {};
  },

  async sendSignal(req, ctx) {
    callUser(ctx);
    const proc = find(req.process, false);
    let sig;
    if (req.signal === Signal.SIGKILL) {
      sig = "SIGKILL";
    } else if (req.signal === Signal.SIGTERM) {
      sig = "SIGTERM";
    } else if (req.signal === Signal.UNSPECIFIED) {
      throw err(Code.Unimplemented, "invalid signal: SIGNAL_UNSPECIFIED");
    } else {
      throw err(Code.Unimplemented, `invalid signal: ${req.signal}`);
    }
    try {
      proc.kill(sig);
    } catch (e) {
      throw err(Code.Internal, `error sending signal: ${e.message}`);
    }
    return {};
  },

  async closeStdin(req, ctx) {
    callUser(ctx);
    const proc = find(req.process, false);
    proc.closeStdin();
    return {};
  },
};

// ---------------------------------------------------------------------------
// Server

const filesHalf = makeFiles({
  callUser, keepaliveMs, passwdEntries, selfUser, basicUser, token: opt.token,
});

const connectHandler = connectNodeAdapter({
  routes(router) {
    router.service(Process, service);
    router.service(Filesystem, filesHalf.service);
  },
  acceptCompression: [compressionGzip],
  compressMinBytes: 1024,
  readMaxBytes: 16 * MIB,
  writeMaxBytes: 16 * MIB,
  // Node's timers hold at most 2^31-1 ms (connect-node's deadline signal
  // would fire at once beyond that): longer Connect-Timeout-Ms values are
  // refused (invalid_argument) rather than misread.
  maxTimeoutMs: 2147483647,
});

const unauthorized = JSON.stringify({
  code: 401,
  message: "unauthorized access, please provide a valid access token or " +
    "method signing if supported",
});

function handler(req, res) {
  if (req.url === "/health" && (req.method === "GET" ||
    req.method === "HEAD")) {
    res.writeHead(204);
    res.end();
    return;
  }
  // /files checks its token or signature itself (envd's validateSigning).
  if (req.url === "/files" || req.url.startsWith("/files?")) {
    filesHalf.files(req, res);
    return;
  }
  if (opt.token !== null && req.headers["x-access-token"] !== opt.token) {
    res.writeHead(401, { "content-type": "application/json; charset=utf-8" });
    res.end(unauthorized);
    return;
  }
  connectHandler(req, res);
}

// HTTP/2 without TLS (prior knowledge), or with --http1 plain HTTP/1.1:
// one call per connection at a time, Connect's streams as chunked bodies
// (connect-node serves both codecs and gzip on either).
function http2Server() {
  const s = http2.createServer({
    settings: {
      maxConcurrentStreams: 4096,
      initialWindowSize: 4 * MIB,
      maxFrameSize: 1 * MIB,
      maxHeaderListSize: 64 * KIB,
    },
    maxSessionMemory: 1024, // MB; the default 10 refuses streams under load
    maxOutstandingPings: 64,
  }, handler);
  s.on("session", (session) => {
    session.on("connect", () => {
      try {
        session.setLocalWindowSize(32 * MIB);
      } catch {
        // The session may already be gone.
      }
    });
    session.on("error", () => {});
  });
  return s;
}

function http1Server() {
  const s = http.createServer({
    // A Start stream lasts as long as its process: no whole-request limit
    // (Node's default is 300 s), and headers are small.
    requestTimeout: 0,
    maxHeaderSize: 64 * KIB,
    // Idle keep-alive connections stay a while (clients reuse them; Node's
    // 5 s default races a client about to send on one).
    keepAliveTimeout: 65000,
  }, handler);
  s.on("clientError", (_e, socket) => socket.destroy());
  return s;
}

const server = opt.http1 ? http1Server() : http2Server();
server.on("error", (e) => {
  process.stderr.write(`server.mjs: ${e.stack ?? e}\n`);
  process.exit(1);
});

// A stream the client reset while a write was pending surfaces here; the
// call is over either way.  Anything else is a bug worth seeing.
process.on("unhandledRejection", (e) => {
  if (e instanceof ConnectError && e.code === Code.Canceled) return;
  process.stderr.write(`server.mjs: unhandled rejection: ${e?.stack ?? e}\n`);
});

process.on("exit", () => {
  killAll();
  fifos.remove();
});
fifos.fill().catch((e) => {
  process.stderr.write(`server.mjs: mkfifo: ${e.message}\n`);
});

function shutdown() {
  process.exit(0); // killAll runs on "exit"
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.on("SIGHUP", shutdown);

// Exit when the parent closes our stdin, but only when stdin is a pipe or
// socket (not /dev/null or a terminal, where "closed" says nothing).
let watchStdin = false;
try {
  const st = fs.fstatSync(0);
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

server.listen(opt.port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
