"""The blocking sandbox: the same surface as AsyncSandbox without await.

Every call drives libconch on the calling thread with the GIL released;
signals are checked between turns, so Ctrl-C interrupts a wait (and the
block's teardown then ends the process).  Threads may share a Sandbox."""

from __future__ import annotations

import signal as _signal
import threading
import warnings
from typing import List, Mapping, Optional, Sequence, Union

from . import _conch
from ._common import (END, PROBE, BASH, SH, Command, Selector, TreeMode,
                      argv, data_bytes, env_map, ms, native_args,
                      needs_shell, pty_size, selector, signal_number,
                      tree_mode)
from ._errors import CapabilityNotSupported, Unavailable
from ._files import Files
from ._types import Capability, ExecResult, OutputChunk, ProcessInfo

__all__ = ["Sandbox", "Commands", "Pty", "SyncProcess", "SyncProcessHandle",
           "SyncStdinStream"]

STDIN_CHUNK = 64 * 1024


class SyncStdinStream:
    """``StdinStream`` of a blocking Sandbox (``with``, no ``await``)."""

    __slots__ = ("_sb", "_sel", "_pty", "_op", "_closed")

    def __init__(self, sb, pid, tag, pty):
        self._sb = sb
        self._sel = (pid, tag)
        self._pty = pty
        self._op = None
        self._closed = False

    def __enter__(self):
        if self._op is not None:
            raise RuntimeError("a stdin stream is entered once")
        self._op = self._sb._native.stdin_open(self._sel[0], self._sel[1],
                                               self._pty)
        return self

    def __exit__(self, et, ev, tb):
        if self._op is None or self._closed:
            return False
        if et is None:
            self.close()
        else:
            self._closed = True
            self._op.close()
        return False

    def _need(self):
        if self._op is None:
            raise RuntimeError("use `with ... as stream:`")
        if self._closed:
            raise RuntimeError("the stdin stream is closed")
        return self._op

    def write(self, data) -> None:
        op = self._need()
        view = memoryview(data_bytes(data))
        for i in range(0, max(len(view), 1), STDIN_CHUNK):
            part = view[i:i + STDIN_CHUNK]
            while True:
                r = op.stdin_send(part)
                if r is True:
                    break
                if r is None:
                    op.wait_end()
                    raise Unavailable("the stdin stream ended")
                op.wait_data()

    def close(self) -> None:
        op = self._need()
        self._closed = True
        op.stdin_end()
        op.wait_end()


class SyncProcess:
    """A streamed process of a blocking Sandbox: ``with`` starts it and ends
    it (SIGTERM, the grace period, SIGKILL) if it still runs on leaving;
    iterate it for ``OutputChunk``s; ``wait()`` for the ExecResult."""

    __slots__ = ("_sb", "_spec", "_op", "_entered", "_exited", "_result",
                 "_error", "_pty", "__weakref__")

    def __init__(self, sb: "Sandbox", spec: tuple, pty: bool = False):
        self._sb = sb
        self._spec = spec
        self._op = None
        self._entered = False
        self._exited = False
        self._result = None
        self._error = None
        self._pty = pty

    def __repr__(self):
        state = ("not started" if self._op is None else
                 "closed" if self._exited else
                 "ended" if self._op.ended else "running")
        return f"<conch.SyncProcess pid={self.pid} {state}>"

    @property
    def pid(self) -> Optional[int]:
        return self._op.pid if self._op is not None and self._op.pid else None

    def __enter__(self) -> "SyncProcess":
        if self._entered:
            raise RuntimeError("a Process is entered once")
        self._entered = True
        self._op = self._sb._begin(self._spec)
        try:
            self._op.wait_start()
        except BaseException:
            self._op.close()
            self._exited = True
            raise
        return self

    def __exit__(self, et, ev, tb) -> bool:
        if self._op is None or self._exited:
            return False
        self._exited = True
        rv = self._op.close()
        if rv != 0 and et is None:
            raise Unavailable(
                f"the end of process {self.pid} could not be confirmed (the "
                f"sandbox did not answer while it was being ended)")
        return False

    def _need_op(self):
        if self._op is None:
            raise RuntimeError(
                "the Process was not started: use `with sb.stream(...) as "
                "proc:`")
        return self._op

    def __iter__(self) -> "SyncProcess":
        self._need_op()
        return self

    def __next__(self) -> OutputChunk:
        op = self._need_op()
        while True:
            c = op.pop()
            if c is None:
                op.wait_data()
                continue
            if c is END:
                raise StopIteration
            return c

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        if self._error is not None:
            raise self._error
        op = self._need_op()
        try:
            res = op.wait_end()
        except Exception as e:
            self._error = e
            raise
        self._result = res
        return res

    def kill(self, signal: int = _signal.SIGKILL) -> None:
        self._sb._unary("kill", self._need_pid(), None, b"",
                        signal_number(signal), 0, False)

    def send_stdin(self, data) -> None:
        self._sb._unary("stdin", self._need_pid(), None, data_bytes(data), 0,
                        0, self._pty)

    def close_stdin(self) -> None:
        self._sb._unary("close_stdin", self._need_pid(), None, b"", 0, 0,
                        False)

    def resize(self, cols: int, rows: int) -> None:
        c, r = pty_size(cols, rows)
        self._sb._unary("resize", self._need_pid(), None, b"", c, r, False)

    def stdin_stream(self) -> SyncStdinStream:
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        return SyncStdinStream(self._sb, self._need_pid(), None, self._pty)

    def _need_pid(self) -> int:
        pid = self.pid
        if pid is None:
            raise RuntimeError("the Process has not started")
        return pid

    def __del__(self):
        op = self._op
        if op is not None and not self._exited and not op.closing:
            try:
                op.close_nowait()
            except Exception:
                pass


