// The files half of the envd-like peer (server.mjs imports it): the
// filesystem.Filesystem service and envd's plain HTTP /files, as
// /work/shared/ENVD.md, envd's spec (envd.yaml, filesystem.proto) and, where
// envd says nothing, what tools/conch/serve_fs.c and serve_files.c chose.
// Written apart from conch serve (Node's fs and fs.watch, its own multipart
// reader) so that what the C API assumes of one server only shows up.
//
// Paths are the user's: "" and "~" its home, "~/x" under it, a relative
// path joined to it, an absolute one as given.  A root server acts for
// another user by taking its effective uid/gid around each synchronous
// file system call (Node's sync calls run on the main thread); a server
// that is not root acts for its own user only (permission_denied else).
//
// Left out (README.md): user.e2b.* xattr metadata (Node has no xattr
// call), chmod events (fs.watch says "change" for writes and attribute
// changes alike: both are WRITE here), network mount refusal beyond
// statfs's NFS/CIFS/SMB magic numbers.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as util from "node:util";
import * as zlib from "node:zlib";

import { create } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  EntryInfoSchema,
  EventType,
  FileType,
} from "./gen/filesystem/filesystem_pb.js";

const KIB = 1024;
const MIB = 1024 * KIB;
const MAX_WATCHERS = 100; // WatchDir streams and polling watchers together
const MAX_EVENTS = 10000; // untaken events of a polling watcher
const WATCH_QUEUE = 10000; // events a WatchDir client may be behind
const WATCHER_IDLE_MS = 600000; // a polling watcher without a poll goes
const LIST_MAX = 100000; // entries of one ListDir
const GZ_RATIO = 100; // a gzip body may inflate this many times ...
const GZ_SLACK = 64 * MIB; // ... plus this
const MAX_PART_HEADER = 16 * KIB;

const err = (code, msg) => new ConnectError(msg, code);

// Go's text of an errno (libuv's, lower case: "no such file or directory").
const sysErrors = util.getSystemErrorMap();
function goErr(e) {
  const m = typeof e?.errno === "number" ? sysErrors.get(e.errno) : undefined;
  return m !== undefined ? m[1] : String(e?.message ?? e);
}

function errnoCode(e, other) {
  switch (e?.code) {
    case "ENOENT":
      return Code.NotFound;
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return Code.PermissionDenied;
    case "ENOMEM":
    case "ENOSPC":
    case "EDQUOT":
    case "EMFILE":
    case "ENFILE":
      return Code.ResourceExhausted;
    default:
      return other;
  }
}

// ---------------------------------------------------------------------------
// Users and paths

let groupCache = { key: "", names: new Map() };
function groupName(gid) {
  try {
    const st = fs.statSync("/etc/group");
    const key = `${st.mtimeMs}:${st.size}:${st.ino}`;
    if (key !== groupCache.key) {
      const names = new Map();
      for (const line of fs.readFileSync("/etc/group", "utf8").split("\n")) {
        const f = line.split(":");
        if (f.length >= 3 && f[0] !== "" && !names.has(Number(f[2]))) {
          names.set(Number(f[2]), f[0]);
        }
      }
      groupCache = { key, names };
    }
  } catch {
    // No group file: numbers.
  }
  return groupCache.names.get(gid) ?? String(gid);
}

