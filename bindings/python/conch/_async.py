"""The asyncio sandbox: libconch driven on the running loop."""

from __future__ import annotations

import asyncio
import signal as _signal
import warnings
from typing import List, Mapping, Optional, Sequence, Union

from . import _conch
from ._common import (END, PROBE, BASH, SH, Command, Selector, TreeMode,
                      argv, data_bytes, env_map, ms, native_args,
                      needs_shell, pty_size, selector, signal_number,
                      tree_mode)
from ._files import AsyncFiles
from ._errors import CapabilityNotSupported, Unavailable
from ._types import Capability, ExecResult, OutputChunk, ProcessInfo

__all__ = ["AsyncSandbox", "AsyncCommands", "AsyncPty", "Process",
           "ProcessHandle", "StdinStream"]

#: The largest piece of one StreamInput message.
STDIN_CHUNK = 64 * 1024


async def _teardown(op) -> int:
    """Closes |op| (SIGTERM, the grace period, SIGKILL: libconch's close)
    and waits for it to finish, whatever cancellation comes meanwhile.
    Returns the close's result; raises CancelledError afterwards if the
    task was cancelled during it."""
    fut = op.close_future()
    cancelled = False
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError()
    return fut.result()


class Process:
    """A streamed process (``stream()``, ``connect()``, ``pty.open()``).

    Not awaitable: enter it with ``async with``, which starts it (and
    returns once its pid is known).  Iterate it for ``OutputChunk``s;
    ``await proc.wait()`` for the ``ExecResult`` (``streamed=True``).  On
    leaving the block the process is ended if it still runs — after a
    completed iteration, a ``break``, an exception or a cancellation of the
    task alike (the teardown is shielded from the cancellation: SIGTERM,
    the grace period, SIGKILL) — so no remote process outlives the block.
    """

    __slots__ = ("_sb", "_spec", "_op", "_entered", "_exited", "_result",
                 "_error", "_pty", "__weakref__")

    def __init__(self, sb: "AsyncSandbox", spec: tuple, pty: bool = False):
        self._sb = sb
        self._spec = spec
        self._op = None
        self._entered = False
        self._exited = False
        self._result = None
        self._error = None
        self._pty = pty

    def __await__(self):
        raise TypeError(
            "a Process is not awaitable: use `async with sb.stream(...) as "
            "proc:` (it starts on entering and ends on leaving)")

    def __repr__(self):
        state = ("not started" if self._op is None else
                 "closed" if self._exited else
                 "ended" if self._op.ended else "running")
        return f"<conch.Process pid={self.pid} {state}>"

    @property
    def pid(self) -> Optional[int]:
        """The process id, once started."""
        return self._op.pid if self._op is not None and self._op.pid else None

    async def __aenter__(self) -> "Process":
        if self._entered:
            raise RuntimeError("a Process is entered once")
        self._entered = True
        self._op = await self._sb._begin(self._spec)
        try:
            await self._op.start_future()
        except BaseException:
            await _teardown(self._op)
            self._exited = True
            raise
        return self

    async def __aexit__(self, et, ev, tb) -> bool:
        if self._op is None or self._exited:
            return False
        self._exited = True
        rv = await _teardown(self._op)
        if rv != 0 and et is None:
            raise Unavailable(
                f"the end of process {self.pid} could not be confirmed (the "
                f"sandbox did not answer while it was being ended)")
        return False

    def _need_op(self):
        if self._op is None:
            raise RuntimeError(
                "the Process was not started: use `async with sb.stream(...) "
                "as proc:`")
        return self._op

    def __aiter__(self) -> "Process":
        self._need_op()
        return self

    async def __anext__(self) -> OutputChunk:
        op = self._need_op()
        while True:
            c = op.pop()
            if c is None:
                await op.data_future()
                continue
            if c is END:
                raise StopAsyncIteration
            return c

    async def wait(self) -> ExecResult:
        """Waits for the end, discarding output not read yet, and returns
        the ExecResult (``streamed=True``, empty buffers).  Idempotent: a
        second call returns the same result (or raises the same error)."""
        if self._result is not None:
            return self._result
        if self._error is not None:
            raise self._error
        op = self._need_op()
        try:
            res = await op.end_future()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self._error = e
            raise
        self._result = res
        return res

    async def kill(self, signal: int = _signal.SIGKILL) -> None:
        """Sends SIGKILL (or SIGTERM) to the process."""
        await self._sb._unary("kill", self._need_pid(), None, b"",
                              signal_number(signal), 0, False)

    async def send_stdin(self, data) -> None:
        """Writes to the process's stdin (its terminal, for a PTY)."""
        await self._sb._unary("stdin", self._need_pid(), None,
                              data_bytes(data), 0, 0, self._pty)

    async def close_stdin(self) -> None:
        """Closes the process's stdin."""
        await self._sb._unary("close_stdin", self._need_pid(), None, b"",
                              0, 0, False)

    def stdin_stream(self) -> StdinStream:
        """An ordered stream to the process's stdin (its terminal, for a
        PTY): ``async with proc.stdin_stream() as w``."""
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        return StdinStream(self._sb, self._need_pid(), None, self._pty)

    async def resize(self, cols: int, rows: int) -> None:
        """Resizes the process's terminal (PTYs)."""
        c, r = pty_size(cols, rows)
        await self._sb._unary("resize", self._need_pid(), None, b"", c, r,
                              False)

    def _need_pid(self) -> int:
        pid = self.pid
        if pid is None:
            raise RuntimeError("the Process has not started")
        return pid

    def __del__(self):
        op = self._op
        if op is not None and not self._exited and not op.closing:
            # Forgotten without leaving its block: end it anyway.
            loop = self._sb._loop
            try:
                if loop is not None and not loop.is_closed():
                    loop.call_soon_threadsafe(op.close_nowait)
            except Exception:
                pass


