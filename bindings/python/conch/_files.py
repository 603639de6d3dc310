"""``sandbox.files``: E2B's files surface, sync (``Files``) and async
(``AsyncFiles``), on libconch's files API (conch/files.h).

Contents stream both ways through bounded memory: a read hands pieces to
the caller as they arrive (libconch pauses the transfer while more than
about 1 MiB waits for the caller), a write sends what its source gives a
piece at a time (a str, bytes, a file object read in 1 MiB pieces, or an
iterable of bytes; an async iterable too for ``AsyncFiles``).  Leaving a
read stream early, or an exception in a write's source, cancels the
transfer (conch serve leaves the old file of a cut upload, or none)."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import (Any, AsyncIterator, Iterable, Iterator, List, Literal,
                    Mapping, Optional, Sequence, Union)

from . import _conch
from ._errors import AlreadyExists, InvalidArgument, NotFound
from ._types import _text

__all__ = ["EntryInfo", "WriteInfo", "WriteEntry", "FilesystemEvent",
           "FileType", "Files", "AsyncFiles", "ReadStream",
           "AsyncReadStream", "WatchHandle", "AsyncWatchHandle"]

PIECE = 1 << 20  #: what one read() of a file object asks for

#: E2B's FileType values.
FileType = Literal["file", "dir", "symlink", "unknown"]


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """An entry (envd's EntryInfo): ``type`` "file", "dir", "symlink"
    (a symlink: its target's type, as envd) or "unknown"; ``metadata`` the
    entry's ``user.e2b.*`` xattrs, the prefix taken off."""

    name: str
    type: str
    path: str
    size: int = 0
    mode: int = 0
    permissions: str = ""
    owner: str = ""
    group: str = ""
    modified_time: Optional[datetime] = None
    symlink_target: Optional[str] = None
    metadata: dict = field(default_factory=dict)


#: What a write answers: the written entry (name, type, path, metadata as
#: the server read them back; the other fields empty).
WriteInfo = EntryInfo


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """One file of ``write([...])``."""

    path: str
    data: Any
    metadata: Optional[Mapping[str, str]] = None


@dataclass(frozen=True, slots=True)
class FilesystemEvent:
    """A change under a watched directory: ``type`` "create", "write",
    "remove", "rename" or "chmod"; ``name`` relative to the directory;
    ``entry`` the entry after it, when the server had one."""

    name: str
    type: str
    entry: Optional[EntryInfo] = None


def _entry(t, full=True) -> EntryInfo:
    (name, typ, path, size, mode, perms, owner, group, sec, nsec, target,
     meta) = t
    mtime = (datetime.fromtimestamp(sec + nsec / 1e9, tz=timezone.utc)
             if full and (sec or nsec) else None)
    return EntryInfo(name, typ, path, size, mode, perms, owner, group, mtime,
                     target, meta)


def _meta_pairs(metadata) -> Optional[list]:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError("metadata: a mapping of str to str")
    pairs = []
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata: a mapping of str to str")
        if "\0" in k or "\0" in v:
            raise InvalidArgument(
                f"invalid metadata ({k[:64]!r}): a key or value may hold no "
                f"NUL")
        pairs.append((k, v))
    return pairs


def _as_bytes(b):
    """A piece as given, a str as UTF-8 (no copy of bytes-like pieces)."""
    return b.encode("utf-8") if isinstance(b, str) else b


def _pieces(data) -> Iterator[bytes]:
    """A write's contents as bytes pieces, read as they are sent."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        mv = memoryview(data).cast("B")
        for i in range(0, len(mv), PIECE):
            yield mv[i:i + PIECE]
        return
    read = getattr(data, "read", None)
    if read is not None:
        while True:
            b = read(PIECE)
            if not b:
                return
            yield _as_bytes(b)
    if isinstance(data, Iterable):
        for b in data:
            yield _as_bytes(b)
        return
    raise TypeError("data: str, bytes, a file object or an iterable of "
                    "bytes")


def _entries_of(path_or_files, data, metadata):
    """write()'s files as WriteEntry, each with its metadata (the call's
    when it has none), and whether it was one path."""
    if isinstance(path_or_files, (str, os.PathLike)):
        return [WriteEntry(os.fspath(path_or_files), data, metadata)], True
    if data is not None:
        raise TypeError("write(path, data) or write([WriteEntry, ...])")
    out = []
    for e in path_or_files:
        if isinstance(e, Mapping):
            e = WriteEntry(e["path"], e["data"], e.get("metadata"))
        elif not isinstance(e, WriteEntry):
            e = WriteEntry(*e)
        if e.metadata is None and metadata is not None:
            e = WriteEntry(e.path, e.data, metadata)
        out.append(e)
    return out, False


def _written(ents) -> Optional[WriteInfo]:
    """A write's answer: its entry, None when the server listed none."""
    return _entry(ents[0], full=False) if ents else None


def _contents(data: bytes, format):
    """read()'s "text" or "bytes" result."""
    return _text(data) if format == "text" else data


def _check_format(format):
    if format not in ("text", "bytes", "stream"):
        raise ValueError('format: "text", "bytes" or "stream"')


class _Stream:
    """What the read streams share: the native op, whether it ended, and
    the transfer cancelled when the stream is dropped while it runs."""

    __slots__ = ("_op", "_done")

    def __init__(self, op):
        self._op = op
        self._done = False

    def __del__(self):
        op = getattr(self, "_op", None)
        if op is not None and not op.closed:
            try:
                op.close_nowait()
            except Exception:
                pass


# ---- blocking ----------------------------------------------------------------


class ReadStream(_Stream):
    """A file's contents as they arrive: iterate it for bytes pieces.  A
    context manager: leaving it (or ``close()``) ends the transfer if it
    still runs; it also ends at the last piece."""

    __slots__ = ()

    def __iter__(self) -> "ReadStream":
        return self

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        op = self._op
        while True:
            try:
                c = op.pop()
                if c is None:
                    op.wait_data()
                    continue
            except BaseException:
                self.close()
                raise
            if c is _conch.END:
                self._done = True
                raise StopIteration
            return c

    def __enter__(self) -> "ReadStream":
        return self

    def __exit__(self, et, ev, tb) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Ends the transfer (idempotent)."""
        self._done = True
        if not self._op.closed:
            self._op.close()


class WatchHandle:
    """A watch of a directory: iterate it for ``FilesystemEvent``s (as
    they come), or ``get_new_events()`` for what came so far (E2B's).  A
    context manager; ``close()`` (alias ``stop()``) always ends the watch
    on the server."""

    def __init__(self, native, lock=None):
        self._w = native
        self._lock = lock

    def __iter__(self) -> "WatchHandle":
        return self

    def __next__(self) -> FilesystemEvent:
        ev = self.next_event(None)
        if ev is None:
            raise StopIteration
        return ev

    def next_event(self, timeout: Optional[float] = None
                   ) -> Optional[FilesystemEvent]:
        """The next event, waiting at most ``timeout`` seconds (None: as
        long as it takes); None when nothing came, or the watch ended."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        while True:
            r = self._w.next(ms)
            if r is _conch.END or (r is None and timeout is not None):
                return None
            if r is not None:
                typ, name, ent = r
                return FilesystemEvent(name, typ,
                                       _entry(ent) if ent else None)

    def get_new_events(self) -> List[FilesystemEvent]:
        """The events that came since the last call, without waiting."""
        out = []
        while True:
            ev = self.next_event(0)
            if ev is None:
                return out
            out.append(ev)

    @property
    def closed(self) -> bool:
        return self._w.closed

    def close(self) -> None:
        self._w.close()

    stop = close

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, et, ev, tb) -> bool:
        self.close()
        return False


class Files:
    """``sb.files`` of a blocking Sandbox: E2B's ``sandbox.files``."""

    def __init__(self, sb):
        self._sb = sb

    def _n(self):
        if self._sb._closed:
            raise RuntimeError("the sandbox is closed")
        return self._sb._native

    def _fs(self, what, path, user, dst=None, depth=0):
        return self._n().fs(what, os.fspath(path), user,
                            None if dst is None else os.fspath(dst),
                            depth).wait_end()

    def read(self, path, format: str = "text", *,
             user: Optional[str] = None) -> Union[str, bytes, ReadStream]:
        """The file's contents: str (UTF-8, "text"), bytes ("bytes") or a
        ``ReadStream`` of bytes pieces ("stream")."""
        _check_format(format)
        op = self._n().fs_read(os.fspath(path), user)
        stream = ReadStream(op)
        if format == "stream":
            return stream
        with stream:
            return _contents(b"".join(stream), format)

    def write(self, path_or_files, data=None, *, user: Optional[str] = None,
              metadata: Optional[Mapping[str, str]] = None):
        """Writes one file (``write(path, data)``: its ``WriteInfo``) or
        many (``write([WriteEntry(path, data), ...])``: a list).  Parent
        directories are made; an existing file is replaced.  ``metadata``
        is kept as the file's ``user.e2b.*`` xattrs (keys lower-cased; a
        key that is not an HTTP token, or a value with CR, LF or another
        control character, raises ``InvalidArgument`` before anything is
        sent)."""
        entries, one = _entries_of(path_or_files, data, metadata)
        out = [self._write_one(e.path, e.data, user, e.metadata)
               for e in entries]
        return out[0] if one else out

    def write_files(self, files: Sequence[WriteEntry], *,
                    user: Optional[str] = None) -> List[WriteInfo]:
        return self.write(list(files), user=user)

    def _write_one(self, path, data, user, metadata):
        src = _pieces(data)
        op = self._n().fs_write(os.fspath(path), user, _meta_pairs(metadata))
        try:
            for piece in src:
                r = op.feed(piece)
                while r is False:  # the last piece is still going
                    op.wait_data()
                    r = op.feed(piece)
                if r is None:  # the write ended: wait_end() says how
                    break
            op.feed_end()
            ents = op.wait_end()
        except BaseException:
            op.close()
            raise
        return _written(ents)

    def list(self, path, depth: int = 1, *,
             user: Optional[str] = None) -> List[EntryInfo]:
        """The directory's entries, and theirs to ``depth``."""
        if depth < 1:
            raise ValueError("depth: 1 or more")
        return [_entry(t) for t in self._fs("list", path, user, None, depth)]

    def exists(self, path, *, user: Optional[str] = None) -> bool:
        try:
            self._fs("stat", path, user)
        except NotFound:
            return False
        return True

    def get_info(self, path, *, user: Optional[str] = None) -> EntryInfo:
        return _entry(self._fs("stat", path, user)[0])

    def make_dir(self, path, *, user: Optional[str] = None) -> bool:
        """Makes the directory and its parents: True, or False when it was
        there already (E2B's)."""
        try:
            self._fs("mkdir", path, user)
        except AlreadyExists:
            return False
        return True

    def rename(self, old_path, new_path, *,
               user: Optional[str] = None) -> EntryInfo:
        return _entry(self._fs("move", old_path, user, new_path)[0])

    def remove(self, path, *, user: Optional[str] = None) -> None:
        self._fs("remove", path, user)

    def watch_dir(self, path, *, recursive: bool = False,
                  user: Optional[str] = None) -> WatchHandle:
        """Watches the directory; returns once the server watches it."""
        return WatchHandle(self._n().fs_watch(os.fspath(path), user,
                                              recursive))


# ---- asyncio -----------------------------------------------------------------


class AsyncReadStream(_Stream):
    """``ReadStream`` of an AsyncSandbox: ``async for`` pieces, ``async
    with`` (or ``await close()``) ends the transfer."""

    __slots__ = ()

    def __aiter__(self) -> "AsyncReadStream":
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        op = self._op
        while True:
            try:
                c = op.pop()
                if c is None:
                    await op.data_future()
                    continue
            except BaseException:
                self._cancel()
                raise
            if c is _conch.END:
                self._done = True
                raise StopAsyncIteration
            return c

    def _cancel(self):
        self._done = True
        if not self._op.closed:
            self._op.close_nowait()

    async def __aenter__(self) -> "AsyncReadStream":
        return self

    async def __aexit__(self, et, ev, tb) -> bool:
        await self.close()
        return False

    async def close(self) -> None:
        self._cancel()
        if not self._op.closed:
            try:
                await asyncio.shield(self._op.result_future())
            except Exception:
                pass


class AsyncWatchHandle:
    """``WatchHandle`` of an AsyncSandbox: ``async for`` events, ``async
    with`` / ``await close()`` (alias ``stop()``) ends the watch.  libconch's
    watch is blocking, so it runs on a connection of its own, driven by a
    worker thread only while an event is awaited."""

    def __init__(self, native_sb, watch):
        self._nsb = native_sb
        self._h = WatchHandle(watch)
        self._lock = threading.Lock()
        self._closed = False

    def _next(self, timeout):
        with self._lock:
            if self._closed:
                return None
            return self._h.next_event(timeout)

    def __aiter__(self) -> "AsyncWatchHandle":
        return self

    async def __anext__(self) -> FilesystemEvent:
        ev = await self.next_event(None)
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def next_event(self, timeout: Optional[float] = None
                         ) -> Optional[FilesystemEvent]:
        # Waits in slices so that a close is never held up for long.
        while True:
            slice_ = 0.2 if timeout is None else min(timeout, 0.2)
            ev = await asyncio.to_thread(self._next, slice_)
            if ev is not None or self._closed or self._h.closed:
                return ev
            if timeout is not None:
                timeout -= slice_
                if timeout <= 0:
                    return None

    async def get_new_events(self) -> List[FilesystemEvent]:
        out = []
        while True:
            ev = await asyncio.to_thread(self._next, 0)
            if ev is None:
                return out
            out.append(ev)

    @property
    def closed(self) -> bool:
        return self._closed

    def _close_sync(self):
        with self._lock:
            if not self._closed:
                self._closed = True
                self._h.close()
                self._nsb.free()

    async def close(self) -> None:
        await asyncio.shield(asyncio.to_thread(self._close_sync))

    stop = close

    async def __aenter__(self) -> "AsyncWatchHandle":
        return self

    async def __aexit__(self, et, ev, tb) -> bool:
        await self.close()
        return False

    def __del__(self):
        if not getattr(self, "_closed", True):
            try:
                self._close_sync()
            except Exception:
                pass


async def _aiter_pieces(data) -> AsyncIterator[bytes]:
    if hasattr(data, "__aiter__"):
        async for b in data:
            yield _as_bytes(b)
        return
    read = getattr(data, "read", None)
    if read is not None and asyncio.iscoroutinefunction(read):
        while True:
            b = await read(PIECE)
            if not b:
                return
            yield _as_bytes(b)
    for b in _pieces(data):
        yield b


class AsyncFiles:
    """``sb.files`` of an AsyncSandbox: ``Files`` with ``await``."""

    def __init__(self, sb):
        self._sb = sb

    async def _fs(self, what, path, user, dst=None, depth=0):
        op = self._sb._native.fs(what, os.fspath(path), user,
                                 None if dst is None else os.fspath(dst),
                                 depth)
        return await op.result_future()

    async def read(self, path, format: str = "text", *,
                   user: Optional[str] = None
                   ) -> Union[str, bytes, AsyncReadStream]:
        _check_format(format)
        stream = AsyncReadStream(self._sb._native.fs_read(os.fspath(path),
                                                          user))
        if format == "stream":
            return stream
        async with stream:
            return _contents(b"".join([c async for c in stream]), format)

    async def write(self, path_or_files, data=None, *,
                    user: Optional[str] = None,
                    metadata: Optional[Mapping[str, str]] = None):
        entries, one = _entries_of(path_or_files, data, metadata)
        out = []
        for e in entries:
            out.append(await self._write_one(e.path, e.data, user,
                                             e.metadata))
        return out[0] if one else out

    async def write_files(self, files: Sequence[WriteEntry], *,
                          user: Optional[str] = None) -> List[WriteInfo]:
        return await self.write(list(files), user=user)

    async def _write_one(self, path, data, user, metadata):
        op = self._sb._native.fs_write(os.fspath(path), user,
                                       _meta_pairs(metadata))
        try:
            async for piece in _aiter_pieces(data):
                r = op.feed(piece)
                while r is False:  # the last piece is still going
                    await op.data_future()
                    r = op.feed(piece)
                if r is None:  # the write ended: its result says how
                    break
            op.feed_end()
            ents = await op.result_future()
        except BaseException:
            if not op.closed:
                op.close_nowait()
            raise
        return _written(ents)

    async def list(self, path, depth: int = 1, *,
                   user: Optional[str] = None) -> List[EntryInfo]:
        if depth < 1:
            raise ValueError("depth: 1 or more")
        return [_entry(t) for t in await self._fs("list", path, user, None,
                                                  depth)]

    async def exists(self, path, *, user: Optional[str] = None) -> bool:
        try:
            await self._fs("stat", path, user)
        except NotFound:
            return False
        return True

    async def get_info(self, path, *,
                       user: Optional[str] = None) -> EntryInfo:
        return _entry((await self._fs("stat", path, user))[0])

    async def make_dir(self, path, *, user: Optional[str] = None) -> bool:
        try:
            await self._fs("mkdir", path, user)
        except AlreadyExists:
            return False
        return True

    async def rename(self, old_path, new_path, *,
                     user: Optional[str] = None) -> EntryInfo:
        return _entry((await self._fs("move", old_path, user, new_path))[0])

    async def remove(self, path, *, user: Optional[str] = None) -> None:
        await self._fs("remove", path, user)

    async def watch_dir(self, path, *, recursive: bool = False,
                        user: Optional[str] = None) -> AsyncWatchHandle:
        """Watches the directory (on a connection of its own); returns once
        the server watches it."""
        self._sb._native  # the sandbox is open, on this loop
        args = self._sb._args

        def start():
            nsb = _conch.Sandbox(**args)
            try:
                return nsb, nsb.fs_watch(os.fspath(path), user, recursive)
            except BaseException:
                nsb.free()
                raise

        nsb, w = await asyncio.to_thread(start)
        return AsyncWatchHandle(nsb, w)
