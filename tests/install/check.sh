#!/bin/sh
# Installs the build in BUILD_DIR into a scratch prefix and builds a consumer
# with find_package(conch) and with pkg-config, then runs both.  Then builds
# conch from source inside two other projects, once with add_subdirectory()
# (both libraries, linking the shared one) and once with FetchContent (the
# static library alone), and runs what they made.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# The CLI comes with its man page and its bash completion.
for f in bin/conch share/man/man1/conch.1 \
  share/bash-completion/completions/conch; do
  [ -f "$scratch/prefix/$f" ] || {
    echo "install check: $f was not installed" >&2
    exit 1
  }
done
"$scratch/prefix/bin/conch" run --help | grep -q '^usage: conch run' || {
  echo "install check: the installed conch does not run" >&2
  exit 1
}
cmake -S "$here" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
"$scratch/consumer/consumer_static"
PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
cc -o "$scratch/pc" "$here/consumer.c" $(pkg-config --cflags --libs conch)
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/pc"
top=$(cd "$here/../.." && pwd)
jobs=${CONCH_JOBS:-$(nproc)}
cmake -S "$here/embed" -B "$scratch/embed-sub" -DCONCH_EMBED=subdirectory \
  -DCONCH_SOURCE="$top" >/dev/null
cmake --build "$scratch/embed-sub" -j "$jobs" >/dev/null
"$scratch/embed-sub/embedder"
ldd "$scratch/embed-sub/embedder" | grep -q 'libconch\.so' || {
  echo "install check: add_subdirectory build did not link libconch.so" >&2
  exit 1
}
cmake -S "$here/embed" -B "$scratch/embed-fc" -DCONCH_EMBED=fetchcontent \
  -DCONCH_SOURCE="$top" -DCONCH_BUILD_SHARED=OFF >/dev/null
cmake --build "$scratch/embed-fc" -j "$jobs" >/dev/null
"$scratch/embed-fc/embedder"
if ldd "$scratch/embed-fc/embedder" | grep -q 'libconch\.so'; then
  echo "install check: static-only FetchContent build linked libconch.so" >&2
  exit 1
fi
[ ! -e "$scratch/embed-fc/_deps/conch-build/libconch.so" ] || {
  echo "install check: CONCH_BUILD_SHARED=OFF still built libconch.so" >&2
  exit 1
}
# The Python package: Debian's pip builds and installs it offline (no index,
# no build isolation: python3-setuptools and python3-wheel as installed)
# into a venv, with the conch executable inside; url=None then starts it.
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import os, sysconfig, venv
assert os.path.exists(sysconfig.get_paths()["include"] + "/Python.h")' \
  2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$scratch/venv"
  "$scratch/venv/bin/python" -m pip install -q --no-build-isolation \
    --no-index "$top/bindings/python" >"$scratch/pip.log" 2>&1 || {
    tail -30 "$scratch/pip.log"
    echo "install check: pip install ./bindings/python failed" >&2
    exit 1
  }
  mkdir -m 700 "$scratch/xdg"
  out=$(cd "$scratch" && env -u CONCH_SERVE_EXE XDG_RUNTIME_DIR="$scratch/xdg" \
    PATH=/usr/bin:/bin "$scratch/venv/bin/python" -c '
import asyncio, conch
async def main():
    async with conch.AsyncSandbox() as sb:
        print((await sb.commands.run("echo pip-ok")).stdout, end="")
asyncio.run(main())')
  XDG_RUNTIME_DIR="$scratch/xdg" "$scratch/venv/bin/python" -c '
import conch, os, subprocess
from conch._build import SERVE_EXE
subprocess.run([SERVE_EXE, "serve", "--stop"], check=True)'
  [ "$out" = pip-ok ] || {
    echo "install check: the pip-installed package does not run ($out)" >&2
    exit 1
  }
else
  echo "install check: no python3-dev: the Python package is not checked"
fi
echo "install check: ok"
