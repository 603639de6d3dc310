"""A dead (SIGKILL) and a frozen (SIGSTOP) server under open streams: every
stream ends with conch.Unavailable within the keepalive bound (3 x
keepalive + 5 s), on asyncio and on uvloop, and nothing is left running
once the server is gone or has run on."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import uvloop

import conch
from conftest import mark, start_serve, wait_gone

KEEPALIVE = 1.0
BOUND = 3 * KEEPALIVE + 5
# How late past the bound an end may come on a loaded machine: the loop
# must also get to run.
SLACK = 10.0
N = 20


def run_on(kind, coro_fn):
    loop = uvloop.new_event_loop() if kind == "uvloop" \
        else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


async def open_streams(sb, m, n):
    procs = []
    for _ in range(n):
        p = sb.stream(["/bin/sh", "-c", f"echo up; exec sleep {m}", m],
                      timeout=30)
        await p.__aenter__()
        procs.append(p)
    return procs


async def read_until_end(p):
    try:
        async for c in p:
            pass
    except conch.Unavailable:
        return time.monotonic()
    raise AssertionError("the stream ended without unavailable")


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("how", ["dead", "frozen"])
def test_server_gone(kind, how):
    srv = start_serve()
    m = mark()

    async def main():
        async with conch.AsyncSandbox(srv.url, keepalive=KEEPALIVE,
                                      kill_grace=1.0) as sb:
            procs = await open_streams(sb, m, N)
            readers = [asyncio.ensure_future(read_until_end(p))
                       for p in procs]
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            os.kill(srv.pid, signal.SIGKILL if how == "dead"
                    else signal.SIGSTOP)
            ends = await asyncio.gather(*readers)
            late = max(ends) - t0
            assert late < BOUND + SLACK, f"ended {late:.1f} s after"
            # Leaving the blocks: the close of each is bounded too.
            t1 = time.monotonic()
            await asyncio.gather(*(p.__aexit__(conch.Unavailable, None, None)
                                   for p in procs))
            return late, time.monotonic() - t1

    try:
        late, closing = run_on(kind, main)
        print(f"\n{how} server, {kind}: {N} streams ended {late:.1f} s after "
              f"(bound {BOUND:.0f} s), closing took {closing:.1f} s")
    finally:
        if how == "frozen":
            os.kill(srv.pid, signal.SIGCONT)
        srv.stop()
    # The server's keeper (dead) or its shutdown (frozen, then stopped)
    # ends the processes.
    wait_gone(m, 60)
