"""One read of a file through sb.files (blocking or asyncio), streamed and
dropped piece by piece, counting what count_copies.so sees during it (run
under LD_PRELOAD by read_copies.sh): prints
"pieces bytes allocs alloc_bytes copies copy_bytes"."""

import asyncio
import ctypes
import sys

import conch

mode, url, path = sys.argv[1:4]
lib = ctypes.CDLL(None)
out = (ctypes.c_uint64 * 4)()


def sync():
    with conch.Sandbox(url) as sb:
        sb.files.read(path + ".warm", "bytes")
        lib.cc_reset()
        pieces = total = 0
        with sb.files.read(path, format="stream") as s:
            for b in s:
                pieces += 1
                total += len(b)
        lib.cc_get(out)
    return pieces, total


async def aio():
    async with conch.AsyncSandbox(url) as sb:
        await sb.files.read(path + ".warm", "bytes")
        lib.cc_reset()
        pieces = total = 0
        s = await sb.files.read(path, format="stream")
        async with s:
            async for b in s:
                pieces += 1
                total += len(b)
        lib.cc_get(out)
    return pieces, total


pieces, total = sync() if mode == "sync" else asyncio.run(aio())
print(pieces, total, *out)