class SyncProcessHandle:
    __slots__ = ("_sb", "pid", "tag")

    def __init__(self, sb: "Sandbox", pid: int, tag: Optional[str]):
        self._sb = sb
        self.pid = pid
        self.tag = tag

    def __repr__(self):
        return f"<conch.SyncProcessHandle pid={self.pid}>"

    def kill(self, signal: int = _signal.SIGKILL) -> None:
        self._sb.commands.kill(self.pid, signal)

    def send_stdin(self, data) -> None:
        self._sb.commands.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        self._sb.commands.close_stdin(self.pid)

    def connect(self, *, detached: bool = False) -> SyncProcess:
        return self._sb.commands.connect(self.pid, detached=detached)

    def wait(self) -> ExecResult:
        with self.connect(detached=True) as proc:
            return proc.wait()


class Commands:
    """``sb.commands`` of a blocking Sandbox."""

    def __init__(self, sb: "Sandbox"):
        self._sb = sb

    def run(self, command: Command, args: Optional[Sequence[str]] = None, *,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            user: Optional[str] = None, tag: Optional[str] = None,
            timeout: Optional[float] = None,
            request_timeout: Optional[float] = None,
            tree: TreeMode = None) -> ExecResult:
        """As ``AsyncCommands.run``.  Ctrl-C (any exception raised by a
        signal handler) ends the process, then propagates."""
        spec = self._sb._spec("run", command, args, env, cwd, user, tag,
                              False, 0, 0, timeout, request_timeout, tree)
        op = self._sb._native.process(*spec)
        try:
            return op.wait_end()
        except BaseException:
            op.close()
            raise

    def stream(self, command: Command, args: Optional[Sequence[str]] = None,
               *, env: Optional[Mapping[str, str]] = None,
               cwd: Optional[str] = None, user: Optional[str] = None,
               tag: Optional[str] = None, timeout: Optional[float] = None,
               request_timeout: Optional[float] = None,
               stdin: bool = False, tree: TreeMode = None) -> SyncProcess:
        self._sb._check_cap(Capability.STREAMING, "streaming")
        return SyncProcess(self._sb, ("stream", command, args, env, cwd, user,
                                      tag, stdin, 0, 0, timeout,
                                      request_timeout, tree))

    def start(self, command: Command, args: Optional[Sequence[str]] = None,
              *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, user: Optional[str] = None,
              tag: Optional[str] = None, timeout: Optional[float] = None,
              stdin: bool = False,
              tree: TreeMode = None) -> SyncProcessHandle:
        spec = self._sb._spec("start", command, args, env, cwd, user, tag,
                              stdin, 0, 0, 0 if timeout is None else timeout,
                              None, tree)
        op = self._sb._native.process(*spec)
        pid = op.wait_start()
        return SyncProcessHandle(self._sb, pid, tag)

    def list(self) -> List[ProcessInfo]:
        return self._sb._unary("list", 0, None, b"", 0, 0, False)

    def kill(self, which: Selector, signal: int = _signal.SIGKILL) -> None:
        pid, tag = selector(which)
        self._sb._unary("kill", pid, tag, b"", signal_number(signal), 0,
                        False)

    def connect(self, which: Selector, *,
                detached: bool = False) -> SyncProcess:
        self._sb._check_cap(Capability.STREAMING, "streaming")
        pid, tag = selector(which)
        return SyncProcess(self._sb, ("connect", pid, tag, detached))

    def send_stdin(self, which: Selector, data) -> None:
        pid, tag = selector(which)
        self._sb._unary("stdin", pid, tag, data_bytes(data), 0, 0, False)

    def close_stdin(self, which: Selector) -> None:
        pid, tag = selector(which)
        self._sb._unary("close_stdin", pid, tag, b"", 0, 0, False)

    def stdin_stream(self, which: Selector) -> SyncStdinStream:
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        pid, tag = selector(which)
        return SyncStdinStream(self._sb, pid, tag, False)