class StdinStream:
    """An ordered stdin stream (envd's StreamInput: one call, data in
    order), for processes started with ``stdin=True`` (or a PTY's
    terminal).  ``async with proc.stdin_stream() as w: await w.write(b)``;
    ``write()`` waits while the send buffer is full (back-pressure);
    leaving the block ends the stream and waits for the server's answer
    (an error raises), or cancels it when the block raised."""

    __slots__ = ("_sb", "_sel", "_pty", "_op", "_closed")

    def __init__(self, sb: "AsyncSandbox", pid: int, tag: Optional[str],
                 pty: bool):
        self._sb = sb
        self._sel = (pid, tag)
        self._pty = pty
        self._op = None
        self._closed = False

    async def __aenter__(self) -> "StdinStream":
        if self._op is not None:
            raise RuntimeError("a StdinStream is entered once")
        self._op = self._sb._native.stdin_open(self._sel[0], self._sel[1],
                                               self._pty)
        return self

    async def __aexit__(self, et, ev, tb) -> bool:
        if self._op is None or self._closed:
            return False
        if et is None:
            await self.close()
        else:
            self._closed = True
            await _teardown(self._op)
        return False

    def _need(self):
        if self._op is None:
            raise RuntimeError("use `async with ... as stream:`")
        if self._closed:
            raise RuntimeError("the stdin stream is closed")
        return self._op

    async def write(self, data) -> None:
        """Queues |data| after what was written before."""
        op = self._need()
        view = memoryview(data_bytes(data))
        for i in range(0, max(len(view), 1), STDIN_CHUNK):
            part = view[i:i + STDIN_CHUNK]
            while True:
                r = op.stdin_send(part)
                if r is True:
                    break
                if r is None:  # ended: the end says why
                    await op.result_future()
                    raise Unavailable("the stdin stream ended")
                await op.data_future()

    async def close(self) -> None:
        """Ends the stream once everything went out; raises if the server
        refused it (e.g. the process has no stdin, or is gone)."""
        op = self._need()
        self._closed = True
        op.stdin_end()
        await op.result_future()


