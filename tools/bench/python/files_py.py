"""One transfer with the Python package's sb.files, for files.sh:
files_py.py sync|async up|down URL SRC DST (up: the local SRC to the
sandbox's DST, from the open file; down: the sandbox's SRC to the local
DST, as a stream written piece by piece)."""

import asyncio
import sys

import conch


def sync(direction, url, src, dst):
    with conch.Sandbox(url) as sb:
        if direction == "up":
            with open(src, "rb") as f:
                sb.files.write(dst, f)
        else:
            with open(dst, "wb") as out, sb.files.read(src, "stream") as s:
                for piece in s:
                    out.write(piece)


async def asyn(direction, url, src, dst):
    async with conch.AsyncSandbox(url) as sb:
        if direction == "up":
            with open(src, "rb") as f:
                await sb.files.write(dst, f)
        else:
            s = await sb.files.read(src, "stream")
            with open(dst, "wb") as out:
                async with s:
                    async for piece in s:
                        out.write(piece)


def main():
    mode, direction, url, src, dst = sys.argv[1:6]
    if mode == "sync":
        sync(direction, url, src, dst)
    else:
        asyncio.run(asyn(direction, url, src, dst))


if __name__ == "__main__":
    main()
