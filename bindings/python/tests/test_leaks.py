"""References and memory: 10,000 calls (unary List, run, stream, errors)
leave no Python objects behind (gc), no Python memory (tracemalloc) and no
C memory (RSS) beyond a small allowance."""

from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc

import conch

CALLS = 10000
# Under ASan freed memory sits in its quarantine: RSS says nothing there
# (the C side is checked by ASan itself, and by the RSS in a plain build).
SANITIZED = bool(os.environ.get("CONCH_PY_SANITIZED"))


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def workload(sb, n):
    for i in range(n):
        k = i % 20
        if k < 14:
            await sb.commands.list()
        elif k < 17:
            await sb.commands.run(["/bin/true"])
        elif k < 19:
            async with sb.stream(["/bin/echo", "x"]) as p:
                async for _ in p:
                    pass
                await p.wait()
        else:
            try:
                await sb.commands.kill(4000000)
            except conch.NotFound:
                pass


def test_no_leaks(serve):
    async def main():
        async with conch.AsyncSandbox(serve.url) as sb:
            await workload(sb, 400)  # warm up caches, pools, connections
            gc.collect()
            objs0, rss0 = len(gc.get_objects()), rss_kib()
            tracemalloc.start()
            snap0 = tracemalloc.take_snapshot()
            await workload(sb, CALLS)
            gc.collect()
            snap1 = tracemalloc.take_snapshot()
            tracemalloc.stop()
            objs1, rss1 = len(gc.get_objects()), rss_kib()
            return objs0, objs1, rss0, rss1, snap0, snap1

    objs0, objs1, rss0, rss1, snap0, snap1 = asyncio.run(main())
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename")
                if s.size_diff > 0)
    print(f"\n{CALLS} calls: gc objects {objs0} -> {objs1}, tracemalloc "
          f"+{grown} B, RSS {rss0} -> {rss1} KiB")
    assert objs1 - objs0 < 1000  # one per call would be 10,000
    assert grown < 64 * 1024, [str(s) for s in
                               snap1.compare_to(snap0, "lineno")[:10]]
    assert SANITIZED or rss1 - rss0 < 8 * 1024


def test_no_leaks_blocking(serve):
    with conch.Sandbox(serve.url) as sb:
        for _ in range(200):
            sb.commands.list()
        gc.collect()
        objs0, rss0 = len(gc.get_objects()), rss_kib()
        for i in range(CALLS // 2):
            if i % 10 == 0:
                sb.commands.run(["/bin/true"])
            else:
                sb.commands.list()
        gc.collect()
        objs1, rss1 = len(gc.get_objects()), rss_kib()
    print(f"\nblocking, {CALLS // 2} calls: gc objects {objs0} -> {objs1}, "
          f"RSS {rss0} -> {rss1} KiB")
    assert objs1 - objs0 < 1000  # one per call would be 5,000
    assert SANITIZED or rss1 - rss0 < 8 * 1024


def test_reference_counts(serve):
    """What the package hands out is referenced by the caller alone, and
    the native sandbox's count comes back once the calls are done."""
    import sys

    async def main():
        async with conch.AsyncSandbox(serve.url) as sb:
            await sb.commands.list()
            native = sb._native
            before = sys.getrefcount(native)
            r = await sb.commands.run(["/bin/echo", "x"])
            # Ours, and the future that delivered it (alive for this step
            # of the task, in the loop's wakeup handle).
            assert sys.getrefcount(r) <= 3
            await asyncio.sleep(0)
            assert sys.getrefcount(r) == 2
            assert sys.getrefcount(r.stdout_bytes) == 3  # r, the temporary

            def count(cls):
                return sum(1 for o in gc.get_objects() if type(o) is cls)

            gc.collect()
            n = {c: count(c) for c in (conch.ExecResult, conch.OutputChunk,
                                       conch.Process, conch._conch.Op)}
            for _ in range(300):
                async with sb.stream(["/bin/echo", "y"]) as p:
                    chunks = [c async for c in p]
                    await p.wait()
                try:
                    await sb.commands.kill(4000000)
                except conch.NotFound:
                    pass
            del p, chunks
            gc.collect()
            for c, k in n.items():
                assert count(c) <= k + 1, c
            for _ in range(200):
                await sb.commands.list()
                await sb.commands.run(["/bin/true"])
            gc.collect()
            assert sys.getrefcount(native) == before
            assert native.open_count == 0

    asyncio.run(main())