class ProcessHandle:
    """A process started in the background (``start()``)."""

    __slots__ = ("_sb", "pid", "tag")

    def __init__(self, sb: "AsyncSandbox", pid: int, tag: Optional[str]):
        self._sb = sb
        self.pid = pid
        self.tag = tag

    def __repr__(self):
        return f"<conch.ProcessHandle pid={self.pid}>"

    async def kill(self, signal: int = _signal.SIGKILL) -> None:
        await self._sb.commands.kill(self.pid, signal)

    async def send_stdin(self, data) -> None:
        await self._sb.commands.send_stdin(self.pid, data)

    async def close_stdin(self) -> None:
        await self._sb.commands.close_stdin(self.pid)

    def connect(self, *, detached: bool = False) -> Process:
        """Re-attaches: a Process (enter it with ``async with``) whose
        output starts with what the process writes from now on.  Leaving
        its block ends the process unless ``detached``."""
        return self._sb.commands.connect(self.pid, detached=detached)

    async def wait(self) -> ExecResult:
        """Waits for the process's end (its output meanwhile is not kept)
        and returns the ExecResult (``streamed=True``)."""
        async with self.connect(detached=True) as proc:
            return await proc.wait()


class AsyncCommands:
    """``sb.commands``: run, stream, start, list, kill, connect, stdin."""

    def __init__(self, sb: "AsyncSandbox"):
        self._sb = sb

    async def run(self, command: Command, args: Optional[Sequence[str]] = None,
                  *, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, user: Optional[str] = None,
                  tag: Optional[str] = None, timeout: Optional[float] = None,
                  request_timeout: Optional[float] = None,
                  tree: TreeMode = None) -> ExecResult:
        """Runs a command to its end and returns its ExecResult (output
        collected, ``streamed=False``).  A non-zero exit is a result; an RPC
        failure raises (``DeadlineExceeded`` when it outlived ``timeout``,
        seconds, default the sandbox's, 0 none; the error's ``result`` has
        the output that arrived).  Cancelling the task ends the process.
        ``tree`` (None: the sandbox's; True, False, "auto"): whether the
        command starts under the tree leader, so that ending it ends its
        descendants on a server that signals the pid only (envd)."""
        spec = await self._sb._spec("run", command, args, env, cwd, user,
                                    tag, False, 0, 0, timeout,
                                    request_timeout, tree)
        op = self._sb._native.process(*spec)
        try:
            return await op.result_future()
        except asyncio.CancelledError:
            await _teardown(op)
            raise

    def stream(self, command: Command, args: Optional[Sequence[str]] = None,
               *, env: Optional[Mapping[str, str]] = None,
               cwd: Optional[str] = None, user: Optional[str] = None,
               tag: Optional[str] = None, timeout: Optional[float] = None,
               request_timeout: Optional[float] = None,
               stdin: bool = False, tree: TreeMode = None) -> Process:
        """A Process streaming the command's output (ADR-0019): not
        awaitable; ``async with`` starts it and guarantees its end.
        Raises ``CapabilityNotSupported`` at once when the sandbox cannot
        stream."""
        self._sb._check_cap(Capability.STREAMING, "streaming")
        return Process(self._sb, ("stream", command, args, env, cwd, user,
                                  tag, stdin, 0, 0, timeout,
                                  request_timeout, tree))

    async def start(self, command: Command,
                    args: Optional[Sequence[str]] = None, *,
                    env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    tag: Optional[str] = None,
                    timeout: Optional[float] = None,
                    stdin: bool = False,
                    tree: TreeMode = None) -> ProcessHandle:
        """Starts a process in the background and returns once its pid is
        known.  It runs on (by default with no time limit; ``timeout``
        seconds sets one)."""
        spec = await self._sb._spec("start", command, args, env, cwd, user,
                                    tag, stdin, 0, 0,
                                    0 if timeout is None else timeout, None,
                                    tree)
        op = self._sb._native.process(*spec)
        pid = await op.start_future()
        return ProcessHandle(self._sb, pid, tag)

    async def list(self) -> List[ProcessInfo]:
        """The running processes."""
        return await self._sb._unary("list", 0, None, b"", 0, 0, False)

    async def kill(self, which: Selector,
                   signal: int = _signal.SIGKILL) -> None:
        """Sends SIGKILL (or SIGTERM) to a process by pid or tag."""
        pid, tag = selector(which)
        await self._sb._unary("kill", pid, tag, b"", signal_number(signal), 0,
                              False)

    def connect(self, which: Selector, *, detached: bool = False) -> Process:
        """Re-attaches to a running process by pid or tag: a Process (enter
        it with ``async with``).  Leaving the block ends the process unless
        ``detached``."""
        self._sb._check_cap(Capability.STREAMING, "streaming")
        pid, tag = selector(which)
        return Process(self._sb, ("connect", pid, tag, detached))

    async def send_stdin(self, which: Selector, data) -> None:
        """Writes to a process's stdin (it was started with stdin=True)."""
        pid, tag = selector(which)
        await self._sb._unary("stdin", pid, tag, data_bytes(data), 0, 0,
                              False)

    async def close_stdin(self, which: Selector) -> None:
        """Closes a process's stdin."""
        pid, tag = selector(which)
        await self._sb._unary("close_stdin", pid, tag, b"", 0, 0, False)

    def stdin_stream(self, which: Selector) -> StdinStream:
        """An ordered stream to a process's stdin, by pid or tag: ``async
        with sb.commands.stdin_stream(pid) as w``."""
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        pid, tag = selector(which)
        return StdinStream(self._sb, pid, tag, False)


