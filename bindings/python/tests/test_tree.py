"""The ``tree`` option (libconch's process-tree leader, conch/process.h
"Process trees") against conch serve, which signals process groups,
against `conch serve --signal-pid-only` (CI's stand-in for envd, which
signals the pid only and starts piped processes in its own group) and
against the envd-like connect-node server, which signals the pid only but
gives every child a session of its own.  A shell leaves two background
sleeps; what is left of them once the handle is closed is read in the OS
process table."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import conch
from conftest import WAIT, start_serve, wait_gone, wait_until


@pytest.fixture(scope="module")
def pid_only():
    p = start_serve("--kill-grace-ms", "1000", "--signal-pid-only")
    yield p
    p.stop()


@pytest.fixture(params=["conch", "pid-only"])
def any_serve(request):
    return request.getfixturevalue("serve" if request.param == "conch"
                                   else "pid_only")


def sb_for(server, **kw):
    return conch.AsyncSandbox(server.url, kill_grace=1.0, **kw)


_seq = [0]


def tree_mark() -> str:
    """A number for this case's sleeps (`sleep 7792NNNPPPPPPP`)."""
    _seq[0] += 1
    return f"7792{_seq[0]:03d}{os.getpid():07d}"


def sleeps(m: str) -> list:
    """Pids of live `sleep M` processes (not the shell or a leader, whose
    command lines carry M too)."""
    want = b"sleep\0" + m.encode() + b"\0"
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if not f.read().endswith(want):
                    continue
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            if st[st.rindex(")") + 2] not in "ZX":
                pids.append(int(d))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return pids


def shell(m: str) -> list:
    """A shell whose child runs in the background and which waits on a
    second one: what a `conch run -- sh -c '...'` user leaves behind."""
    return ["/bin/sh", "-c", f"sleep {m} & sleep {m}; true"]


async def wait_sleeps(m: str, n: int = 2) -> None:
    deadline = time.monotonic() + WAIT
    while len(sleeps(m)) < n:
        assert time.monotonic() < deadline, f"{n} sleeps never ran"
        await asyncio.sleep(0.01)


def kill_all(m: str) -> None:
    for pid in sleeps(m):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def stream_and_close(sb, m, **kw) -> None:
    async with sb.stream(shell(m), **kw) as proc:
        assert proc.pid > 0
        await wait_sleeps(m)
    # Leaving the block closed the handle: the shell is gone.


@pytest.mark.parametrize("where", ["command", "sandbox"])
async def test_tree_on_ends_background_children(any_serve, where):
    m = tree_mark()
    try:
        if where == "command":
            async with sb_for(any_serve) as sb:
                await stream_and_close(sb, m, tree=True)
        else:
            async with sb_for(any_serve, tree=True) as sb:
                await stream_and_close(sb, m)
        wait_gone(f"sleep {m}")
    finally:
        kill_all(m)


async def test_tree_default_on_a_pid_only_server(pid_only):
    """envd's way (the pid signalled, no header saying groups): by default
    the leader is used and the tree ends with the handle."""
    if os.environ.get("CONCH_TREE"):
        pytest.skip("CONCH_TREE is set: the default is not auto")
    m = tree_mark()
    try:
        async with sb_for(pid_only) as sb:
            await stream_and_close(sb, m)
            await stream_and_close(sb, m, tree="auto")
        wait_gone(f"sleep {m}")
    finally:
        kill_all(m)


async def test_tree_off_leaves_children_on_a_pid_only_server(pid_only):
    """Without the leader a server that signals the pid only ends the shell
    and nothing else: both sleeps outlive the closed handle (the case the
    leader exists for)."""
    m, m2 = tree_mark(), tree_mark()
    try:
        async with sb_for(pid_only) as sb:
            await stream_and_close(sb, m, tree=False)
            assert len(sleeps(m)) == 2
        async with sb_for(pid_only, tree="off") as sb:
            await stream_and_close(sb, m2)
            assert len(sleeps(m2)) == 2
    finally:
        kill_all(m)
        kill_all(m2)
    wait_until(lambda: sleeps(m) == [] and sleeps(m2) == [],
               what="the sleeps' end")


async def test_tree_off_leaves_children_on_the_node_peer(node):
    """The node peer signals the pid only: without the leader both sleeps
    outlive the closed handle."""
    m = tree_mark()
    try:
        async with sb_for(node, tree=False) as sb:
            await stream_and_close(sb, m)
            assert len(sleeps(m)) == 2
    finally:
        kill_all(m)
    wait_until(lambda: sleeps(m) == [], what="the sleeps' end")


async def test_tree_on_the_node_peer(node):
    """The node peer starts processes as envd does (no group of their own,
    the pid signalled): the leader, by default and asked for, ends the
    tree with the handle."""
    if os.environ.get("CONCH_TREE"):
        pytest.skip("CONCH_TREE is set: the default is not auto")
    m = tree_mark()
    try:
        async with sb_for(node) as sb:
            await stream_and_close(sb, m, tree=True)
            await stream_and_close(sb, m)
        wait_gone(f"sleep {m}")
    finally:
        kill_all(m)


async def test_tree_off_on_conch_serve(serve):
    """conch serve signals the group itself: no leader needed."""
    m = tree_mark()
    try:
        async with sb_for(serve, tree=False) as sb:
            await stream_and_close(sb, m)
        wait_gone(f"sleep {m}")
    finally:
        kill_all(m)


def test_tree_blocking_sandbox(pid_only):
    m = tree_mark()
    try:
        with conch.Sandbox(pid_only.url, kill_grace=1.0) as sb:
            h = sb.commands.start(shell(m), tree=True)
            assert h.pid > 0
            wait_until(lambda: len(sleeps(m)) == 2, what="the sleeps")
            sb.commands.kill(h.pid, signal.SIGTERM)
            wait_gone(f"sleep {m}")
            with sb.commands.stream(shell(m), tree="on") as proc:
                assert proc.pid > 0
                wait_until(lambda: len(sleeps(m)) == 2, what="the sleeps")
            wait_gone(f"sleep {m}")
            r = sb.commands.run(["/bin/sh", "-c", "exit 7"], tree=True)
            assert r.exit_code == 7
    finally:
        kill_all(m)


async def test_tree_values(pid_only):
    with pytest.raises(ValueError):
        conch.AsyncSandbox(pid_only.url, tree="maybe")
    with pytest.raises(ValueError):
        conch.Sandbox(pid_only.url, tree=1)
    async with sb_for(pid_only) as sb:
        for bad in ("yes", 3, 0.5):
            with pytest.raises(ValueError):
                await sb.commands.run(["/bin/true"], tree=bad)
        # The leader is transparent: exit codes and output are the
        # command's own.
        r = await sb.commands.run(["/bin/sh", "-c", "echo hi; exit 130"],
                                  tree=True)
        assert r.exit_code == 130 and r.stdout == "hi\n"
