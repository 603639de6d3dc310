"""conch: run processes in E2B sandboxes (envd) or on the local
``conch serve``, on libconch — natively, with asyncio.

    import asyncio, conch

    async def main():
        async with conch.AsyncSandbox() as sb:          # the local server
            r = await sb.commands.run("echo hello")
            print(r.stdout, r.exit_code)
            async with sb.stream(["pytest", "-q"], timeout=300) as proc:
                async for chunk in proc:
                    print(chunk.stream, chunk.data)
                res = await proc.wait()                 # streamed=True

    asyncio.run(main())

``conch.Sandbox`` is the same surface, blocking.  Errors are ``conch.Error``
subclasses named after the Connect code (``conch.Unavailable``,
``conch.DeadlineExceeded``, ``conch.NotFound``, ...).
"""

from . import _conch
from ._async import (AsyncCommands, AsyncPty, AsyncSandbox, Process,
                     ProcessHandle, StdinStream)
from ._errors import *  # noqa: F401,F403
from ._errors import ERRORS, CapabilityNotSupported, Error
from ._sync import (Commands, Pty, Sandbox, SyncProcess, SyncProcessHandle,
                    SyncStdinStream)
from ._types import Capability, ExecResult, OutputChunk, ProcessInfo
from ._files import (AsyncFiles, AsyncReadStream, AsyncWatchHandle,
                     EntryInfo, Files, FilesystemEvent, ReadStream,
                     WatchHandle, WriteEntry, WriteInfo)

__version__ = "0.1.0"

_conch._register(ExecResult, OutputChunk, ProcessInfo, Error,
                 CapabilityNotSupported, ERRORS)


def local_socket() -> str:
    """The local server's private socket (``$XDG_RUNTIME_DIR/conch/
    serve.sock``, else ``${TMPDIR:-/tmp}/conch-<uid>/serve.sock``), its
    directory created and checked as the CLI does."""
    return _conch.local_socket()


__all__ = [
    "AsyncSandbox", "Sandbox", "AsyncCommands", "Commands", "AsyncPty",
    "Pty", "Process", "SyncProcess", "ProcessHandle", "SyncProcessHandle",
    "StdinStream", "SyncStdinStream",
    "ExecResult", "OutputChunk", "ProcessInfo", "Capability", "local_socket",
    "Error", "CapabilityNotSupported",
    "Files", "AsyncFiles", "EntryInfo", "WriteInfo", "WriteEntry",
    "FilesystemEvent", "ReadStream", "AsyncReadStream", "WatchHandle",
    "AsyncWatchHandle",
    *[c.__name__ for c in ERRORS.values()],
]
