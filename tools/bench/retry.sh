#!/bin/sh
# What a retry policy (conch/retry.h) costs a unary call that does not
# fail, client side, for two builds (before and after a change) in one run.
# A benchmark, not a test.
#
#   tools/bench/retry.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# Instructions per unary call (callgrind's total, the difference between a
# run of N2 and one of N1 calls, so that start and connection set-up drop
# out) of process.Process/List (Connect, application/proto, 16 in flight,
# h2c), conch-bench under valgrind against conch-bench-server of the same
# build: for each build without a policy, and for AFTER also with one for
# every method (CONCH_BENCH_RETRY=1: 3 attempts on unavailable).  The
# server's path did not change.  Environment: N1 (1000), N2 (6000).
# Needs valgrind.
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

client_ir() { # build calls env -> total Ir of the client
  start "$1/tools/bench/conch-bench-server"
  env $3 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$2" \
    >/dev/null 2>&1
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
per_call() { # build env
  a=$(client_ir "$1" "$n1" "$2")
  b=$(client_ir "$1" "$n2" "$2")
  awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
    'BEGIN{printf "%.0f", (b - a) / (n2 - n1)}'
}

echo "retry.sh: N1=$n1 N2=$n2, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| build | retry policy | client Ir/call |"
echo "|---|---|---:|"
for row in "before none" "after none" "after one"; do
  set -- $row
  eval dir=\$$1
  if [ "$2" = one ]; then e=CONCH_BENCH_RETRY=1; else e=CONCH_BENCH_RETRY=0; fi
  echo "| $1 | $2 | $(per_call "$dir" "$e") |"
done
