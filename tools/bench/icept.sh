#!/bin/sh
# Interceptors' cost on the unary path, client and server, for two builds
# (before and after a change) in one run.  A benchmark, not a test.
#
#   tools/bench/icept.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# Instructions per unary call (callgrind's total, the difference between a
# run of N2 and one of N1 calls, so that start and connection set-up drop
# out) of process.Process/List (Connect, application/proto, 16 in flight,
# h2c) between conch-bench and conch-bench-server:
# - client: conch-bench under valgrind, the server of the same build not;
# - server: conch-bench-server under valgrind, the client not;
# for each build without interceptors, and for AFTER also with one client
# interceptor (CONCH_BENCH_ICEPT=1: a start and a close hook, metrics by
# code) and, when the server bench has it, one server interceptor
# (CONCH_BENCH_ICEPT=1 for conch-bench-server).
# Environment: N1 (1000), N2 (6000).  Needs valgrind.
set -eu
before=$1
after=$2
n1=${N1:-1000}
n2=${N2:-6000}
out=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM

start() { # command... ; sets spid and port
  mkfifo "$out/fifo"
  "$@" >"$out/fifo" 2>/dev/null </dev/null &
  spid=$!
  read -r _ port <"$out/fifo"
  rm -f "$out/fifo"
}
stop() {
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  spid=
}

server_ir() { # build calls env -> total Ir of the server
  start env $3 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench-server"
  env $3 "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$2" \
    >/dev/null
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
client_ir() { # build calls env -> total Ir of the client
  start env $3 "$1/tools/bench/conch-bench-server"
  env $3 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$2" \
    >/dev/null 2>&1
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
per_call() { # fn build env
  a=$($1 "$2" "$n1" "$3")
  b=$($1 "$2" "$n2" "$3")
  awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
    'BEGIN{printf "%.0f", (b - a) / (n2 - n1)}'
}

echo "icept.sh: N1=$n1 N2=$n2, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| build | interceptors | client Ir/call | server Ir/call |"
echo "|---|---|---:|---:|"
for row in "before none" "after none" "after one"; do
  set -- $row
  eval dir=\$$1
  if [ "$2" = one ]; then e=CONCH_BENCH_ICEPT=1; else e=CONCH_BENCH_ICEPT=0; fi
  echo "| $1 | $2 | $(per_call client_ir "$dir" "$e") | $(per_call server_ir "$dir" "$e") |"
done
