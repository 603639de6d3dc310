#!/bin/sh
# Sets up a fresh Debian 12 machine (scripts/setup.sh), builds conch when
# needed, and runs the conch CLI with the given arguments.  Without --url
# the CLI talks to the embedded local server on its private Unix socket
# ($XDG_RUNTIME_DIR/conch/serve.sock, else /tmp/conch-<uid>/) and starts
# it in the background when none answers (`conch serve --stop` ends it).
#
#   ./scripts/conch.sh run -- uname -a
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$top/build/tools/conch/conch" ] || [ -n "${CONCH_REBUILD:-}" ]; then
  sh "$top/scripts/setup.sh" >&2
  cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
  cmake --build "$top/build" -j "$(nproc)" --target conch_cli >&2
fi
exec "$top/build/tools/conch/conch" "$@"
