#!/bin/sh
# Runs conch's benchmarks next to a peer measured in the same run: a
# connect-node client doing the same work against the same connect-node
# server (tests/interop/node).  Figures are reported as ratios, since the
# machine is shared and noisy; each pair runs ROUNDS times, alternating, and
# the median ratio is printed.
#
#   tools/bench/run.sh [BUILD_DIR]     (default: build)
#
# Environment: ROUNDS (default 3), SECS (default 5), CONC (default 64).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
bench=$build/tools/bench/conch-bench
peer=$top/tests/interop/node/bench-client.mjs
rounds=${ROUNDS:-3}
secs=${SECS:-5}
conc=${CONC:-64}

[ -x "$bench" ] || { echo "build first: $bench missing" >&2; exit 1; }
out=$(mktemp -d)
trap 'kill "$srv" 2>/dev/null; rm -rf "$out"' EXIT INT TERM
mkfifo "$out/srv"
node "$top/tests/interop/node/server.mjs" >"$out/srv" </dev/null &
srv=$!
read -r _ port <"$out/srv"
url=http://127.0.0.1:$port
echo "server: connect-node on $url (pid $srv)"

field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1"; }

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

run_pair() { # name conch-args... -- peer-args...
  name=$1
  shift
  i=0
  : >"$out/$name.ratios_rate"
  : >"$out/$name.ratios_cpu"
  while [ "$i" -lt "$rounds" ]; do
    "$bench" "$@" >"$out/c.json"
    node "$peer" "$@" >"$out/p.json"
    if [ "$1" = unary ]; then unit=calls; else unit=bytes; fi
    cr=$(awk -v a="$(field "$out/c.json" $unit)" -v s="$(field "$out/c.json" seconds)" 'BEGIN{print a/s}')
    pr=$(awk -v a="$(field "$out/p.json" $unit)" -v s="$(field "$out/p.json" seconds)" 'BEGIN{print a/s}')
    cc=$(awk -v c="$(field "$out/c.json" cpu_seconds)" -v a="$(field "$out/c.json" $unit)" 'BEGIN{print c/a}')
    pc=$(awk -v c="$(field "$out/p.json" cpu_seconds)" -v a="$(field "$out/p.json" $unit)" 'BEGIN{print c/a}')
    echo "  round $((i+1)): conch $cr $unit/s, peer $pr $unit/s; client CPU per unit: conch $cc s, peer $pc s"
    awk -v a="$cr" -v b="$pr" 'BEGIN{print a/b}' >>"$out/$name.ratios_rate"
    awk -v a="$pc" -v b="$cc" 'BEGIN{print a/b}' >>"$out/$name.ratios_cpu"
    i=$((i+1))
  done
  echo "$name: throughput conch/peer = $(median <"$out/$name.ratios_rate")x, client CPU per unit peer/conch = $(median <"$out/$name.ratios_cpu")x"
}

echo "unary, $conc in flight, 64-byte payloads, ${secs}s:"
run_pair unary unary "$url" "$conc" "$secs" 64
echo "one server stream of 64 KiB messages, ${secs}s:"
run_pair stream stream "$url" "$secs" 65536
echo "memory per idle open stream (conch only; the peer's is a Node heap):"
"$bench" idle "$url" 1000 | sed 's/^/  /'
