"""The values conch hands out: results, chunks, process listings."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal, Optional

__all__ = ["ExecResult", "OutputChunk", "ProcessInfo", "Capability"]


class Capability(enum.IntFlag):
    """What a sandbox supports.  envd and ``conch serve`` support all."""

    STREAMING = 1
    STDIN_STREAM = 2
    PTY = 4
    ALL = 7


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """A piece of a process's output, as it arrived.  Chunks are ordered
    within each stream, not across streams."""

    stream: Literal["stdout", "stderr", "pty"]
    data: bytes


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How a process ended and, unless it was streamed, what it wrote.

    ``exit_code`` is the exit status (-1 when killed by a signal, see
    ``status``); a non-zero exit is a result, not an exception.
    ``stdout``, ``stderr`` and ``text`` (both together, in arrival order)
    are str, decoded as UTF-8 with replacement; ``stdout_bytes``,
    ``stderr_bytes`` and ``text_bytes`` the raw bytes.  ``streamed`` is True
    when the output went to the caller chunk by chunk (``stream()``): the
    buffers are then empty by construction.  ``status`` is the server's
    words for the end ("exit status 1", "signal: killed"), ``error`` the
    end's error text (None on exit 0).
    """

    pid: int
    exit_code: int
    stdout_bytes: bytes = field(repr=False)
    stderr_bytes: bytes = field(repr=False)
    text_bytes: bytes = field(repr=False)
    streamed: bool = False
    exited: bool = True
    ended: bool = True
    status: Optional[str] = None
    error: Optional[str] = None

    @property
    def stdout(self) -> str:
        return _text(self.stdout_bytes)

    @property
    def stderr(self) -> str:
        return _text(self.stderr_bytes)

    @property
    def text(self) -> str:
        return _text(self.text_bytes)

    def __repr__(self):
        out = (f", stdout={self.stdout[:60]!r}, stderr={self.stderr[:60]!r}"
               if not self.streamed else "")
        return (f"ExecResult(pid={self.pid}, exit_code={self.exit_code}"
                f"{out}, streamed={self.streamed}, status={self.status!r})")


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A running process, as ``list()`` reports it."""

    pid: int
    tag: Optional[str]
    cmd: str
    args: tuple
    envs: dict
    cwd: Optional[str]
