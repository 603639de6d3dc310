"""Every method of the package against conch serve and against the
envd-like connect-node server (tests/api/node), and the blocking Sandbox.
Process lifetimes are checked in the OS process table."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

import conch
from conftest import WAIT, live_exact, live_marked, mark, wait_gone, wait_until


def sb_for(server, **kw):
    return conch.AsyncSandbox(server.url, kill_grace=1.0, **kw)


async def test_run_result(server):
    async with sb_for(server) as sb:
        r = await sb.commands.run(["/bin/sh", "-c",
                                   "echo out; echo err >&2; exit 3"])
        assert r.exit_code == 3 and r.exited and not r.streamed
        assert r.stdout == "out\n" and r.stderr == "err\n"
        assert r.stdout_bytes == b"out\n" and r.stderr_bytes == b"err\n"
        assert sorted([r.text[:4], r.text[4:]]) == ["err\n", "out\n"]
        assert r.text_bytes.decode() == r.text
        assert r.status == "exit status 3"
        assert r.pid > 0
        ok = await sb.commands.run(["/bin/sh", "-c", "printf '\\377ok'"])
        assert ok.exit_code == 0 and ok.error is None
        assert ok.stdout_bytes == b"\xffok" and ok.stdout == "\ufffdok"


async def test_command_forms(server):
    async with sb_for(server) as sb:
        # A str: a shell command line (bash -l -c, as E2B's SDK).
        r = await sb.commands.run("echo $((40 + 2)) | tr 2 3")
        assert r.stdout == "43\n"
        # A str with args: the program and its arguments (no shell).
        r = await sb.commands.run("/bin/echo", ["a  b", "$HOME"])
        assert r.stdout == "a  b $HOME\n"
        # A list: an argv.
        r = await sb.commands.run(["/bin/echo", "x", "*"])
        assert r.stdout == "x *\n"
        with pytest.raises(TypeError):
            await sb.commands.run(["/bin/echo"], ["x"])
        with pytest.raises(TypeError):
            await sb.commands.run("/bin/echo", "x")
        # The same forms stream.
        async with sb.stream("echo s1; echo s2 >&2") as proc:
            got = sorted([(c.stream, c.data) async for c in proc])
        assert got == [("stderr", b"s2\n"), ("stdout", b"s1\n")]


async def test_run_options(server):
    async with sb_for(server) as sb:
        r = await sb.commands.run(["/bin/sh", "-c", 'echo "$FOO-$BAR"; pwd'],
                                  env={"FOO": "foo", "BAR": "b r"}, cwd="/tmp")
        assert r.stdout == "foo-b r\n/tmp\n"
        r = await sb.commands.run(["no-such-command-conch"])
        assert r.exit_code == 127
        with pytest.raises(conch.InvalidArgument) as e:
            await sb.commands.run(["/bin/true"], cwd="/nonexistent/dir")
        assert e.value.code == "invalid_argument" and e.value.code_value == 3
        assert "/nonexistent/dir" in e.value.message
        with pytest.raises(conch.Unauthenticated):
            await sb.commands.run(["/bin/true"], user="no-such-user-conch")


async def test_run_timeout(server):
    m = mark()
    async with sb_for(server) as sb:
        t0 = time.monotonic()
        with pytest.raises(conch.DeadlineExceeded) as e:
            await sb.commands.run(["/bin/sh", "-c", f"echo early; exec sleep {m}"],
                                  timeout=1.0)
        assert time.monotonic() - t0 < 1.0 + WAIT
        assert e.value.result is not None
        assert e.value.result.stdout == "early\n"
    wait_gone(m)


async def test_run_cancelled_ends_the_process(server):
    m = mark()
    async with sb_for(server) as sb:
        task = asyncio.ensure_future(
            sb.commands.run(["/bin/sh", "-c", f"exec sleep {m}", m]))
        wait_for = time.monotonic() + WAIT
        # The sleep itself, its execs done (the shell, and the tree leader
        # where one runs, carry |m| too; a command line read in the middle
        # of an exec is empty).
        while not live_exact(f"sleep {m}") and time.monotonic() < wait_for:
            if task.done():  # what ended it, rather than a bare timeout
                pytest.fail(f"run ended before it was seen: {task.result()!r}")
            await asyncio.sleep(0.01)
        assert live_exact(f"sleep {m}"), "not seen in the process table"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert live_marked(m) == []


async def test_stream_order(server):
    async with sb_for(server) as sb:
        async with sb.stream(["/bin/sh", "-c",
                              "seq 1 20000; seq 1 500 >&2"]) as proc:
            out, err = [], []
            async for c in proc:
                (out if c.stream == "stdout" else err).append(c.data)
            res = await proc.wait()
        assert b"".join(out) == b"".join(b"%d\n" % i for i in range(1, 20001))
        assert b"".join(err) == b"".join(b"%d\n" % i for i in range(1, 501))
        assert res.exit_code == 0 and res.streamed
        assert proc.pid == res.pid


async def test_stream_back_pressure(server):
    """A reader that stops taking output holds a bounded queue (1 MiB, then
    the stream pauses: one stream window more at most) while the process
    waits on its pipe; reading on, every byte arrives."""
    total, bound = 16_000_000, (1 << 20) + (4 << 20) + (512 << 10)
    async with sb_for(server) as sb:
        async with sb.stream(["/bin/sh", "-c",
                              f"head -c {total} /dev/urandom; exit 7"]) as proc:
            it = proc.__aiter__()
            got = len((await it.__anext__()).data)
            peak = 0
            for _ in range(20):  # two seconds of the loop, reading nothing
                await asyncio.sleep(0.1)
                peak = max(peak, proc._op.queued_bytes)
            assert peak <= bound, peak
            assert not proc._op.ended
            async for c in it:
                got += len(c.data)
            res = await proc.wait()
        assert got == total
        assert res.exit_code == 7 and res.streamed


async def test_start_list_kill(server):
    m = mark()
    async with sb_for(server) as sb:
        h = await sb.commands.start(["/bin/sleep", m], tag=f"t{m}",
                                    env={"X": "y"}, cwd="/tmp")
        # The start event comes once the command is spawned; its exec may
        # still be under way (its command line reads empty meanwhile).
        assert h.pid > 0
        wait_until(lambda: live_marked(m), what="the process's exec")
        procs = await sb.commands.list()
        mine = [p for p in procs if p.pid == h.pid]
        assert len(mine) == 1
        info = mine[0]
        assert info.tag == f"t{m}" and info.cmd == "/bin/sleep"
        assert info.args == (m,) and info.envs.get("X") == "y"
        assert info.cwd == "/tmp"
        await h.kill()
        wait_gone(m)
        with pytest.raises(conch.NotFound):
            await sb.commands.kill(999999999 % 4000000 or 1)
        # By tag.
        h2 = await sb.commands.start(["/bin/sleep", m], tag=f"u{m}")
        await sb.commands.kill(f"u{m}", signal.SIGTERM)
        wait_gone(m)
        with pytest.raises(ValueError):
            await sb.commands.kill(h2.pid, signal.SIGUSR1)


async def test_start_wait_and_connect(server):
    m = mark()
    async with sb_for(server) as sb:
        h = await sb.commands.start(
            ["/bin/sh", "-c", "while :; do echo tick; sleep 0.1; done", m])
        # Re-attach, detached: leaving leaves it running.
        async with h.connect(detached=True) as proc:
            async for c in proc:
                assert c.data.startswith(b"tick")
                break
        assert live_marked(m)
        # By pid, owned: leaving ends it.
        async with sb.commands.connect(h.pid) as proc:
            async for c in proc:
                break
        wait_gone(m)
        # wait(): the end of a background process.
        h = await sb.commands.start(["/bin/sh", "-c", "sleep 0.3; exit 4", m])
        r = await h.wait()
        assert r.exit_code == 4 and r.streamed
        with pytest.raises(conch.NotFound):
            async with sb.commands.connect(f"no-such-tag-{m}"):
                pass


async def test_stdin(server):
    async with sb_for(server) as sb:
        async with sb.stream(["/bin/cat"], stdin=True) as proc:
            await proc.send_stdin(b"hello\n")
            got = b""
            async for c in proc:
                got += c.data
                if got == b"hello\n":
                    break
            await proc.send_stdin("second\n")
            await proc.close_stdin()
            rest = b"".join([c.data async for c in proc])
            res = await proc.wait()
        assert rest == b"second\n" and res.exit_code == 0
        # By pid, from the commands.
        h = await sb.commands.start(["/bin/sh", "-c", "read x; exit $x"],
                                    stdin=True)
        await sb.commands.send_stdin(h.pid, b"5\n")
        r = await h.wait()
        assert r.exit_code == 5


async def test_stdin_stream(server):
    async with sb_for(server) as sb:
        async with sb.stream(["/bin/sh", "-c", "wc -c; head -c 3 /dev/null"],
                             stdin=True) as proc:
            async with proc.stdin_stream() as w:
                # 4 MiB written at once: back-pressure, in order.
                for i in range(64):
                    await w.write(bytes([65 + i % 26]) * 65536)
            await proc.close_stdin()
            out = b"".join([c.data async for c in proc])
            assert int(out) == 64 * 65536
        async with sb.stream(["/bin/cat"], stdin=True) as proc:
            async with sb.commands.stdin_stream(proc.pid) as w:
                for i in range(100):
                    await w.write(b"%d," % i)
            await proc.close_stdin()
            out = b"".join([c.data async for c in proc])
            assert out == b"".join(b"%d," % i for i in range(100))
        # A process without stdin: the server refuses, close() raises.
        async with sb.stream(["/bin/sleep", "5"]) as proc:
            with pytest.raises(conch.Error):
                async with proc.stdin_stream() as w:
                    await w.write(b"x")


def test_stdin_stream_blocking(server):
    with conch.Sandbox(server.url) as sb:
        with sb.stream(["/bin/cat"], stdin=True) as proc:
            with proc.stdin_stream() as w:
                for i in range(50):
                    w.write(b"%d;" % i)
            proc.close_stdin()
            assert b"".join(c.data for c in proc) == \
                b"".join(b"%d;" % i for i in range(50))


async def test_pty(serve):
    m = mark()
    async with sb_for(serve) as sb:
        async with sb.pty.open(["/bin/sh"], cols=100, rows=30,
                               env={"M": m}) as proc:
            await proc.send_stdin(b"stty size; echo done-$M\n")
            got = b""
            async for c in proc:
                assert c.stream == "pty"
                got += c.data
                if f"done-{m}".encode() in got.split(b"echo")[-1]:
                    break
            assert b"30 100" in got
            await proc.resize(120, 40)
            await proc.send_stdin(b"stty size; exit 3\n")
            async for c in proc:
                got += c.data
            res = await proc.wait()
        assert b"40 120" in got and res.exit_code == 3
        with pytest.raises(ValueError):
            sb.pty.open(cols=0)


async def test_url_none_autostart(xdg):
    async with conch.AsyncSandbox() as sb:
        r = await sb.commands.run(["/bin/sh", "-c", "echo $PPID"])
        srv = int(r.stdout)
    assert os.path.exists(xdg / "conch" / "serve.sock")
    assert conch.local_socket() == str(xdg / "conch" / "serve.sock")
    # The same server again, blocking.
    with conch.Sandbox() as sb:
        assert int(sb.commands.run(["/bin/sh", "-c", "echo $PPID"]).stdout) \
            == srv
    with open(f"/proc/{srv}/stat") as f:
        assert f.read().split(") ")[1].split()[1] != str(os.getpid())


def test_url_none_no_autostart(xdg):
    with pytest.raises(conch.Unavailable) as e:
        conch.Sandbox(auto_start=False)
    assert str(xdg / "conch" / "serve.sock") in e.value.message
    assert "conch serve" in e.value.message


async def test_unreachable(tmp_path):
    with pytest.raises(conch.Unavailable):
        async with conch.AsyncSandbox(f"unix:{tmp_path}/none.sock") as sb:
            await sb.commands.run(["/bin/true"])
    e = None
    try:
        async with conch.AsyncSandbox(f"unix:{tmp_path}/none.sock") as sb:
            await sb.commands.list()
    except conch.Error as x:
        e = x
    assert isinstance(e, conch.Unavailable) and e.retryable


async def test_token(tmp_path):
    from conftest import Peer, CONCH_BIN
    env = dict(os.environ, CONCH_TOKEN="s3cret")
    p = Peer([CONCH_BIN, "serve", "--listen", "127.0.0.1:0"], env=env)
    try:
        async with conch.AsyncSandbox(p.url) as sb:
            with pytest.raises(conch.Unauthenticated) as e:
                await sb.commands.list()
            assert e.value.http_status == 401
        async with conch.AsyncSandbox(p.url, access_token="s3cret") as sb:
            assert isinstance(await sb.commands.list(), list)
    finally:
        p.stop()


def test_blocking_surface(server):
    m = mark()
    with conch.Sandbox(server.url, kill_grace=1.0) as sb:
        r = sb.commands.run("echo hi")
        assert r.stdout == "hi\n" and not r.streamed
        with sb.stream(["/bin/sh", "-c", "seq 1 3"]) as proc:
            assert b"".join(c.data for c in proc) == b"1\n2\n3\n"
            assert proc.wait().exit_code == 0
        h = sb.commands.start(["/bin/sleep", m], tag=f"b{m}")
        assert any(p.pid == h.pid for p in sb.commands.list())
        with sb.commands.connect(f"b{m}") as proc:
            pass
        wait_gone(m)
        with sb.stream(["/bin/cat"], stdin=True) as proc:
            proc.send_stdin(b"x")
            proc.close_stdin()
            assert b"".join(c.data for c in proc) == b"x"
        with pytest.raises(conch.NotFound):
            sb.commands.kill(h.pid)
        with pytest.raises(conch.InvalidArgument):
            sb.commands.run(["/bin/true"], cwd="/nonexistent/dir")


def test_blocking_threads_share_a_sandbox(serve):
    import threading
    errors, outs = [], []
    with conch.Sandbox(serve.url) as sb:
        def work(i):
            try:
                for k in range(5):
                    r = sb.commands.run(["/bin/echo", f"{i}-{k}"])
                    outs.append(r.stdout)
            except Exception as e:  # pragma: no cover
                errors.append(e)
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert errors == []
    assert sorted(outs) == sorted(f"{i}-{k}\n" for i in range(8)
                                  for k in range(5))


def test_blocking_keyboard_interrupt(serve):
    """Ctrl-C during a blocking wait ends the process, then propagates."""
    import threading
    m = mark()
    with conch.Sandbox(serve.url, kill_grace=1.0) as sb:
        def interrupt():
            wait_until(lambda: live_marked(m), what="start")
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt).start()
        with pytest.raises(KeyboardInterrupt):
            sb.commands.run(["/bin/sleep", m])
        assert live_marked(m) == []


async def test_shell_probe(serve, monkeypatch):
    """A str command runs in bash -l -c where the sandbox has bash, else in
    sh -c (the probe decides once per sandbox)."""
    async with sb_for(serve) as sb:
        r = await sb.commands.run("echo $0")
        assert r.stdout == "/bin/bash\n"
    import conch._async as a
    monkeypatch.setattr(a, "PROBE", ("/bin/sh", ("-c", "test -x /nonexistent")))
    async with sb_for(serve) as sb:
        r = await sb.commands.run("echo $0")
        assert r.stdout == "/bin/sh\n"
    async with sb_for(serve, shell=["/bin/sh", "-c"]) as sb:
        assert (await sb.commands.run("echo $0")).stdout == "/bin/sh\n"


async def test_service_config(server):
    """A gRPC service config's retry policies (conch/retry.h) ride on the
    sandbox's client: as a dict or its JSON; what is wrong is said."""
    cfg = {"methodConfig": [{
        "name": [{"service": "process.Process"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                        "maxBackoff": "0.1s", "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"]}}],
        "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}
    async with sb_for(server, service_config=cfg) as sb:
        r = await sb.commands.run(["/bin/echo", "policy"])
        assert r.stdout == "policy\n"
        assert isinstance(await sb.commands.list(), list)
    # The blocking Sandbox opens its client at once: errors come there.
    with pytest.raises(ValueError, match="maxAttempts"):
        conch.Sandbox(server.url, service_config='{"methodConfig": [{"name": '
                      '[{"service": "s"}], "retryPolicy": {"maxAttempts": 1}}]}')
    with pytest.raises(ValueError, match="not valid JSON"):
        conch.Sandbox(server.url, service_config="{")
    with pytest.raises(TypeError):
        conch.Sandbox(server.url, service_config=3)
    with conch.Sandbox(server.url, service_config=json.dumps(cfg)) as sb:
        assert sb.commands.run(["/bin/echo", "sync"]).stdout == "sync\n"
