#!/bin/sh
# Benchmarks `conch serve` next to a peer measured in the same run: the
# envd-like process.Process server on connect-node (tests/api/node), with
# the same client (serve-bench, conch's commands API) and the same
# workloads.  Each pair runs ROUNDS times, alternating; median ratios are
# printed, since the machine is shared and noisy.  Server CPU is the
# server process's own (utime + stime from /proc, its children excluded).
#
#   tools/bench/serve.sh [BUILD_DIR]     (default: build)
#
# Environment: ROUNDS (default 3), BYTES (default 1073741824), SPAWN
# (default 500), CONC (default 50).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
bench=$build/tools/bench/serve-bench
conch=$build/tools/conch/conch
rounds=${ROUNDS:-3}
bytes=${BYTES:-1073741824}
spawn=${SPAWN:-500}
conc=${CONC:-50}

[ -x "$bench" ] && [ -x "$conch" ] || {
  echo "build first: $bench or $conch missing" >&2
  exit 1
}
out=$(mktemp -d)
cleanup() {
  kill "$cpid" "$npid" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT INT TERM

mkfifo "$out/c" "$out/n"
"$conch" serve --listen 127.0.0.1:0 --no-token >"$out/c" </dev/null &
cpid=$!
read -r _ cport <"$out/c"
node "$top/tests/api/node/server.mjs" --port 0 >"$out/n" </dev/null &
npid=$!
read -r _ nport <"$out/n"
echo "servers: conch serve on $cport (pid $cpid), connect-node on $nport (pid $npid)"

field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# CPU seconds the server itself has used.
cpu() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

measure() { # pid port workload-args... -> "rate cpu_per_unit"
  pid=$1
  port=$2
  shift 2
  c0=$(cpu "$pid")
  "$bench" "$1" "http://127.0.0.1:$port" "$2" ${3:+"$3"} >"$out/r.json"
  c1=$(cpu "$pid")
  if [ "$1" = output ]; then unit=bytes; else unit=calls; fi
  awk -v a="$(field "$out/r.json" $unit)" -v s="$(field "$out/r.json" seconds)" \
    -v c0="$c0" -v c1="$c1" 'BEGIN{print a/s, (c1-c0)/a}'
}

run_pair() { # name unit workload-args...
  name=$1
  unit=$2
  shift 2
  : >"$out/rate"
  : >"$out/cpu"
  i=0
  while [ "$i" -lt "$rounds" ]; do
    set -- $(measure "$cpid" "$cport" "$@") "$@"
    cr=$1 cc=$2
    shift 2
    set -- $(measure "$npid" "$nport" "$@") "$@"
    nr=$1 nc=$2
    shift 2
    echo "  round $((i + 1)): conch serve $cr $unit/s, connect-node $nr $unit/s;" \
      "server CPU per unit: conch serve $cc s, connect-node $nc s"
    awk -v a="$cr" -v b="$nr" 'BEGIN{print a/b}' >>"$out/rate"
    awk -v a="$nc" -v b="$cc" 'BEGIN{print (b > 0 ? a/b : 0)}' >>"$out/cpu"
    i=$((i + 1))
  done
  echo "$name: throughput conch serve/connect-node = $(median <"$out/rate")x," \
    "server CPU per unit connect-node/conch serve = $(median <"$out/cpu")x"
}

echo "one process writing $bytes bytes to stdout, read through conch_stream():"
run_pair output bytes output "$bytes"
echo "$spawn runs of /bin/true, $conc at a time:"
run_pair spawn runs spawn "$spawn" "$conc"
echo "peak RSS: conch serve $(hwm "$cpid") KiB, connect-node $(hwm "$npid") KiB"
