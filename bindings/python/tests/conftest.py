"""Fixtures of the Python package's tests: real servers (conch serve, and
the envd-like connect-node server of tests/api/node), the OS process table.

Peers print "LISTENING <port>" (or "LISTENING unix:PATH") once they accept
connections; each is given 120 s for that (a loaded 2-core machine), its
stdin a pipe we hold (it exits when we go), and is stopped at the end.
Environment: CONCH_BIN (the conch executable), CONCH_SOURCE_DIR (the
checkout), CONCH_NODE (node; default "node" in PATH)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("CONCH_SOURCE_DIR",
                            os.path.abspath(os.path.join(HERE, "..", "..", "..")))


def _conch_bin():
    b = os.environ.get("CONCH_BIN")
    if b:
        return b
    try:
        from conch._build import SERVE_EXE
        return SERVE_EXE
    except ImportError:
        return "conch"


CONCH_BIN = _conch_bin()
START_LIMIT = 120.0
#: Every wait for something that should happen soon.
WAIT = 20.0


class Peer:
    def __init__(self, argv, env=None):
        self.argv = argv
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, start_new_session=False)
        self.addr = None
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            line = line.decode().strip()
            if line.startswith("LISTENING "):
                self.addr = line[len("LISTENING "):]
                break
        if self.addr is None:
            self.stop()
            raise RuntimeError(f"{argv}: no LISTENING line")
        self.proc.stdout.close()

    @property
    def pid(self):
        return self.proc.pid

    @property
    def url(self):
        if self.addr.startswith("unix:"):
            return self.addr
        return f"http://127.0.0.1:{self.addr}"

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.terminate()
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdin:
            self.proc.stdin.close()


def start_serve(*extra, env=None):
    return Peer([CONCH_BIN, "serve", "--listen", "127.0.0.1:0", "--no-token",
                 *extra], env=env)


def start_node(*extra):
    node = os.environ.get("CONCH_NODE") or "node"
    return Peer([node, os.path.join(SOURCE_DIR, "tests/api/node/server.mjs"),
                 *extra])


@pytest.fixture(scope="session")
def serve():
    p = start_serve("--kill-grace-ms", "1000")
    yield p
    p.stop()


@pytest.fixture(scope="session")
def node():
    try:
        p = start_node()
    except (RuntimeError, FileNotFoundError) as e:
        pytest.fail(f"the connect-node process server did not start ({e}); "
                    f"run `npm ci` in tests")
    yield p
    p.stop()


@pytest.fixture(params=["conch", "node"])
def server(request):
    """Each test that takes it runs against conch serve and the envd-like
    connect-node peer."""
    p = request.getfixturevalue("serve" if request.param == "conch"
                                else "node")
    p.kind = request.param
    return p


@pytest.fixture
def xdg(tmp_path):
    """A fresh private XDG_RUNTIME_DIR for url=None; servers started in it
    are stopped at the end."""
    d = tmp_path / "xdg"
    d.mkdir(mode=0o700)
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(d)
    yield d
    subprocess.run([CONCH_BIN, "serve", "--stop"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if old is None:
        del os.environ["XDG_RUNTIME_DIR"]
    else:
        os.environ["XDG_RUNTIME_DIR"] = old


# ---- The OS process table -------------------------------------------------

_seq = [0]


def mark() -> str:
    """A number of our own to put on the command lines of a case's
    processes (`sleep 7791NNNPPPPPPP`): no two cases or runs share one."""
    _seq[0] += 1
    return f"7791{_seq[0]:03d}{os.getpid():07d}"


def live_marked(m: str) -> list:
    """Pids of live (not zombie) processes whose command line has |m|."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
            if m.encode() not in cmd:
                continue
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            state = st[st.rindex(")") + 2]
            if state not in "ZX":
                pids.append(int(d))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return pids


def live_exact(cmdline: str) -> list:
    """Pids of live (not zombie) processes whose whole command line, its
    arguments joined by spaces, is |cmdline|."""
    return [pid for pid in live_marked(cmdline)
            if _cmdline(pid) == cmdline]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(
                errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def wait_gone(m: str, limit: float = WAIT) -> float:
    """Waits until no process carries |m|; returns when that was (monotonic
    seconds), or raises AssertionError with the survivors."""
    deadline = time.monotonic() + limit
    while True:
        left = live_marked(m)
        now = time.monotonic()
        if not left:
            return now
        if now > deadline:
            raise AssertionError(f"still running after {limit} s: {left}")
        time.sleep(0.005)


def wait_until(pred, limit: float = WAIT, what: str = "condition"):
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {limit} s")
        time.sleep(0.01)


# ---- The contract table, printed at the end -------------------------------

CONTRACT = []


def pytest_terminal_summary(terminalreporter):
    if not CONTRACT:
        return
    tr = terminalreporter
    tr.write_sep("-", "ADR-0019 contract cases (OS process table)")
    tr.write_line(f"{'case':<44} {'loop':<8} {'exit->last death':>16} "
                  f"{'alive at exit':>13} {'leaked':>6}")
    for case, loop, ms, alive, leaked in CONTRACT:
        t = f"{ms:.1f} ms" if ms is not None else "-"
        tr.write_line(f"{case:<44} {loop:<8} {t:>16} {alive:>13} "
                      f"{leaked:>6}")
