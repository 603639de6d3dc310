#!/bin/sh
# The server's response compression, for two builds (before and after a
# change), in one run.  A benchmark, not a test.
#
#   tools/bench/srvgzip.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# - unary: instructions per call of conch-bench-server (callgrind's total,
#   the difference between a run of N2 and one of N1 calls, so that start
#   and connection set-up drop out) for process.Process/List (Connect,
#   application/proto, 485-byte response, 16 in flight, h2c), driven by
#   conch-bench list, whose client offers gzip as every conch client does;
#   and calls per server CPU-second under the same load (no valgrind,
#   /proc/PID/stat, N3 calls after 2,000 to warm up, median of ROUNDS);
#   the after build also with --compress-min 0 (every response compressed,
#   the before build's default);
# - per message: instructions to compress one message of each of SIZES
#   bytes with each built-in compression the builds have (comp-bench, a run
#   of C2 minus one of C1 messages through one context, as the server
#   keeps them), and the compressed size.
# Environment: ROUNDS (3), N1 (1000), N2 (6000), N3 (100000), C1 (50),
# C2 (250), SIZES ("64 485 1024 4096 16384 65536"), CODECS ("gzip deflate
# zstd br snappy").
# Needs valgrind.
set -eu
before=$1
after=$2
rounds=${ROUNDS:-3}
n1=${N1:-1000}
n2=${N2:-6000}
n3=${N3:-100000}
c1=${C1:-50}
c2=${C2:-250}
sizes=${SIZES:-64 485 1024 4096 16384 65536}
codecs=${CODECS:-gzip deflate zstd br snappy}
. "$(dirname "$0")/peer.sh"

ir_run() { # build "server flags" calls -> total Ir
  start valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench-server" $2
  "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$3" \
    >/dev/null
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
ir_per_call() { # build [server flags]
  per_unit "$n1" "$n2" ir_run "$1" "${2:-}"
}
calls_per_cpu_s() { # build [server flags]
  for r in $(seq "$rounds"); do
    start "$1/tools/bench/conch-bench-server" ${2:-}
    "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 2000 \
      >/dev/null
    c0=$(cpu "$spid")
    "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$n3" \
      >/dev/null
    c1=$(cpu "$spid")
    stop
    awk -v c="$((c1 - c0))" -v t="$tck" -v n="$n3" \
      'BEGIN{printf "%.0f\n", n / (c / t)}'
  done | median
}
comp_ir() { # build codec size count -> total Ir
  valgrind --tool=callgrind --callgrind-out-file="$out/cgc" \
    "$1/tests/perf/comp-bench" "$2" "$3" "$4" >"$out/zlen" 2>/dev/null
  sed -n 's/^summary: *//p' "$out/cgc"
}
comp_row() { # build codec size -> "Ir/msg | bytes"
  a=$(comp_ir "$1" "$2" "$3" "$c1")
  b=$(comp_ir "$1" "$2" "$3" "$c2")
  awk -v a="$a" -v b="$b" -v n1="$c1" -v n2="$c2" -v z="$(cat "$out/zlen")" \
    'BEGIN{printf "%.0f | %s", (b - a) / (n2 - n1), z}'
}

echo "srvgzip.sh: ROUNDS=$rounds N1=$n1 N2=$n2 N3=$n3 C1=$c1 C2=$c2, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## Unary List (485-byte response), client offering gzip, h2c"
echo
echo "| build | server Ir/call | server calls per CPU-s |"
echo "|---|---:|---:|"
for b in before after; do
  eval dir=\$$b
  echo "| $b | $(ir_per_call "$dir") | $(calls_per_cpu_s "$dir") |"
done
f="--compress-min 0"
echo "| after, $f | $(ir_per_call "$after" "$f") | $(calls_per_cpu_s "$after" "$f") |"
echo
echo "## One message compressed (comp-bench): instructions per message, compressed bytes"
echo
echo "| codec | bytes | before Ir | before out | after Ir | after out |"
echo "|---|---:|---:|---:|---:|---:|"
for c in $codecs; do
  for s in $sizes; do
    if ! "$before/tests/perf/comp-bench" "$c" 1 1 >/dev/null 2>&1; then
      continue # not in this build
    fi
    echo "| $c | $s | $(comp_row "$before" "$c" "$s") | $(comp_row "$after" "$c" "$s") |"
  done
done