export function makeFiles(deps) {
  const { callUser, keepaliveMs, passwdEntries, selfUser, basicUser, token } =
    deps;

  function ownerName(uid) {
    const u = passwdEntries().find((e) => e.uid === uid);
    return u !== undefined ? u.name : String(uid);
  }

  const euid = process.geteuid();

  // Runs |fn| with |u|'s filesystem identity (a root server acting for
  // another user), else as the server.
  function asUser(u, fn) {
    if (euid !== 0 || u.uid === 0) return fn();
    const groups = process.getgroups();
    process.setgroups([u.gid]);
    process.setegid(u.gid);
    process.seteuid(u.uid);
    try {
      return fn();
    } finally {
      process.seteuid(0);
      process.setegid(0);
      process.setgroups(groups);
    }
  }

  function mayAct(u) {
    return euid === 0 || u.uid === euid;
  }

  // The user of an RPC, checked for being one this server can act as.
  function rpcUser(ctx) {
    const u = callUser(ctx);
    if (!mayAct(u)) {
      throw err(Code.PermissionDenied,
        `cannot act as user '${u.name}': the server is not running as root`);
    }
    return u;
  }

  // envd's ExpandAndResolve.
  function resolvePath(u, p) {
    if (p === undefined || p === "") return u.home;
    if (p[0] === "~") {
      if (p.length > 1 && p[1] !== "/") {
        throw err(Code.InvalidArgument,
          `failed to expand path '${p}' for user '${u.name}': cannot expand ` +
          "user-specific home dir");
      }
      return path.join(u.home, p.slice(1));
    }
    if (p[0] === "/") return p;
    return path.join(u.home, p);
  }

  // ---------------------------------------------------------------------------
  // Entries

  // Go's os.FileMode.String() of an lstat mode.
  function modeString(m) {
    const t = m & fs.constants.S_IFMT;
    let s = "";
    if (t === fs.constants.S_IFDIR) s += "d";
    if (t === fs.constants.S_IFLNK) s += "L";
    if (t === fs.constants.S_IFBLK || t === fs.constants.S_IFCHR) s += "D";
    if (t === fs.constants.S_IFIFO) s += "p";
    if (t === fs.constants.S_IFSOCK) s += "S";
    if (m & fs.constants.S_ISUID) s += "u";
    if (m & fs.constants.S_ISGID) s += "g";
    if (t === fs.constants.S_IFCHR) s += "c";
    if (m & fs.constants.S_ISVTX) s += "t";
    if (s === "") s = "-";
    const rwx = "rwxrwxrwx";
    for (let i = 0; i < 9; i++) s += m & (1 << (8 - i)) ? rwx[i] : "-";
    return s;
  }

  function fileType(m) {
    const t = m & fs.constants.S_IFMT;
    if (t === fs.constants.S_IFREG) return FileType.FILE;
    if (t === fs.constants.S_IFDIR) return FileType.DIRECTORY;
    if (t === fs.constants.S_IFLNK) return FileType.SYMLINK;
    return FileType.UNSPECIFIED;
  }

  // envd's entryInfo(p): lstat'ed; a symlink has its target (resolved all
  // the way, else itself) and the type and permission bits of what it
  // points at.  Throws the lstat's error.
  function entryInfo(p, shown = p) {
    const st = fs.lstatSync(p, { bigint: true });
    const mode = Number(st.mode);
    let trimmed = p;
    while (trimmed.length > 1 && trimmed.endsWith("/")) {
      trimmed = trimmed.slice(0, -1);
    }
    const e = create(EntryInfoSchema, {
      name: trimmed === "/" ? "/" : path.basename(trimmed),
      path: shown,
      size: st.size,
      permissions: modeString(mode),
      owner: ownerName(Number(st.uid)),
      group: groupName(Number(st.gid)),
    });
    if ((mode & fs.constants.S_IFMT) === fs.constants.S_IFLNK) {
      let target;
      try {
        target = fs.realpathSync(p);
      } catch {
        target = p;
      }
      e.symlinkTarget = target;
      try {
        const t = fs.statSync(target);
        e.type = fileType(t.mode);
        e.mode = t.mode & 0o777;
      } catch {
        // Dangling: unspecified, 0.
      }
    } else {
      e.type = fileType(mode);
      e.mode = mode & 0o777;
    }
    if (st.mtimeNs !== 0n) {
      e.modifiedTime = create(TimestampSchema, {
        seconds: st.mtimeNs / 1000000000n,
        nanos: Number(st.mtimeNs % 1000000000n),
      });
    }
    return e;
  }

  function entryFail(p, e) {
    if (e?.code === "ENOENT") {
      return err(Code.NotFound, `file not found: lstat ${p}: ${goErr(e)}`);
    }
    return err(errnoCode(e, Code.Internal),
      `error getting file info: lstat ${p}: ${goErr(e)}`);
  }

  // Makes |dir| and its parents (0755).  Throws [code, message].
  function ensureDirs(dir) {
    let p = "";
    for (const part of dir.split("/")) {
      p = p === "" && part === "" ? "/" : path.join(p, part);
      if (part === "") continue;
      let st;
      try {
        st = fs.statSync(p);
      } catch (e) {
        if (e.code !== "ENOENT") {
          throw { e, msg: `failed to stat directory: stat ${p}: ${goErr(e)}` };
        }
        try {
          fs.mkdirSync(p, 0o755);
        } catch (e2) {
          if (e2.code !== "EEXIST") {
            throw { e: e2,
              msg: `failed to create directory: mkdir ${p}: ${goErr(e2)}` };
          }
        }
        continue;
      }
      if (!st.isDirectory()) {
        throw { e: { code: "ENOTDIR" }, msg: `path is a file: ${p}` };
      }
    }
  }

  // ---------------------------------------------------------------------------
  // Watchers

  const watchers = new Map(); // id -> polling watcher
  let nwatchers = 0;

  const NETWORK_FS = new Set([0x6969, 0xff534d42, 0xfe534d42, 0x517b]);

  function checkWatchPath(u, p, allowNetwork) {
    asUser(u, () => {
      let st;
      try {
        st = fs.statSync(p);
      } catch (e) {
        if (e.code === "ENOENT") {
          throw err(Code.NotFound,
            `path ${p} not found: stat ${p}: ${goErr(e)}`);
        }
        throw err(errnoCode(e, Code.Internal),
          `error statting path ${p}: stat ${p}: ${goErr(e)}`);
      }
      if (!st.isDirectory()) {
        throw err(Code.InvalidArgument, `path ${p} not a directory`);
      }
      if (!allowNetwork) {
        let sf;
        try {
          sf = fs.statfsSync(p);
        } catch (e) {
          throw err(Code.Internal, "error checking mount status: failed to " +
            `statfs ${p}: ${goErr(e)}`);
        }
        if (NETWORK_FS.has(Number(sf.type) >>> 0)) {
          throw err(Code.InvalidArgument,
            `cannot watch path on network filesystem: ${p}`);
        }
      }
    });
    if (nwatchers >= MAX_WATCHERS) {
      throw err(Code.ResourceExhausted, "error creating watcher: too many " +
        `watchers: ${nwatchers}, the limit is ${MAX_WATCHERS}`);
    }
  }

  // The last names of the temporary files uploads are written into
  // (renamed into place once whole): no watch shows them, as envd, which
  // writes in place, shows only the file.  fs.watch tells of them later
  // than they go, so a name is forgotten a minute after its rename.
  const ownTemps = new Set();
  const forgetTemp = (tmp) => {
    setTimeout(() => ownTemps.delete(path.basename(tmp)), 60000).unref();
  };

  // A watch of |root| (recursive: each directory under it its own
  // fs.watch, new ones added as they come).  |emit(ev)| gets envd's
  // FilesystemEvent shape; |fail(code, msg)| ends it.
  //
  // fs.watch says only "rename" (something came or went under a name) and
  // "change", and says it after the fact: by then the name may be gone
  // again.  So each watched directory keeps the names it holds, and a
  // "rename" toggles one: a name not held came (CREATE), a held one went
  // (or, still there, was replaced: CREATE).  A name that went and is
  // followed at once by one that came is fsnotify's RENAME (inotify's
  // IN_MOVED_FROM/IN_MOVED_TO pair, read from the one queue libuv keeps for
  // the loop); else it is a REMOVE.  "change" is WRITE (a chmod too).
  function startWatch(u, root, recursive, includeEntry, emit, fail) {
    const dirs = new Map(); // dir path -> { w: FSWatcher, names: Set }
    let closed = false;
    let gone = null; // the full path of a name that went, not yet told
    let flush = null;

    const rel = (full) => (full === root ? "." : path.relative(root, full));

    const add = (dir) => {
      if (closed || dirs.has(dir)) return;
      let w;
      let names = [];
      try {
        w = asUser(u, () => fs.watch(dir, { persistent: false }));
        names = asUser(u, () => fs.readdirSync(dir, { withFileTypes: true }));
      } catch (e) {
        w?.close();
        if (dir === root) throw e;
        return; // gone meanwhile, or unreadable: not watched (as envd)
      }
      const d = { w, names: new Set(names.map((x) => x.name)) };
      dirs.set(dir, d);
      w.on("error", () => {
        w.close();
        dirs.delete(dir);
      });
      w.on("change", (kind, name) => onEvent(dir, kind, name));
      if (recursive) {
        for (const x of names) {
          if (x.isDirectory()) add(path.join(dir, x.name));
        }
      }
    };

    const send = (full, type) => {
      const ev = { name: rel(full), type };
      if (includeEntry && (type === EventType.CREATE ||
        type === EventType.WRITE || type === EventType.CHMOD)) {
        try {
          ev.entry = asUser(u, () => entryInfo(full));
        } catch {
          // Gone meanwhile: no entry.
        }
      }
      emit(ev);
    };

    const tellGone = (type) => {
      if (gone === null) return;
      const full = gone;
      gone = null;
      if (flush !== null) {
        clearImmediate(flush);
        flush = null;
      }
      send(full, type);
    };

    const forgetDir = (full) => {
      for (const [p, d] of dirs) {
        if (p === full || p.startsWith(full + "/")) {
          d.w.close();
          dirs.delete(p);
        }
      }
    };

    function onEvent(dir, kind, name) {
      if (closed) return;
      if (name && ownTemps.has(path.basename(name))) return;
      const d = dirs.get(dir);
      if (d === undefined) return;
      if (!name) {
        tellGone(EventType.REMOVE);
        if (kind === "rename" && dir === root) {
          send(root, EventType.REMOVE);
          fail(Code.Internal,
            `watcher error: the watched directory ${root} is gone`);
        }
        return;
      }
      name = String(name);
      const full = path.join(dir, name);
      if (kind === "change") {
        tellGone(EventType.REMOVE);
        send(full, EventType.WRITE);
        return;
      }
      let st = null;
      try {
        st = asUser(u, () => fs.lstatSync(full));
      } catch {
        st = null;
      }
      if (!d.names.has(name) || st !== null) {
        // Came (or replaced what was there).
        tellGone(EventType.RENAME);
        d.names.add(name);
        if (recursive && st !== null && st.isDirectory()) {
          forgetDir(full);
          add(full);
        }
        send(full, EventType.CREATE);
        return;
      }
      // Went: a RENAME if a name comes next, else a REMOVE.
      tellGone(EventType.REMOVE);
      d.names.delete(name);
      forgetDir(full);
      gone = full;
      flush = setImmediate(() => {
        flush = null;
        if (!closed) tellGone(EventType.REMOVE);
      });
    }

    add(root);
    return () => {
      closed = true;
      if (flush !== null) clearImmediate(flush);
      for (const d of dirs.values()) d.w.close();
      dirs.clear();
    };
  }

  // ---------------------------------------------------------------------------
  // The RPCs

  function listWalk(out, real, shown, left) {
    let names;
    try {
      names = fs.readdirSync(real).sort();
    } catch (e) {
      if (e.code === "ENOMEM") throw e;
      return; // an unreadable directory below the top: no contents
    }
    for (const n of names) {
      const wp = path.join(real, n);
      const sp = path.join(shown, n);
      let e;
      try {
        e = entryInfo(wp, sp);
      } catch (x) {
        if (x.code === "ENOENT") continue; // gone meanwhile
        throw err(errnoCode(x, Code.Internal),
          `error reading directory ${real}: ${wp}: ${goErr(x)}`);
      }
      out.push(e);
      if (out.length > LIST_MAX) {
        throw err(Code.ResourceExhausted, `error reading directory ${real}: ` +
          `more than ${LIST_MAX} entries; ask for a smaller depth`);
      }
      if (left > 1 && e.symlinkTarget === undefined &&
        e.type === FileType.DIRECTORY) {
        listWalk(out, wp, sp, left - 1);
      }
    }
  }

  const service = {
    async stat(req, ctx) {
      const u = rpcUser(ctx);
      const p = resolvePath(u, req.path);
      return asUser(u, () => {
        try {
          return { entry: entryInfo(p) };
        } catch (e) {
          throw entryFail(p, e);
        }
      });
    },

    async makeDir(req, ctx) {
      const u = rpcUser(ctx);
      const p = resolvePath(u, req.path);
      return asUser(u, () => {
        let st = null;
        try {
          st = fs.statSync(p);
        } catch (e) {
          if (e.code !== "ENOENT") {
            throw err(errnoCode(e, Code.Internal),
              `error getting file info: stat ${p}: ${goErr(e)}`);
          }
        }
        if (st !== null) {
          if (st.isDirectory()) {
            throw err(Code.AlreadyExists, `directory already exists: ${p}`);
          }
          throw err(Code.InvalidArgument,
            `path already exists but it is not a directory: ${p}`);
        }
        try {
          ensureDirs(p);
        } catch (x) {
          throw err(errnoCode(x.e, Code.Internal), x.msg);
        }
        try {
          return { entry: entryInfo(p) };
        } catch (e) {
          throw entryFail(p, e);
        }
      });
    },

    async move(req, ctx) {
      const u = rpcUser(ctx);
      const src = resolvePath(u, req.source);
      const dst = resolvePath(u, req.destination);
      return asUser(u, () => {
        try {
          ensureDirs(path.dirname(path.normalize(dst)));
        } catch (x) {
          throw err(errnoCode(x.e, Code.Internal), x.msg);
        }
        try {
          fs.renameSync(src, dst);
        } catch (e) {
          if (e.code === "ENOENT") {
            throw err(Code.NotFound,
              `source file not found: rename ${src} ${dst}: ${goErr(e)}`);
          }
          throw err(errnoCode(e, Code.Internal),
            `error renaming: rename ${src} ${dst}: ${goErr(e)}`);
        }
        try {
          return { entry: entryInfo(dst) };
        } catch (e) {
          throw entryFail(dst, e);
        }
      });
    },

    async listDir(req, ctx) {
      const u = rpcUser(ctx);
      const depth = req.depth === 0 ? 1 : req.depth;
      const p = resolvePath(u, req.path);
      return asUser(u, () => {
        let real;
        try {
          real = fs.realpathSync(p);
        } catch (e) {
          if (e.code === "ENOENT" || e.code === "ENOTDIR") {
            throw err(Code.NotFound, `path not found: lstat ${p}: ${goErr(e)}`);
          }
          if (e.code === "ELOOP") {
            throw err(Code.FailedPrecondition,
              `cyclic symlink or chain >255 links at "${p}"`);
          }
          throw err(errnoCode(e, Code.Internal),
            `error resolving symlink: ${p}: ${goErr(e)}`);
        }
        let st;
        try {
          st = fs.statSync(real);
        } catch (e) {
          throw err(errnoCode(e, Code.Internal),
            `directory not found: stat ${real}: ${goErr(e)}`);
        }
        if (!st.isDirectory()) {
          throw err(Code.InvalidArgument, `path is not a directory: ${p}`);
        }
        try {
          fs.closeSync(fs.openSync(real, fs.constants.O_RDONLY |
            fs.constants.O_DIRECTORY));
        } catch (e) {
          throw err(errnoCode(e, Code.Internal),
            `error reading directory ${real}: open ${real}: ${goErr(e)}`);
        }
        const entries = [];
        listWalk(entries, real, p, depth);
        return { entries };
      });
    },

    async remove(req, ctx) {
      const u = rpcUser(ctx);
      const p = resolvePath(u, req.path);
      const clean = path.normalize(p);
      if (path.basename(p) === "." || p === ".") {
        throw err(Code.Internal, "error removing file or directory: " +
          `RemoveAll ${p}: invalid argument`);
      }
      if (clean === "/") {
        throw err(Code.InvalidArgument,
          "error removing file or directory: refusing to remove /");
      }
      asUser(u, () => {
        try {
          fs.rmSync(p, { recursive: true, force: true });
        } catch (e) {
          throw err(errnoCode(e, Code.Internal),
            `error removing file or directory: unlinkat ${p}: ${goErr(e)}`);
        }
      });
      return {};
    },

    async *watchDir(req, ctx) {
      const u = rpcUser(ctx);
      const kaMs = keepaliveMs(ctx);
      const p = resolvePath(u, req.path);
      checkWatchPath(u, p, req.allowNetworkMounts);
      const queue = [];
      let wake = null;
      let end = null;
      const poke = () => {
        if (wake !== null) {
          const w = wake;
          wake = null;
          w();
        }
      };
      nwatchers++;
      let stop;
      try {
        stop = startWatch(u, p, req.recursive, req.includeEntry, (ev) => {
          if (end !== null) return;
          if (queue.length >= WATCH_QUEUE) {
            end = err(Code.Internal,
              "watcher error: fsnotify: queue or buffer overflow");
          } else {
            queue.push(ev);
          }
          poke();
        }, (code, msg) => {
          if (end === null) end = err(code, msg);
          poke();
        });
      } catch (e) {
        nwatchers--;
        throw err(errnoCode(e, Code.Internal),
          `error adding path ${p} to watcher: ${goErr(e)}`);
      }
      // A client gone ends the watch at once, even with the generator
      // parked in a yield whose write never completes.
      let stopped = false;
      const stopOnce = () => {
        if (stopped) return;
        stopped = true;
        stop();
        nwatchers--;
      };
      const onAbort = () => {
        stopOnce();
        poke();
      };
      ctx.signal.addEventListener("abort", onAbort);
      if (ctx.signal.aborted) onAbort();
      try {
        yield { event: { case: "start", value: {} } };
        for (;;) {
          while (queue.length > 0) {
            yield { event: { case: "filesystem", value: queue.shift() } };
          }
          if (end !== null) throw end;
          if (ctx.signal.aborted) return;
          const timedOut = await new Promise((resolve) => {
            const t = setTimeout(() => {
              wake = null;
              resolve(true);
            }, kaMs);
            wake = () => {
              clearTimeout(t);
              resolve(false);
            };
          });
          if (timedOut && queue.length === 0 && end === null &&
            !ctx.signal.aborted) {
            yield { event: { case: "keepalive", value: {} } };
          }
        }
      } finally {
        ctx.signal.removeEventListener("abort", onAbort);
        stopOnce();
      }
    },

    async createWatcher(req, ctx) {
      const u = rpcUser(ctx);
      const p = resolvePath(u, req.path);
      checkWatchPath(u, p, req.allowNetworkMounts);
      const id = "w" + randomBytes(12).toString("hex");
      const w = { id, user: u.name, events: [], end: null, stop: null,
        idle: null };
      const close = () => {
        if (!watchers.has(id)) return;
        watchers.delete(id);
        nwatchers--;
        clearTimeout(w.idle);
        w.stop();
      };
      w.close = close;
      w.arm = () => {
        clearTimeout(w.idle);
        w.idle = setTimeout(close, WATCHER_IDLE_MS);
        w.idle.unref();
      };
      try {
        w.stop = startWatch(u, p, req.recursive, req.includeEntry, (ev) => {
          if (w.end !== null) return;
          if (w.events.length >= MAX_EVENTS) {
            w.end = err(Code.ResourceExhausted, `watcher ${id}: more than ` +
              `${MAX_EVENTS} events not taken; call GetWatcherEvents more ` +
              "often");
            w.events = [];
            w.stop();
            return;
          }
          w.events.push(ev);
        }, (code, msg) => {
          if (w.end === null) w.end = err(code, msg);
        });
      } catch (e) {
        throw err(errnoCode(e, Code.Internal),
          `error adding path ${p} to watcher: ${goErr(e)}`);
      }
      watchers.set(id, w);
      nwatchers++;
      w.arm();
      return { watcherId: id };
    },

    async getWatcherEvents(req, ctx) {
      rpcUser(ctx);
      const w = watchers.get(req.watcherId);
      if (w === undefined) {
        throw err(Code.NotFound, `watcher with id ${req.watcherId} not found`);
      }
      w.arm();
      const events = w.events;
      w.events = [];
      if (events.length === 0 && w.end !== null) {
        const e = w.end;
        w.close();
        throw e;
      }
      return { events };
    },

    async removeWatcher(req, ctx) {
      rpcUser(ctx);
      const w = watchers.get(req.watcherId);
      if (w === undefined) {
        throw err(Code.NotFound, `watcher with id ${req.watcherId} not found`);
      }
      w.close();
      return {};
    },
  };

  // ---------------------------------------------------------------------------
  // /files

  function jsonFail(res, status, message) {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    // Go's json.Encoder, as envd answers: a newline after the value.
    const body = JSON.stringify({ code: status, message }) + "\n";
    res.writeHead(status, {
      "content-type": "application/json; charset=utf-8",
      "content-length": Buffer.byteLength(body),
    });
    res.end(body);
  }

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function signatureOk(p, op, user, exp, got) {
    const s = exp !== null ? `${p}:${op}:${user}:${token}:${exp}`
      : `${p}:${op}:${user}:${token}`;
    const want = Buffer.from("v1_" + createHash("sha256").update(s)
      .digest("base64").replace(/=+$/, ""));
    const g = Buffer.from(got);
    return g.length === want.length && timingSafeEqual(g, want);
  }

  // Token or signature (envd's validateSigning).
  function checkAccess(req, q, p, user, op) {
    if (token === null) return;
    const tok = req.headers["x-access-token"];
    if (typeof tok === "string" && tok !== "") {
      const a = Buffer.from(tok);
      const b = Buffer.from(token);
      if (a.length !== b.length || !timingSafeEqual(a, b)) {
        throw new HttpError(401,
          "access token present in header but does not match");
      }
      return;
    }
    const sig = q.get("signature");
    if (sig === null) {
      throw new HttpError(401, "missing signature query parameter");
    }
    const exp = q.get("signature_expiration");
    if (exp !== null && !/^-?[0-9]+$/.test(exp)) {
      throw new HttpError(400,
        "Invalid format for parameter signature_expiration");
    }
    if (!signatureOk(p, op, user, exp, sig)) {
      throw new HttpError(401, "invalid signature");
    }
    if (exp !== null && Number(exp) < Date.now() / 1000) {
      throw new HttpError(401, "signature is already expired");
    }
  }

  function httpUser(req, q) {
    let name = q.get("username");
    if (name === null) name = basicUser(req.headers.authorization);
    const u = name === null ? selfUser()
      : passwdEntries().find((e) => e.name === name);
    if (u === undefined) {
      throw new HttpError(401,
        `error looking up user '${name}': user: unknown user ${name}`);
    }
    if (!mayAct(u)) {
      throw new HttpError(401, `cannot act as user '${u.name}': the server ` +
        "is not running as root");
    }
    return u;
  }

  function httpPath(u, p) {
    try {
      return path.resolve(resolvePath(u, p));
    } catch (e) {
      throw new HttpError(400, `error resolving path: ${e.rawMessage ?? e}`);
    }
  }

  const TYPES = {
    ".css": "text/css; charset=utf-8", ".gif": "image/gif",
    ".htm": "text/html; charset=utf-8", ".html": "text/html; charset=utf-8",
    ".jpeg": "image/jpeg", ".jpg": "image/jpeg",
    ".js": "text/javascript; charset=utf-8", ".json": "application/json",
    ".mjs": "text/javascript; charset=utf-8", ".pdf": "application/pdf",
    ".png": "image/png", ".svg": "image/svg+xml", ".wasm": "application/wasm",
    ".webp": "image/webp", ".xml": "text/xml; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8", ".csv": "text/csv; charset=utf-8",
    ".gz": "application/gzip", ".zip": "application/zip",
    ".tar": "application/x-tar", ".py": "text/x-python; charset=utf-8",
  };

  // Go's http.DetectContentType, the cases that matter here.
  function sniff(b) {
    const starts = (s) => b.subarray(0, s.length).equals(Buffer.from(s,
      "latin1"));
    if (starts("%PDF-")) return "application/pdf";
    if (starts("\x89PNG\r\n\x1a\n")) return "image/png";
    if (starts("\xff\xd8\xff")) return "image/jpeg";
    if (starts("GIF87a") || starts("GIF89a")) return "image/gif";
    if (starts("PK\x03\x04")) return "application/zip";
    if (starts("\x1f\x8b\x08")) return "application/x-gzip";
    for (const c of b) {
      if (c <= 0x08 || c === 0x0b || (c >= 0x0e && c <= 0x1a) ||
        (c >= 0x1c && c <= 0x1f)) {
        return "application/octet-stream";
      }
    }
    return "text/plain; charset=utf-8";
  }

  // Go's mime.FormatMediaType("inline", {"filename": name}).
  function disposition(name) {
    if (/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name)) {
      return `inline; filename=${name}`;
    }
    if (/^[\x20-\x7e]*$/.test(name)) {
      return `inline; filename="${name.replace(/(["\\])/g, "\\$1")}"`;
    }
    return `inline; filename*=utf-8''${encodeURIComponent(name)
      .replace(/['()*]/g, (c) => "%" + c.charCodeAt(0).toString(16)
        .toUpperCase())}`;
  }

  function download(req, res, u, p) {
    let fd;
    let st;
    asUser(u, () => {
      try {
        st = fs.statSync(p);
      } catch (e) {
        if (e.code === "ENOENT") {
          throw new HttpError(404, `path '${p}' does not exist`);
        }
        throw new HttpError(500,
          `error checking if path exists '${p}': ${goErr(e)}`);
      }
      if (st.isDirectory()) {
        throw new HttpError(400, `path '${p}' is a directory`);
      }
      try {
        fd = fs.openSync(p, "r");
      } catch (e) {
        throw new HttpError(e.code === "EACCES" ? 401 : 500,
          `error opening file '${p}': ${goErr(e)}`);
      }
    });
    let ctype = TYPES[path.extname(p).toLowerCase()];
    if (ctype === undefined) {
      const head = Buffer.alloc(512);
      const n = fs.readSync(fd, head, 0, 512, 0);
      ctype = sniff(head.subarray(0, n));
    }
    res.writeHead(200, {
      "accept-ranges": "bytes",
      "content-disposition": disposition(path.basename(p)),
      "content-length": st.size,
      "content-type": ctype,
      "last-modified": st.mtime.toUTCString(),
      "vary": "Accept-Encoding",
    });
    if (req.method === "HEAD" || st.size === 0) {
      fs.closeSync(fd);
      res.end();
      return;
    }
    // A stream of 64 KiB reads, each written as the client takes them
    // (pipe waits for drain): bounded memory whatever the file's size.
    // Content-Length is the size at the stat: no more than that is sent.
    const rs = fs.createReadStream(null, { fd, highWaterMark: 64 * KIB,
      start: 0, end: st.size - 1 });
    rs.on("error", () => res.destroy());
    res.on("close", () => rs.destroy());
    rs.pipe(res);
  }

  // An upload target: a temporary file next to |p| (parents made), renamed
  // into place by commit().
  function openTarget(u, p) {
    return asUser(u, () => {
      try {
        const st = fs.statSync(p);
        if (st.isDirectory()) {
          throw new HttpError(400, `path is a directory: ${p}`);
        }
      } catch (e) {
        if (e instanceof HttpError) throw e;
        if (e.code !== "ENOENT") {
          throw new HttpError(500,
            `error getting file info: stat ${p}: ${goErr(e)}`);
        }
      }
      try {
        ensureDirs(path.dirname(p));
      } catch (x) {
        throw new HttpError(x.e?.code === "ENOSPC" ? 507 : 500,
          `error ensuring directories: ${x.msg}`);
      }
      let mode = 0o644;
      try {
        mode = fs.statSync(p).mode & 0o7777;
      } catch {
        // A new file.
      }
      const tmp = path.join(path.dirname(p),
        `.${path.basename(p)}.conch-${randomBytes(3).toString("hex")}`);
      let fd;
      try {
        ownTemps.add(path.basename(tmp));
        fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT |
          fs.constants.O_EXCL, mode);
        fs.fchmodSync(fd, mode);
      } catch (e) {
        throw new HttpError(e.code === "ENOSPC" ? 507 : 500,
          (e.code === "ENOSPC" ? "not enough inodes available: " :
            "error opening file: ") + `open ${p}: ${goErr(e)}`);
      }
      return { u, p, tmp, fd };
    });
  }

  function writeAll(t, chunk) {
    return new Promise((resolve, reject) => {
      fs.write(t.fd, chunk, 0, chunk.length, null, (e, n) => {
        if (e) {
          reject(e.code === "ENOSPC" || e.code === "EDQUOT"
            ? new HttpError(507, "not enough disk space available")
            : new HttpError(500, `error writing file: write ${t.p}: ${
              goErr(e)}`));
        } else if (n < chunk.length) {
          writeAll(t, chunk.subarray(n)).then(resolve, reject);
        } else {
          resolve();
        }
      });
    });
  }

  function commit(t) {
    asUser(t.u, () => {
      try {
        fs.closeSync(t.fd);
        t.fd = -1;
        fs.renameSync(t.tmp, t.p);
        forgetTemp(t.tmp);
        t.tmp = null;
      } catch (e) {
        throw new HttpError(e.code === "ENOSPC" ? 507 : 500,
          `error writing file: rename: ${goErr(e)}`);
      }
    });
  }

  function abandon(t) {
    if (t === null) return;
    try {
      if (t.fd >= 0) fs.closeSync(t.fd);
    } catch {
      // Closed already.
    }
    t.fd = -1;
    if (t.tmp !== null) {
      try {
        fs.unlinkSync(t.tmp);
      } catch {
        // Gone already.
      }
      forgetTemp(t.tmp);
      t.tmp = null;
    }
  }

  // The body, inflated if gzip'd (bounded: GZ_RATIO times the compressed
  // size plus GZ_SLACK), as an async iterable of Buffers.
  async function* body(req) {
    const enc = (req.headers["content-encoding"] ?? "").trim().toLowerCase();
    if (enc === "" || enc === "identity") {
      // Not destroyed when the reader stops early: the answer still goes.
      yield* req.iterator({ destroyOnReturn: false });
      return;
    }
    if (enc !== "gzip") {
      throw new HttpError(400, "error decompressing request body: " +
        `unsupported Content-Encoding: ${enc}`);
    }
    const gz = zlib.createGunzip({ chunkSize: 64 * KIB });
    let inBytes = 0;
    let outBytes = 0;
    let failed = null;
    req.on("data", (c) => {
      inBytes += c.length;
    });
    req.on("error", (e) => gz.destroy(e));
    gz.on("error", (e) => {
      failed = e;
    });
    req.pipe(gz);
    try {
      for await (const c of gz) {
        outBytes += c.length;
        if (outBytes > inBytes * GZ_RATIO + GZ_SLACK) {
          throw new HttpError(400, "error decompressing request body: " +
            `inflates past ${GZ_RATIO} times its size (a decompression ` +
            "bomb?)");
        }
        yield c;
      }
    } catch (e) {
      if (e instanceof HttpError) throw e;
      failed = failed ?? e;
    } finally {
      req.unpipe(gz);
      gz.destroy();
    }
    if (failed !== null) {
      throw new HttpError(400, failed.code === "Z_BUF_ERROR"
        ? "error decompressing request body: unexpected EOF"
        : "error decompressing request body: gzip: invalid data");
    }
  }

  // A streaming multipart/form-data reader: calls part(headers) at each
  // part's start, data(buf) with its bytes and end() at its end; keeps no
  // more than a delimiter's length of the body.
  async function multipart(source, boundary, on) {
    const delim = Buffer.from(`\r\n--${boundary}`);
    let buf = Buffer.from("\r\n");
    let state = "preamble"; // preamble, after, headers, body, done
    for await (const chunk of source) {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      for (;;) {
        if (state === "preamble" || state === "body") {
          const i = buf.indexOf(delim);
          if (i < 0) {
            const keep = Math.min(buf.length, delim.length - 1);
            if (state === "body" && buf.length > keep) {
              await on.data(buf.subarray(0, buf.length - keep));
            }
            buf = Buffer.from(buf.subarray(buf.length - keep));
            break;
          }
          if (state === "body") {
            if (i > 0) await on.data(buf.subarray(0, i));
            await on.end();
          }
          buf = buf.subarray(i + delim.length);
          state = "after";
        }
        if (state === "after") {
          if (buf.length < 2) break;
          if (buf[0] === 0x2d && buf[1] === 0x2d) {
            state = "done";
            break;
          }
          // Transport padding, then CRLF.
          const nl = buf.indexOf("\r\n");
          if (nl < 0) {
            if (buf.length > 1024) {
              throw new HttpError(500, "error reading form: multipart: " +
                "bad boundary line");
            }
            break;
          }
          if (!/^[ \t]*$/.test(buf.subarray(0, nl).toString("latin1"))) {
            throw new HttpError(500, "error reading form: multipart: " +
              "bad boundary line");
          }
          buf = buf.subarray(nl + 2);
          state = "headers";
        }
        if (state === "headers") {
          const i = buf.indexOf("\r\n\r\n");
          const blank = buf.subarray(0, 2).toString() === "\r\n";
          if (i < 0 && !blank) {
            if (buf.length > MAX_PART_HEADER) {
              throw new HttpError(500, "error reading form: multipart: " +
                "part header too large");
            }
            break;
          }
          const end = blank ? 0 : i;
          const text = buf.subarray(0, end).toString("utf8");
          buf = buf.subarray(blank ? 2 : i + 4);
          const headers = new Map();
          for (const line of text.split("\r\n")) {
            const c = line.indexOf(":");
            if (c > 0) {
              headers.set(line.slice(0, c).trim().toLowerCase(),
                line.slice(c + 1).trim());
            }
          }
          await on.part(headers);
          // The delimiter ending the part's data includes its CRLF.
          state = "body";
          continue;
        }
        break;
      }
      if (state === "done") buf = Buffer.alloc(0); // the epilogue: dropped
    }
    if (state === "done") return;
    throw new HttpError(500, "error reading form: multipart: " +
      "NextPart: EOF");
  }

  // Content-Disposition's parameters (name, filename, filename*).
  function dispositionParams(v) {
    const out = {};
    const re = /;\s*([^=;\s]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))/g;
    let m;
    while ((m = re.exec(v ?? "")) !== null) {
      const k = m[1].toLowerCase();
      let val = m[2] !== undefined ? m[2].replace(/\\(.)/g, "$1")
        : m[3].trim();
      if (k === "filename*") {
        const x = /^utf-8''(.*)$/i.exec(val);
        if (x !== null) {
          try {
            val = decodeURIComponent(x[1]);
          } catch {
            continue;
          }
          out.filename = val;
        }
        continue;
      }
      if (k === "filename" && out.filename !== undefined) continue;
      out[k] = val;
    }
    return out;
  }

  async function upload(req, res, u, q, qpath) {
    const ct = req.headers["content-type"] ?? "";
    const mt = ct.split(";")[0].trim().toLowerCase();
    const written = [];
    let t = null;
    try {
      if (mt === "application/octet-stream") {
        if (qpath === null || qpath === "") {
          throw new HttpError(400,
            "path query parameter is required for raw body upload");
        }
        const p = httpPath(u, qpath);
        t = openTarget(u, p);
        for await (const c of body(req)) await writeAll(t, c);
        commit(t);
        t = null;
        written.push({ path: p, name: path.basename(p), type: "file" });
      } else if (mt.startsWith("multipart/")) {
        const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(ct);
        if (m === null) {
          throw new HttpError(500, "error parsing multipart form: no " +
            "multipart boundary param in Content-Type");
        }
        const seen = new Set();
        let skip = false;
        await multipart(body(req), m[1] ?? m[2], {
          part: async (h) => {
            const d = dispositionParams(h.get("content-disposition"));
            skip = d.name !== "file";
            if (skip) return;
            let name = qpath;
            if (name === null || name === "") {
              if (d.filename === undefined) {
                throw new HttpError(400, "error getting multipart custom " +
                  "part file name: filename not found in " +
                  "Content-Disposition header");
              }
              name = d.filename;
            }
            const p = httpPath(u, name);
            if (seen.has(p)) {
              throw new HttpError(400, "you cannot upload multiple files " +
                `to the same path '${p}' in one upload request, only the ` +
                "first specified file was uploaded");
            }
            seen.add(p);
            t = openTarget(u, p);
          },
          data: async (b) => {
            if (!skip) await writeAll(t, b);
          },
          end: async () => {
            if (skip) return;
            commit(t);
            written.push({ path: t.p, name: path.basename(t.p),
              type: "file" });
            t = null;
          },
        });
      } else {
        throw new HttpError(400, `unsupported content type: ${mt}, ` +
          "expected multipart/form-data or application/octet-stream");
      }
    } finally {
      abandon(t);
    }
    const out = JSON.stringify(written) + "\n";
    res.writeHead(200, { "content-type": "application/json",
      "content-length": Buffer.byteLength(out) });
    res.end(out);
  }

  async function files(req, res) {
    const url = new URL(req.url, "http://x");
    const q = url.searchParams;
    const post = req.method === "POST";
    if (!post && req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, POST",
        "content-type": "text/plain; charset=utf-8" });
      res.end("Method Not Allowed\n");
      return;
    }
    try {
      const qpath = q.get("path");
      const u = httpUser(req, q);
      checkAccess(req, q, qpath ?? "", q.get("username") ?? "",
        post ? "write" : "read");
      if (post) {
        await upload(req, res, u, q, qpath);
      } else {
        download(req, res, u, httpPath(u, qpath ?? ""));
      }
    } catch (e) {
      if (e instanceof HttpError) {
        jsonFail(res, e.status, e.message);
      } else {
        jsonFail(res, 500, String(e?.message ?? e));
      }
      // What is left of a refused body is read and dropped.
      if (post && !req.complete) req.resume();
    }
  }

  return { service, files };
}
