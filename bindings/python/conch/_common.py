"""What the asyncio and the blocking sandboxes share: options, command
forms, selectors."""

from __future__ import annotations

import json
import os
import shutil
import signal as _signal
from typing import Mapping, Optional, Sequence, Union

from . import _conch
from ._types import Capability

try:  # written by the CMake build: the conch executable built with us
    from ._build import SERVE_EXE as _BUILT_SERVE_EXE
except ImportError:  # pragma: no cover - an installed package
    _BUILT_SERVE_EXE = None

_PROTOCOLS = {"connect": 0, "grpc": 1, "grpc-web": 2}
_HTTP = {"auto": 0, "1.1": 1, "2": 2}
_CODECS = {"proto": 0, "json": 1}

Command = Union[str, Sequence[str]]
Selector = Union[int, str]
#: The ``tree`` option: None (the default), True ("on"), False ("off") or
#: "auto".
TreeMode = Union[None, bool, str]

#: The shell of a str command, as E2B's SDK runs it.
BASH = ("/bin/bash", ("-l", "-c"))
#: Where bash is missing.
SH = ("/bin/sh", ("-c",))
#: What tells which of the two a sandbox has.
PROBE = ("/bin/sh", ("-c", "test -x /bin/bash"))


def ms(seconds, *, none_is, zero_is=-1) -> int:
    """Seconds (float) as libconch's ms: None -> |none_is| (0: the default),
    0 -> |zero_is| (-1: none)."""
    if seconds is None:
        return none_is
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"a time in seconds, not {seconds!r}")
    if seconds < 0:
        raise ValueError(f"a time in seconds must not be negative: {seconds}")
    if seconds == 0:
        return zero_is
    return max(1, int(round(seconds * 1000)))


def serve_exe_default(serve_exe: Optional[str]) -> Optional[str]:
    """The conch executable auto-start runs: the caller's, else
    CONCH_SERVE_EXE or `conch` in PATH (the library looks), else the one
    built next to this package."""
    if serve_exe is not None:
        return os.fspath(serve_exe)
    if os.environ.get("CONCH_SERVE_EXE") or shutil.which("conch"):
        return None
    return _BUILT_SERVE_EXE


_TREES = {"auto": _conch.TREE_AUTO, "on": _conch.TREE_ON,
          "off": _conch.TREE_OFF}


def tree_mode(tree) -> int:
    """The ``tree`` option as libconch's CONCH_TREE_*: None -> the default
    (a command: the sandbox's; a sandbox: CONCH_TREE in the environment,
    else "auto"), True/"on", False/"off", "auto"."""
    if tree is None:
        return _conch.TREE_DEFAULT
    if tree is True:
        return _conch.TREE_ON
    if tree is False:
        return _conch.TREE_OFF
    if isinstance(tree, str) and tree in _TREES:
        return _TREES[tree]
    raise ValueError(f"tree: None, True, False, 'on', 'off' or 'auto', not "
                     f"{tree!r}")


def native_args(url, access_token, user, headers, timeout, request_timeout,
                kill_grace, keepalive, capabilities, protocol, http_version,
                codec, cacert, auto_start, serve_exe, tree=None,
                service_config=None) -> dict:
    if url is not None and not isinstance(url, str):
        raise TypeError("url: a str (http://, https://, unix:PATH) or None")
    if protocol not in _PROTOCOLS:
        raise ValueError(f"protocol: one of {sorted(_PROTOCOLS)}")
    if http_version not in _HTTP:
        raise ValueError(f"http_version: one of {sorted(_HTTP)}")
    if codec not in _CODECS:
        raise ValueError(f"codec: one of {sorted(_CODECS)}")
    if headers is not None:
        headers = list(headers.items()) if isinstance(headers, Mapping) \
            else list(headers)
    if keepalive is False:
        keepalive = 0
    if kill_grace is not None and kill_grace <= 0:
        raise ValueError("kill_grace: a positive number of seconds")
    if isinstance(service_config, Mapping):
        service_config = json.dumps(service_config)
    elif service_config is not None and not isinstance(service_config, str):
        raise TypeError("service_config: a gRPC service config, as a dict "
                        "or its JSON text")
    return dict(
        url=url, access_token=access_token, user=user, headers=headers,
        timeout_ms=ms(timeout, none_is=0),
        request_timeout_ms=ms(request_timeout, none_is=0),
        kill_grace_ms=ms(kill_grace, none_is=0, zero_is=0),
        keepalive_ms=ms(keepalive, none_is=0),
        capabilities=int(Capability(capabilities)),
        protocol=_PROTOCOLS[protocol], http_version=_HTTP[http_version],
        codec=_CODECS[codec],
        cacert=os.fspath(cacert) if cacert is not None else None,
        autostart=bool(auto_start) and url is None,
        serve_exe=serve_exe_default(serve_exe) if url is None else None,
        tree=tree_mode(tree), service_config=service_config)


def needs_shell(command: Command, args) -> bool:
    return isinstance(command, str) and args is None


def argv(command: Command, args, shell) -> tuple:
    """E2B's command forms: a str without args is a shell command line; a
    list is an argv; a str with args is the program and its arguments."""
    if isinstance(command, str):
        if args is None:
            return shell[0], (*shell[1], command)
        if isinstance(args, str):
            raise TypeError("args: a list of str, not a str")
        return command, tuple(args)
    if isinstance(command, (bytes, bytearray)):
        raise TypeError("command: a str or a list of str, not bytes")
    command = tuple(command)
    if not command:
        raise ValueError("command: an empty argv")
    if args is not None:
        raise TypeError("args: only with a str command (a list is the argv)")
    return command[0], command[1:]


def selector(which: Selector) -> tuple:
    """(pid, tag) for a pid (int) or a tag (str)."""
    if isinstance(which, bool):
        raise TypeError("a pid (int) or a tag (str)")
    if isinstance(which, int):
        if which <= 0:
            raise ValueError(f"not a pid: {which}")
        return which, None
    if isinstance(which, str):
        if not which:
            raise ValueError("an empty tag")
        return 0, which
    raise TypeError("a pid (int) or a tag (str)")


def signal_number(sig) -> int:
    n = int(sig)
    if n not in (int(_signal.SIGTERM), int(_signal.SIGKILL)):
        raise ValueError("signal: SIGTERM or SIGKILL (what envd implements)")
    return n


def env_map(env) -> Optional[dict]:
    if env is None:
        return None
    if not isinstance(env, Mapping):
        raise TypeError("env: a mapping of str to str")
    return dict(env)


def data_bytes(data) -> bytes:
    if isinstance(data, str):
        return data.encode()
    return bytes(data)


def pty_size(cols, rows):
    if cols <= 0 or rows <= 0:
        raise ValueError("cols and rows must be positive")
    return int(cols), int(rows)


END = _conch.END
