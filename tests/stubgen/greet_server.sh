#!/bin/sh
# examples/greet_server (on the generated server stubs) answering the greet
# client (on the generated client stubs): unary and server streaming, an
# empty name refused with invalid_argument, then SIGTERM ends it cleanly;
# then a stream of 100,000 greetings, from a source and sent by hand: each
# arrives, and the stream ends OK.
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
# Starts "$server" "$@" 127.0.0.1:0; sets pid and port.
start() {
  # The files exist before the server starts: its redirections happen in
  # the forked child, which may not have run yet when the loop below first
  # reads "$scratch/out" (sed failing on a missing file ended the test
  # under set -e).
  : >"$scratch/out"
  : >"$scratch/err"
  "$server" "$@" 127.0.0.1:0 >"$scratch/out" 2>"$scratch/err" &
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
}

stop() {
  kill -TERM "$pid"
  wait "$pid"
  pid=
}

start
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
stop

# 100,000 greetings, far past the send buffer: all of them, in order, and
# the client's exit status says the stream ended OK.
for how in "" --by-hand; do
  start --greetings 100000 $how
  "$client" "http://127.0.0.1:$port" world >"$scratch/many" || {
    echo "greet against greet_server --greetings 100000 $how failed" >&2
    tail -3 "$scratch/many" >&2
    exit 1
  }
  n=$(wc -l <"$scratch/many")
  last=$(tail -1 "$scratch/many")
  mid=$(sed -n 50001p "$scratch/many")
  if [ "$n" -ne 100001 ] || [ "$last" != "Bye, world!" ] ||
    [ "$mid" != "Hi again (49999), world!" ]; then
    echo "greet_server --greetings 100000 $how: $n lines, ending: $last" >&2
    exit 1
  fi
  stop
done
echo "greet_server.sh: greet against greet_server passed (100,000 greetings" \
  "from a source and by hand)"
