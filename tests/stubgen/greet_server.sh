#!/bin/sh
# examples/greet_server (on the generated server stubs) answering the greet
# client (on the generated client stubs): unary and server streaming, an
# empty name refused with invalid_argument, then SIGTERM ends it cleanly.
#
#   greet_server.sh GREET_SERVER GREET
set -eu
server=$1
client=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/greet_server.XXXXXX")
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || :; fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 1' HUP INT PIPE TERM

# The files exist before the server starts: its redirections happen in the
# forked child, which may not have run yet when the loop below first reads
# "$scratch/out" (sed failing on a missing file ended the test under set -e).
: >"$scratch/out"
: >"$scratch/err"
"$server" 127.0.0.1:0 >"$scratch/out" 2>"$scratch/err" &
pid=$!
# Poll for the port line: up to 20 s on a loaded machine.
port=
i=0
while [ $i -lt 200 ]; do
  port=$(sed -n 's/^listening on port \([0-9][0-9]*\)$/\1/p' "$scratch/out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$scratch/err" >&2; exit 1; }
  sleep 0.1
  i=$((i + 1))
done
[ -n "$port" ] || { echo "greet_server: no port line within 20 s" >&2; exit 1; }

got=$("$client" "http://127.0.0.1:$port" world)
want=$(printf 'Hello, world!\nHello, world!\nHi again, world!\nBye, world!')
if [ "$got" != "$want" ]; then
  printf 'greet printed:\n%s\nwanted:\n%s\n' "$got" "$want" >&2
  exit 1
fi

if "$client" "http://127.0.0.1:$port" "" >"$scratch/bad" 2>&1; then
  echo "greet with an empty name succeeded" >&2
  exit 1
fi
grep -q 'invalid_argument: name is required' "$scratch/bad" || {
  cat "$scratch/bad" >&2
  exit 1
}

kill -TERM "$pid"
wait "$pid"
pid=
echo "greet_server.sh: greet against greet_server passed"