class AsyncPty:
    """``sb.pty``: pseudo-terminal processes."""

    def __init__(self, sb: "AsyncSandbox"):
        self._sb = sb

    def open(self, command: Optional[Command] = None,
             args: Optional[Sequence[str]] = None, *, cols: int = 80,
             rows: int = 24, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, user: Optional[str] = None,
             tag: Optional[str] = None,
             timeout: Optional[float] = None) -> Process:
        """A Process on a terminal of ``cols`` x ``rows`` (``bash -i -l``
        without a command); its output comes as ``"pty"`` chunks, its
        input through ``send_stdin()``.  Enter it with ``async with``."""
        self._sb._check_cap(Capability.STREAMING | Capability.PTY, "PTYs")
        c, r = pty_size(cols, rows)
        return Process(self._sb, ("pty", command, args, env, cwd, user, tag,
                                  False, c, r, timeout, None), pty=True)

    async def send(self, which: Selector, data) -> None:
        """Writes to a PTY process's terminal."""
        pid, tag = selector(which)
        await self._sb._unary("stdin", pid, tag, data_bytes(data), 0, 0, True)

    def input_stream(self, which: Selector) -> StdinStream:
        """An ordered stream of keystrokes to a PTY process's terminal."""
        self._sb._check_cap(Capability.STDIN_STREAM, "stdin streams")
        pid, tag = selector(which)
        return StdinStream(self._sb, pid, tag, True)

    async def resize(self, which: Selector, cols: int, rows: int) -> None:
        """Resizes a PTY process's terminal."""
        pid, tag = selector(which)
        c, r = pty_size(cols, rows)
        await self._sb._unary("resize", pid, tag, b"", c, r, False)


