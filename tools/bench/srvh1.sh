#!/bin/sh
# The server core's HTTP/1.1 against its h2c, in one run, for two builds
# (before and after a change).  A benchmark, not a test.
#
#   tools/bench/srvh1.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# - unary: instructions per call of conch-bench-server (callgrind's total,
#   the difference between a run of N2 and one of N1 calls, so that start
#   and connection set-up drop out) for process.Process/List (Connect,
#   application/proto, 16 in flight), driven by conch-bench list over h2c
#   (one connection) and over HTTP/1.1 (--http1: conch's pool of
#   connections); and the same load's server CPU per call (no valgrind,
#   /proc/PID/stat, N3 calls);
# - stream: server CPU seconds per GiB of one Connect server stream,
#   conch serve's process.Process/Start of `head -c 1GiB /dev/zero` read by
#   curl (--http1.1 / --http2-prior-knowledge) into /dev/null; conch serve's
#   own user+sys (the child's not counted); medians of ROUNDS.
# Environment: ROUNDS (3), N1 (1000), N2 (6000), N3 (100000).
# Needs valgrind and curl.
set -eu
before=$1
after=$2
rounds=${ROUNDS:-3}
n1=${N1:-1000}
n2=${N2:-6000}
n3=${N3:-100000}
. "$(dirname "$0")/peer.sh"

# StartRequest{process: {cmd: "head", args: ["-c", "1073741824",
# "/dev/zero"]}} in a Connect envelope.
printf '\000\000\000\000\043\012\041\012\004head\022\002-c\022\0121073741824\022\011/dev/zero' \
  >"$out/start.bin"

ir_run() { # build flag calls -> total Ir
  start valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench-server"
  "$1/tools/bench/conch-bench" $2 list "http://127.0.0.1:$port" 16 "$3" \
    >/dev/null
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
ir_per_call() { # build flag
  per_unit "$n1" "$n2" ir_run "$1" "$2"
}
cpu_per_call() { # build flag -> us
  for r in $(seq "$rounds"); do
    start "$1/tools/bench/conch-bench-server"
    "$1/tools/bench/conch-bench" $2 list "http://127.0.0.1:$port" 16 2000 \
      >/dev/null
    c0=$(cpu "$spid")
    "$1/tools/bench/conch-bench" $2 list "http://127.0.0.1:$port" 16 "$n3" \
      >/dev/null
    c1=$(cpu "$spid")
    stop
    awk -v c="$((c1 - c0))" -v t="$tck" -v n="$n3" \
      'BEGIN{printf "%.2f\n", c / t / n * 1e6}'
  done | median
}
stream_cpu() { # build curl-flag -> s per GiB
  for r in $(seq "$rounds"); do
    start "$1/tools/conch/conch" serve --listen 127.0.0.1:0 --no-token
    c0=$(cpu "$spid")
    curl -s "$2" -o /dev/null -H 'Content-Type: application/connect+proto' \
      -H 'Connect-Protocol-Version: 1' --data-binary @"$out/start.bin" \
      "http://127.0.0.1:$port/process.Process/Start"
    c1=$(cpu "$spid")
    stop
    awk -v c="$((c1 - c0))" -v t="$tck" 'BEGIN{printf "%.2f\n", c / t}'
  done | median
}

echo "srvh1.sh: ROUNDS=$rounds N1=$n1 N2=$n2 N3=$n3, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| build | transport | unary Ir/call | unary server CPU us/call | stream server CPU s/GiB |"
echo "|---|---|---:|---:|---:|"
for b in before after; do
  eval dir=\$$b
  for tp in h2c h1; do
    if [ $tp = h1 ]; then flag=--http1; cflag=--http1.1; else flag=; cflag=--http2-prior-knowledge; fi
    ir=$(ir_per_call "$dir" "$flag")
    cu=$(cpu_per_call "$dir" "$flag")
    st=$(stream_cpu "$dir" "$cflag")
    echo "| $b | $tp | $ir | $cu | $st |"
  done
done
