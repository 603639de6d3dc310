"""1,000 concurrent stream()s from one loop, asyncio and uvloop: every
output arrives whole, nothing is left running; the figures (wall time, CPU
of this process) are printed, not asserted."""

from __future__ import annotations

import asyncio
import resource
import time

import pytest
import uvloop

import conch
from conftest import live_marked, mark, wait_gone

N = 1000


def run_on(kind, coro_fn):
    loop = uvloop.new_event_loop() if kind == "uvloop" \
        else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_thousand_streams(serve, kind):
    m = mark()

    async def one(sb, i):
        async with sb.stream(["/bin/sh", "-c", 'echo "$1"; echo e >&2', m,
                              str(i)], timeout=600,
                             request_timeout=600) as proc:
            out = b""
            async for c in proc:
                if c.stream == "stdout":
                    out += c.data
            res = await proc.wait()
        return i, out, res.exit_code

    async def main():
        async with conch.AsyncSandbox(serve.url, request_timeout=600) as sb:
            t0, c0 = time.monotonic(), cpu()
            got = await asyncio.gather(*(one(sb, i) for i in range(N)))
            return got, time.monotonic() - t0, cpu() - c0

    got, wall, used = run_on(kind, main)
    assert [(i, b"%d\n" % i, 0) for i in range(N)] == list(got)
    print(f"\n{N} concurrent streams on {kind}: {wall:.2f} s wall, "
          f"{used:.2f} s CPU here ({used / N * 1e6:.0f} us per stream)")
    wait_gone(m)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_thousand_open_at_once(serve, kind):
    """1,000 streams open at the same time (all running), then one sandbox
    close ends them all."""
    m = mark()

    async def main():
        async with conch.AsyncSandbox(serve.url, request_timeout=600,
                                      kill_grace=1.0) as sb:
            procs = [sb.stream(["/bin/sh", "-c", f"exec sleep {m}", m],
                               timeout=600, request_timeout=600)
                     for _ in range(N)]
            await asyncio.gather(*(p.__aenter__() for p in procs))
            assert len({p.pid for p in procs}) == N
            t0 = time.monotonic()
        return time.monotonic() - t0

    took = run_on(kind, main)
    assert live_marked(m) == []
    print(f"\n{N} open streams on {kind}: closed together in {took:.2f} s")
    wait_gone(m)