class Pty:
    """``sb.pty`` of a blocking Sandbox."""

    def __init__(self, sb: "Sandbox"):
        self._sb = sb

    def open(self, command: Optional[Command] = None,
             args: Optional[Sequence[str]] = None, *, cols: int = 80,
             rows: int = 24, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, user: Optional[str] = None,
             tag: Optional[str] = None,
             timeout: Optional[float] = None) -> SyncProcess:
        self._sb._check_cap(Capability.STREAMING | Capability.PTY, "PTYs")
        c, r = pty_size(cols, rows)
        return SyncProcess(self._sb, ("pty", command, args, env, cwd, user,
                                      tag, False, c, r, timeout, None),
                           pty=True)

    def send(self, which: Selector, data) -> None:
        pid, tag = selector(which)
        self._sb._unary("stdin", pid, tag, data_bytes(data), 0, 0, True)

    def input_stream(self, which: Selector) -> SyncStdinStream:
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        pid, tag = selector(which)
        return SyncStdinStream(self._sb, pid, tag, True)

    def resize(self, which: Selector, cols: int, rows: int) -> None:
        pid, tag = selector(which)
        c, r = pty_size(cols, rows)
        self._sb._unary("resize", pid, tag, b"", c, r, False)


class Sandbox:
    """The blocking sandbox: ``AsyncSandbox``'s surface without ``await``
    (``with`` instead of ``async with``).  The same options."""

    def __init__(self, url: Optional[str] = None, *,
                 access_token: Optional[str] = None,
                 user: Optional[str] = None, timeout: Optional[float] = 60,
                 request_timeout: Optional[float] = None,
                 kill_grace: Optional[float] = None,
                 keepalive: Optional[float] = None,
                 headers: Optional[Mapping[str, str]] = None,
                 capabilities: Capability = Capability.ALL,
                 protocol: str = "connect", http_version: str = "auto",
                 codec: str = "proto", cacert: Optional[str] = None,
                 auto_start: bool = True, serve_exe: Optional[str] = None,
                 shell: Optional[Sequence[str]] = None,
                 tree: TreeMode = None,
                 service_config: Union[str, Mapping, None] = None):
        args = native_args(url, access_token, user, headers, timeout,
                           request_timeout, kill_grace, keepalive,
                           capabilities, protocol, http_version, codec, cacert,
                           auto_start, serve_exe, tree, service_config)
        self.url = url
        self._caps = Capability(capabilities)
        self._native = _conch.Sandbox(**args)
        self._closed = False
        self._shell = None if shell is None else (shell[0], tuple(shell[1:]))
        self._shell_lock = threading.Lock()
        self.commands = Commands(self)
        self.pty = Pty(self)
        self.files = Files(self)

    def __repr__(self):
        return f"<conch.Sandbox {self.url or 'local'}>"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, et, ev, tb) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Ends every process the sandbox still holds (all at once) and
        frees it.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._native.free()

    def __del__(self):
        if not getattr(self, "_closed", True) and self._native.open_count:
            warnings.warn(f"{self!r} was not closed with processes open",
                          ResourceWarning, source=self)

    @property
    def capabilities(self) -> Capability:
        return self._caps

    def _check_cap(self, need: Capability, what: str) -> None:
        if (self._caps & need) != need:
            raise CapabilityNotSupported(
                f"the sandbox does not support {what} (capabilities="
                f"{self._caps!r})")

    def stream(self, command: Command, args: Optional[Sequence[str]] = None,
               **kw) -> SyncProcess:
        return self.commands.stream(command, args, **kw)

    def _shell_of(self):
        if self._shell is None:
            with self._shell_lock:
                if self._shell is None:
                    op = self._native.process("run", PROBE[0], PROBE[1], None,
                                              "/", None, None, False, 0, 0, 0,
                                              0)
                    res = op.wait_end()
                    self._shell = BASH if res.exit_code == 0 else SH
        return self._shell

    def _spec(self, kind, command, args, env, cwd, user, tag, stdin, cols,
              rows, timeout, request_timeout, tree=None) -> tuple:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        if kind == "pty" and command is None:
            cmd, cargs = None, args
        else:
            shell = self._shell_of() if needs_shell(command, args) else None
            cmd, cargs = argv(command, args, shell)
        return (kind, cmd, cargs, env_map(env), cwd, user, tag, bool(stdin),
                cols, rows, ms(timeout, none_is=0),
                ms(request_timeout, none_is=0), tree_mode(tree))

    def _begin(self, spec):
        if spec[0] == "connect":
            _, pid, tag, detached = spec
            return self._native.connect(pid, tag, detached)
        return self._native.process(*self._spec(*spec))

    def _unary(self, what, pid, tag, data, a, b, pty):
        op = self._native.unary(what, pid, tag, data, a, b, pty)
        return op.wait_end()
