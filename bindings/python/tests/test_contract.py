"""ADR-0019's contract cases, each checked in the OS process table (/proc),
not only in the server's List, on asyncio and on uvloop: however the block
of a stream ends, no process it started (nor any descendant) outlives it.

Each case puts a mark of its own on its processes' command lines and
records the time from leaving the block (or the moment the block was left
by an exception or a cancel) to the death of the last marked process, and
how many were still alive when the block had been left."""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop

import conch
from conftest import CONTRACT, live_marked, mark, wait_gone, wait_until

LOOPS = ["asyncio", "uvloop"]


def run_on(kind, coro_fn):
    loop = uvloop.new_event_loop() if kind == "uvloop" \
        else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def record(case, kind, t_exit, m):
    """The time from |t_exit| to the death of the last process marked |m|,
    and how many were alive when the block had been left (members of the
    tree other than its leader may take a few ms to die of the signal that
    ended the leader) and how many never died (WAIT s): the leaks."""
    alive = len(live_marked(m))
    try:
        t_dead = wait_gone(m)
        leaked = 0
    except AssertionError:
        t_dead, leaked = None, len(live_marked(m))
    CONTRACT.append((case, kind, None if t_dead is None else
                     max(0.0, (t_dead - t_exit) * 1000), alive, leaked))
    assert leaked == 0, f"{case}: {leaked} marked processes outlived it"


def sb_for(serve, **kw):
    return conch.AsyncSandbox(serve.url, kill_grace=1.0, **kw)


def sleeper(m, extra=""):
    # The shell and its sleep both carry the mark; `exec` is avoided so
    # that the shell stays the leader of the tree.
    return ["/bin/sh", "-c", f"{extra}echo up; sleep {m}; true", m]