class AsyncSandbox:
    """A sandbox on the running asyncio loop (uvloop too).

    ``url`` None is the local server, as the CLI finds it: ``conch serve`` on
    the private per-user socket, started there when nothing answers
    (``auto_start``; the executable is ``serve_exe``, else
    ``$CONCH_SERVE_EXE``, else ``conch`` in PATH).  Else ``unix:PATH``,
    ``http://HOST:PORT`` or ``https://...`` (an envd).  Times are seconds:
    ``timeout`` the default lifetime of run/stream/pty processes (0: none),
    ``request_timeout`` what a unary call or a start may take,
    ``kill_grace`` the time between SIGTERM and SIGKILL when a process is
    ended, ``keepalive`` the liveness interval (a dead or frozen server
    ends open streams with ``Unavailable`` within 3 x keepalive + 5 s;
    0 or False: off).  ``tree`` (None: ``$CONCH_TREE``, else "auto"; True,
    False, "auto") is libconch's process-tree leader: with it, ending a
    process ends its descendants on a server that signals the pid only
    (envd); a command's own ``tree`` overrides it.  ``service_config``, a
    gRPC service config (a dict or its JSON), gives the sandbox's calls
    retry policies (libconch's conch/retry.h); a bad one raises
    ``ValueError`` when the sandbox opens.

    An async context manager; leaving it (or ``await close()``) ends every
    process it still holds.
    """

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
        self._args = native_args(url, access_token, user, headers, timeout,
                                 request_timeout, kill_grace, keepalive,
                                 capabilities, protocol, http_version, codec,
                                 cacert, auto_start, serve_exe, tree,
                                 service_config)
        self.url = url
        self._caps = Capability(capabilities)
        self._native_sb = None
        self._loop = None
        self._closed = False
        self._shell = None if shell is None else (shell[0], tuple(shell[1:]))
        self._shell_probe = None
        self.commands = AsyncCommands(self)
        self.pty = AsyncPty(self)
        self.files = AsyncFiles(self)

    def __repr__(self):
        return f"<conch.AsyncSandbox {self.url or 'local'}>"

    # -- the native sandbox, bound to the running loop --

    @property
    def _native(self):
        sb = self._native_sb
        if sb is not None and self._loop is asyncio.get_running_loop():
            return sb
        return self._open()

    def _open(self):
        loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        if self._native_sb is not None:
            raise RuntimeError("an AsyncSandbox belongs to the loop it was "
                               "first used on")
        self._native_sb = _conch.Sandbox(loop=loop, **self._args)
        self._loop = loop
        return self._native_sb

    async def __aenter__(self) -> "AsyncSandbox":
        self._native
        return self

    async def __aexit__(self, et, ev, tb) -> bool:
        await self.close()
        return False

    async def close(self) -> None:
        """Ends every process the sandbox still holds (all at once:
        SIGTERM, one grace period, SIGKILL) and frees it.  Shielded from
        cancellation like a Process's end; idempotent."""
        sb = self._native_sb
        if self._closed:
            return
        self._closed = True
        if sb is None:
            return
        cancelled = False
        ops = [op for op in sb.open_ops() if op.is_process]
        futs = [op.close_future() for op in ops]
        for f in futs:
            while not f.done():
                try:
                    await asyncio.shield(f)
                except asyncio.CancelledError:
                    cancelled = True
        sb.free()
        if cancelled:
            raise asyncio.CancelledError()

    def __del__(self):
        sb = getattr(self, "_native_sb", None)  # None: __init__ raised
        if sb is not None and not self._closed and sb.open_count:
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

    # -- commands --

    def stream(self, command: Command, args: Optional[Sequence[str]] = None,
               **kw) -> Process:
        """``sb.commands.stream()``."""
        return self.commands.stream(command, args, **kw)

    async def _shell_of(self):
        if self._shell is not None:
            return self._shell
        if self._shell_probe is None:
            self._shell_probe = asyncio.ensure_future(self._probe())
        return await asyncio.shield(self._shell_probe)

    async def _probe(self):
        op = self._native.process("run", PROBE[0], PROBE[1], None, "/", None,
                                  None, False, 0, 0, 0, 0)
        res = await op.result_future()
        self._shell = BASH if res.exit_code == 0 else SH
        return self._shell

    async def _spec(self, kind, command, args, env, cwd, user, tag, stdin,
                    cols, rows, timeout, request_timeout, tree=None) -> tuple:
        """The arguments of Sandbox.process() for a command."""
        if kind == "pty" and command is None:
            cmd, cargs = None, args
        else:
            shell = await self._shell_of() if needs_shell(command, args) \
                else None
            cmd, cargs = argv(command, args, shell)
        return (kind, cmd, cargs, env_map(env), cwd, user, tag, bool(stdin),
                cols, rows, ms(timeout, none_is=0),
                ms(request_timeout, none_is=0), tree_mode(tree))

    async def _begin(self, spec):
        if spec[0] == "connect":
            _, pid, tag, detached = spec
            return self._native.connect(pid, tag, detached)
        nspec = await self._spec(*spec)
        return self._native.process(*nspec)

    async def _unary(self, what, pid, tag, data, a, b, pty):
        op = self._native.unary(what, pid, tag, data, a, b, pty)
        return await op.result_future()
