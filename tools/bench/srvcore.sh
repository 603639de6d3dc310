#!/bin/sh
# Where the server core stands against issue 26's server targets, for one
# build.  A benchmark, not a test.
#
#   tools/bench/srvcore.sh [BUILD_DIR] > tools/bench/results/NNN.md
#
# The server is conch-bench-server (conch_server_run, poll, h2c); the load
# is conch-bench (whose client offers gzip, as every conch client does) or
# h2load (which offers nothing):
#   - unary process.Process/List (Connect, application/proto, 485-byte
#     response), 16 in flight (conch-bench) or 64 (h2load, one
#     connection): the server's instructions per call (callgrind's total,
#     a run of N2 calls minus one of N1, so start-up drops out) and calls
#     per server CPU-second (no valgrind, /proc/PID/stat, N3 calls after
#     2,000 to warm up, median of ROUNDS);
#   - a server stream of 64-byte DataEvents (process.Process/Start of
#     "bench" E 64, conch-bench bulk), Connect and gRPC: the server's
#     instructions per event (a stream of E2 events minus one of E1).
# Environment: ROUNDS (3), N1 (1000), N2 (6000), N3 (100000), E1 (2000),
# E2 (12000).  Needs valgrind and h2load (nghttp2-client).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
bd=$build/tools/bench
rounds=${ROUNDS:-3}
n1=${N1:-1000}
n2=${N2:-6000}
n3=${N3:-100000}
e1=${E1:-2000}
e2=${E2:-12000}
for t in valgrind h2load; do
  command -v "$t" >/dev/null || {
    echo "srvcore.sh: needs valgrind and h2load (apt-get install valgrind" \
      "nghttp2-client)" >&2
    exit 1
  }
done
. "$(dirname "$0")/peer.sh"

load() { # client calls -> runs it against $port
  case $1 in
  conch) "$bd/conch-bench" list "http://127.0.0.1:$port" 16 "$2" >/dev/null ;;
  h2load) h2load -n "$2" -c 1 -m 64 -H :method:POST \
    -H content-type:application/proto -H connect-protocol-version:1 \
    "http://127.0.0.1:$port/process.Process/List" >"$out/h2load.txt"
    grep -q " 0 failed, 0 errored" "$out/h2load.txt" || {
      echo "srvcore.sh: h2load saw errors" >&2
      exit 1
    } ;;
  esac
}
ir_run() { # client calls -> the server's total Ir
  start valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$bd/conch-bench-server"
  load "$1" "$2"
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
calls_per_cpu_s() { # client
  for r in $(seq "$rounds"); do
    start "$bd/conch-bench-server"
    load "$1" 2000
    c0=$(cpu "$spid")
    load "$1" "$n3"
    c1=$(cpu "$spid")
    stop
    awk -v n="$n3" -v c="$((c1 - c0))" -v t="$tck" \
      'BEGIN{printf "%.0f\n", (c > 0 ? n * t / c : 0)}'
  done | median
}
events_run() { # protocol events -> the server's total Ir
  start valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$bd/conch-bench-server"
  "$bd/conch-bench" --protocol "$1" bulk "http://127.0.0.1:$port" "$2" 64 \
    >"$out/bulk.json"
  stop
  grep -q '"errors":0' "$out/bulk.json" || {
    echo "srvcore.sh: the event stream failed: $(cat "$out/bulk.json")" >&2
    exit 1
  }
  sed -n 's/^summary: *//p' "$out/cg"
}

rev="$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet HEAD -- runtime tools/bench || echo '+dirty')"
echo "srvcore.sh: $build ($rev), $(date -u +%FT%RZ), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg);"
echo "N1=$n1 N2=$n2 N3=$n3 E1=$e1 E2=$e2 ROUNDS=$rounds"
echo
echo "| load | server Ir per List call | server List calls per CPU-s |"
echo "|---|---:|---:|"
for c in conch h2load; do
  echo "| $c | $(per_unit "$n1" "$n2" ir_run "$c") | $(calls_per_cpu_s "$c") |"
done
echo
echo "| protocol | server Ir per 64-byte stream event |"
echo "|---|---:|"
for p in connect grpc; do
  echo "| $p | $(per_unit "$e1" "$e2" events_run "$p") |"
done
