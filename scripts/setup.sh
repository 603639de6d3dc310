#!/bin/sh
# Installs what a fresh Debian 12 machine lacks to build and test conch:
# Debian packages (as root, or through sudo) and the npm test peers.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)

PKGS="build-essential cmake pkg-config libnghttp2-dev libssl-dev zlib1g-dev \
libbrotli-dev libzstd-dev libsnappy-dev \
libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libcmocka-dev \
libjansson-dev libuv1-dev libevent-dev libhttp-parser-dev openssl curl \
valgrind clang libclang-rt-14-dev \
python3-dev python3-pytest python3-pytest-asyncio python3-uvloop \
python3-grpcio python3-protobuf python3-pip python3-setuptools python3-wheel xz-utils"

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  if [ "$(id -u)" = 0 ]; then
    SUDO=""
  elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "setup: need root to install:$missing" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# The test peers (connect-node) need Node.js 20 or newer.
if ! command -v node >/dev/null 2>&1; then
  echo "setup: Node.js >= 20 is required for the test peers (not found)" >&2
  exit 1
fi
# 20.18.1: the e2b SDK's floor (tests/e2b); the other peers need 20.
if ! node -e 'const [a, b, c] = process.versions.node.split(".").map(Number);
  process.exit(a > 20 || (a === 20 && (b > 18 || (b === 18 && c >= 1))) ? 0 : 1)'
then
  echo "setup: Node.js >= 20.18.1 is required for the test peers" \
    "(have $(node -v))" >&2
  exit 1
fi
# One npm workspace (tests/package.json) holds every peer: tests/interop/node,
# tests/server/node, tests/conformance/node, tests/api/node and tests/e2b,
# with one lock file and one node_modules in tests.
# node_modules of each peer, from before the workspace, would shadow it.
for d in interop/node server/node conformance/node api/node e2b; do
  if [ -d "$top/tests/$d/node_modules" ]; then
    echo "setup: removing tests/$d/node_modules (the workspace's is tests/node_modules)"
    rm -rf "$top/tests/$d/node_modules"
  fi
done
stamp="$top/tests/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$top/tests/package-lock.json" -nt "$stamp" ]; then
  echo "setup: npm ci in tests"
  (cd "$top/tests" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup: done"