@pytest.mark.parametrize("kind", LOOPS)
def test_break_early(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            async with sb.stream(sleeper(m)) as proc:
                async for chunk in proc:
                    assert chunk.data == b"up\n"
                    break
                assert len(live_marked(m)) >= 1
            return time.monotonic()

    record("break early", kind, run_on(kind, main), m)


@pytest.mark.parametrize("kind", LOOPS)
def test_raise_inside(serve, kind):
    m = mark()
    t = []

    async def main():
        async with sb_for(serve) as sb:
            with pytest.raises(ZeroDivisionError):
                async with sb.stream(sleeper(m)) as proc:
                    async for chunk in proc:
                        t.append(time.monotonic())
                        1 / 0
            assert proc.pid is not None

    run_on(kind, main)
    record("raise inside", kind, t[0], m)


@pytest.mark.parametrize("kind", LOOPS)
def test_task_cancel_inside(serve, kind):
    m = mark()
    t = []

    async def main():
        async with sb_for(serve) as sb:
            up = asyncio.Event()

            async def body():
                async with sb.stream(sleeper(m)) as proc:
                    async for chunk in proc:
                        up.set()
            task = asyncio.ensure_future(body())
            await up.wait()
            t.append(time.monotonic())
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()

    run_on(kind, main)
    record("task.cancel() inside", kind, t[0], m)


@pytest.mark.parametrize("kind", LOOPS)
def test_cancel_twice_during_teardown(serve, kind):
    """A second cancel while the block is being torn down (a TERM-ignoring
    tree in its grace period) does not cut the teardown short."""
    m = mark()
    t = []

    async def main():
        async with sb_for(serve) as sb:
            up = asyncio.Event()

            async def body():
                async with sb.stream(sleeper(m, 'trap "" TERM; ')) as proc:
                    async for chunk in proc:
                        up.set()
            task = asyncio.ensure_future(body())
            await up.wait()
            t.append(time.monotonic())
            task.cancel()
            await asyncio.sleep(0.2)  # now in the grace period
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The teardown ran its course: TERM, the whole grace, KILL.
            assert time.monotonic() - t[0] >= 0.9

    run_on(kind, main)
    record("cancel again in the grace (TERM ignored)", kind, t[0], m)


@pytest.mark.parametrize("kind", LOOPS)
def test_asyncio_timeout_inside(serve, kind):
    m = mark()
    t = []

    async def main():
        async with sb_for(serve) as sb:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    async with sb.stream(sleeper(m)) as proc:
                        async for chunk in proc:
                            pass
            t.append(time.monotonic())

    run_on(kind, main)
    # The time is taken after the timeout's block: the teardown had ended
    # the process by then, so what is measured is what is left over.
    record("asyncio.timeout inside", kind, t[0], m)


@pytest.mark.parametrize("kind", LOOPS)
def test_forgetting_async_with(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            proc = sb.stream(sleeper(m))
            with pytest.raises(RuntimeError, match="async with"):
                async for chunk in proc:
                    pass
            with pytest.raises(RuntimeError, match="async with"):
                await proc.wait()
            mine = [p for p in await sb.commands.list() if m in p.args]
            assert mine == []
            return time.monotonic()

    t = run_on(kind, main)
    assert live_marked(m) == []
    record("forgetting async with (nothing starts)", kind, t, m)


@pytest.mark.parametrize("kind", LOOPS)
def test_awaiting_stream(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            with pytest.raises(TypeError, match="not awaitable"):
                await sb.stream(sleeper(m))
            with pytest.raises(TypeError):
                await sb.commands.stream(sleeper(m))
            return time.monotonic()

    t = run_on(kind, main)
    assert live_marked(m) == []
    record("awaiting stream() (TypeError at once)", kind, t, m)


@pytest.mark.parametrize("kind", LOOPS)
def test_wait_twice_unread_output(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            async with sb.stream(["/bin/sh", "-c",
                                  "seq 1 200000; echo err >&2; exit 7",
                                  m]) as proc:
                first = await proc.wait()
                second = await proc.wait()
                assert first is second
                assert first.exit_code == 7 and first.streamed
                assert first.stdout_bytes == b"" and first.text == ""
                # Nothing more to read once waited.
                assert [c async for c in proc] == []
            return time.monotonic()

    record("wait() twice, output unread", kind, run_on(kind, main), m)


@pytest.mark.parametrize("kind", LOOPS)
def test_streamed_flag(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            r = await sb.commands.run(["/bin/sh", "-c", "echo out", m])
            assert r.streamed is False and r.stdout == "out\n"
            async with sb.stream(["/bin/sh", "-c", "echo out", m]) as proc:
                chunks = [c async for c in proc]
                res = await proc.wait()
            assert b"".join(c.data for c in chunks) == b"out\n"
            assert res.streamed is True and res.stdout == "" and \
                res.stdout_bytes == b""
            return time.monotonic()

    record("streamed (run False, stream True)", kind, run_on(kind, main), m)


@pytest.mark.parametrize("kind", LOOPS)
def test_capability_check(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve,
                          capabilities=conch.Capability.PTY) as sb:
            with pytest.raises(conch.CapabilityNotSupported):
                sb.stream(sleeper(m))  # stream() itself, not entering
            with pytest.raises(conch.CapabilityNotSupported):
                sb.commands.connect(1)
            # What needs no streaming still works.
            assert isinstance(await sb.commands.list(), list)
            return time.monotonic()

    t = run_on(kind, main)
    assert live_marked(m) == []
    record("capability check (before anything starts)", kind, t, m)


@pytest.mark.parametrize("kind", LOOPS)
def test_shell_with_background_children(serve, kind):
    m = mark()

    async def main():
        async with sb_for(serve) as sb:
            script = (f"sleep {m} & sleep {m} & (sleep {m} &); "
                      f"sh -c 'sleep {m}' & echo up; wait")
            async with sb.stream(script) as proc:  # a str: the shell
                async for chunk in proc:
                    assert chunk.data == b"up\n"
                    break
                # A child in the middle of its exec has an empty command
                # line for a moment: wait rather than count once.
                wait_until(lambda: len(live_marked(m)) >= 4,
                           what="4 marked processes")
            return time.monotonic()

    record("shell with background children", kind, run_on(kind, main), m)


@pytest.mark.parametrize("kind", LOOPS)
def test_sandbox_close_ends_what_it_holds(serve, kind):
    """Leaving the sandbox's block ends processes whose own block never
    ended (entered by hand), all at once."""
    m = mark()

    async def main():
        sb = sb_for(serve)
        async with sb:
            procs = [sb.stream(sleeper(m)) for _ in range(5)]
            for p in procs:
                await p.__aenter__()
            assert len(live_marked(m)) >= 5
        return time.monotonic()

    record("sandbox close with 5 open", kind, run_on(kind, main), m)


def test_blocking_break_and_raise(serve):
    m = mark()
    with conch.Sandbox(serve.url, kill_grace=1.0) as sb:
        with sb.stream(sleeper(m)) as proc:
            for chunk in proc:
                break
        t = time.monotonic()
        record("blocking: break early", "sync", t, m)
        m2 = mark()
        with pytest.raises(KeyError):
            with sb.stream(sleeper(m2)) as proc:
                for chunk in proc:
                    t = time.monotonic()
                    raise KeyError("x")
        record("blocking: raise inside", "sync", t, m2)
