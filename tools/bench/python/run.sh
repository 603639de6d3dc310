#!/bin/sh
# The Python package against python3-grpcio's asyncio client (Debian), on
# the same `conch serve` and the same protocol (gRPC over h2c): N calls from
# one asyncio loop, CONC in flight, unary (List) and stream (Start of
# /bin/true read to its end: run("true")), each client in a process of its
# own.  Client CPU per call (this process's utime + stime, all threads) and
# peak RSS; ROUNDS rounds alternating the two, medians and their ratio.
#
#   tools/bench/python/run.sh [BUILD_DIR]        (default: build)
#
# Environment: N (default 10000), CONC (default 32), ROUNDS (default 3).
# grpcio needs the messages of proto/process/process.proto: generated here
# with Debian's protoc --python_out (python3-protobuf), into a temporary
# directory.
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$top/build}
py=${PYTHON:-/usr/bin/python3}
conch=$build/tools/conch/conch
n=${N:-10000}
conc=${CONC:-32}
rounds=${ROUNDS:-3}
[ -x "$conch" ] && [ -d "$build/bindings/python/conch" ] || {
  echo "build first: $conch or $build/bindings/python missing" >&2
  exit 1
}
out=$(mktemp -d)
cleanup() {
  kill "$spid" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
mkdir "$out/gen"
protoc -I "$top/proto" --python_out="$out/gen" process/process.proto
mkfifo "$out/s"
"$conch" serve --listen 127.0.0.1:0 --no-token >"$out/s" </dev/null &
spid=$!
read -r _ port <"$out/s"
export PYTHONPATH="$build/bindings/python"
for shape in unary stream; do
  for r in $(seq "$rounds"); do
    for lib in conch grpcio; do
      "$py" "$top/tools/bench/python/py_bench.py" "$lib" "127.0.0.1:$port" \
        "$n" "$conc" "$shape" "$out/gen" >>"$out/results"
    done
  done
done
"$py" - "$out/results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'shape':<7} {'client':<7} {'CPU/call':>10} {'wall':>8} {'peak RSS':>10}")
for shape in ("unary", "stream"):
    med = {}
    for lib in ("conch", "grpcio"):
        rs = [r for r in rows if r["shape"] == shape and r["lib"] == lib]
        cpu = statistics.median(r["cpu_us_per_call"] for r in rs)
        wall = statistics.median(r["wall_s"] for r in rs)
        rss = statistics.median(r["maxrss_kib"] for r in rs)
        med[lib] = (cpu, rss)
        print(f"{shape:<7} {lib:<7} {cpu:>8.1f}us {wall:>7.2f}s "
              f"{rss / 1024:>8.1f}MiB")
    print(f"{shape:<7} conch/grpcio: CPU per call {med['conch'][0] / med['grpcio'][0]:.2f}x, "
          f"peak RSS {med['conch'][1] / med['grpcio'][1]:.2f}x "
          f"(n={rows[0]['n']}, {len([r for r in rows if r['shape'] == shape]) // 2} rounds)")
PY
