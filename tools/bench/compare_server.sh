#!/bin/sh
# Compares servers under one load generator, in one run: conch's server core
# (conch-bench-server), connect-node (node_bench_server.mjs, Node's http2)
# and gRPC C++ (grpc-bench-server, callback API; skipped when not built).
# A benchmark, not a test.
#
#   tools/bench/compare_server.sh [BUILD_DIR] > tools/bench/results/NNN-name.md
#
# Each server answers process.Process/List with the same canned 485-byte
# ListResponse (bench-server's) and process.Process/Start with one event,
# then keeps the stream open and idle.  Measures, medians of ROUNDS rounds,
# a fresh server process for each measurement:
#   - unary: h2load, N calls of List, CONNS connections, 64 in flight each,
#     Connect (application/proto) and gRPC; every response checked (2xx,
#     the expected data bytes).  Requests per server CPU-second (the
#     server's user+sys, all its threads, from /proc/PID/stat before and
#     after, after a warm-up of 2,000 calls) and the server's peak RSS
#     (VmHWM) after both runs;
#   - the same with our client as the load (conch-bench list, gRPC, 64 in
#     flight, N/2 calls; it checks every response): gRPC calls per server
#     CPU-second;
#   - idle streams: IDLE gRPC Start streams over IDLE_CONNS connections
#     (idle_streams.mjs), each with its first message; the server's VmRSS
#     after minus before (fresh server, nothing served yet), per stream;
#     the same with Connect streams (application/connect+proto) for the
#     servers that speak Connect.
# Environment: ROUNDS (3), N (200000), CONNS (1), IDLE (1000),
# IDLE_CONNS (10).
# Needs h2load (nghttp2-client) and node with the test peers' packages
# (tests/node_modules).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
bd=$build/tools/bench
rounds=${ROUNDS:-3}
n=${N:-200000}
conns=${CONNS:-1}
idle=${IDLE:-1000}
idle_conns=${IDLE_CONNS:-10}
# Each tool with the Debian 12 package that has it (h2load is not
# installed by scripts/setup.sh: no test needs it).
missing=
for t in h2load:nghttp2-client node:nodejs; do
  command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
if [ -n "$missing" ]; then
  echo "compare_server.sh: needs h2load and node; install them with:" \
    "apt-get install$missing" >&2
  exit 1
fi
[ -x "$bd/conch-bench-server" ] && [ -x "$bd/conch-bench" ] || {
  echo "compare_server.sh: build conch-bench-server and conch-bench first" \
    "(a build with CONCH_BUILD_TESTS and CONCH_WITH_SERVER)" >&2
  exit 1; }
[ -d "$top/tests/node_modules/@connectrpc/connect-node" ] || {
  echo "compare_server.sh: tests/node_modules missing (scripts/setup.sh)" >&2; exit 1; }
servers="conch node"
[ -x "$bd/grpc-bench-server" ] && servers="$servers grpc"

rev="$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet HEAD -- runtime tools/bench || echo '+dirty')"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

out=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
"$bd/conch-bench-server" --write-list "$out/list.bin"
printf '\000\000\000\000\000' >"$out/grpc-list"
tck=$(getconf CLK_TCK)

start_server() { # name; sets pid and port
  case $1 in
  conch) set -- "$bd/conch-bench-server" ;;
  node) set -- node "$top/tools/bench/node_bench_server.mjs" "$out/list.bin" ;;
  grpc) set -- "$bd/grpc-bench-server" "$out/list.bin" ;;
  esac
  : >"$out/srv"
  "$@" >"$out/srv" </dev/null &
  pid=$!
  port= i=0
  while [ -z "$port" ]; do # generous: a loaded machine starts Node slowly
    [ $i -lt 600 ] || { echo "compare_server.sh: $1 did not start" >&2; exit 1; }
    sleep 0.1
    i=$((i + 1))
    port=$(sed -n 's/^LISTENING //p' "$out/srv")
  done
}
stop_server() {
  kill "$pid"
  wait "$pid" || true
  pid=
}
cpu_ticks() { sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}'; }
status_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }

# h2load: protocol count; checks every answer, prints the wall req/s.
h2() {
  url=http://127.0.0.1:$port/process.Process/List
  case $1 in
  connect) h2load -n "$2" -c "$conns" -m 64 -H :method:POST \
      -H content-type:application/proto -H connect-protocol-version:1 \
      "$url" >"$out/h2" 2>&1 || true
    want=$(($2 * 485)) ;;
  grpc) h2load -n "$2" -c "$conns" -m 64 -d "$out/grpc-list" \
      -H content-type:application/grpc -H te:trailers \
      "$url" >"$out/h2" 2>&1 || true
    want=$(($2 * 490)) ;;
  esac
  ok=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' "$out/h2")
  got=$(sed -n 's/^traffic: .*(\([0-9]*\)) data.*/\1/p' "$out/h2")
  if [ "$ok" != "$2" ] || [ "$got" != "$want" ]; then
    echo "compare_server.sh: $1 load failed: $ok of $2 succeeded, $got of $want data bytes" >&2
    cat "$out/h2" >&2
    exit 1
  fi
  sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$out/h2"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

for r in $(seq "$rounds"); do
  for s in $servers; do
    protos="connect grpc"
    [ "$s" = grpc ] && protos=grpc
    start_server "$s"
    h2 "${protos%% *}" 2000 >/dev/null # warm-up (Node's JIT)
    for p in $protos; do
      c0=$(cpu_ticks)
      rps=$(h2 "$p" "$n")
      c1=$(cpu_ticks)
      awk -v n="$n" -v t=$((c1 - c0)) -v k="$tck" \
        'BEGIN {printf "%.0f\n", (t > 0 ? n * k / t : 0)}' >>"$out/$s-$p-cpu"
      echo "$rps" >>"$out/$s-$p-rps"
    done
    nc=$((n / 2))
    c0=$(cpu_ticks)
    "$bd/conch-bench" --protocol grpc list "http://127.0.0.1:$port" 64 "$nc" \
      >"$out/cb" || true
    c1=$(cpu_ticks)
    grep -q "\"calls\":$nc,\"errors\":0," "$out/cb" || {
      echo "compare_server.sh: conch-bench against $s failed" >&2
      cat "$out/cb" >&2
      exit 1
    }
    awk -v n="$nc" -v t=$((c1 - c0)) -v k="$tck" \
      'BEGIN {printf "%.0f\n", (t > 0 ? n * k / t : 0)}' >>"$out/$s-cb-cpu"
    status_kb VmHWM >>"$out/$s-hwm"
    stop_server

    for ip in grpc connect; do
      [ "$s" = grpc ] && [ "$ip" = connect ] && continue
      start_server "$s"
      rss0=$(status_kb VmRSS)
      mkfifo "$out/hold"
      node "$top/tools/bench/idle_streams.mjs" "http://127.0.0.1:$port" \
        "$idle" "$idle_conns" "$ip" <"$out/hold" >"$out/idle" &
      cl=$!
      exec 3>"$out/hold"
      i=0
      until grep -q '^OPEN' "$out/idle"; do
        kill -0 "$cl" 2>/dev/null && [ $i -lt 1200 ] || {
          echo "compare_server.sh: $s: idle $ip streams did not open" >&2; exit 1; }
        sleep 0.1
        i=$((i + 1))
      done
      sleep 1 # let the server finish its turn
      rss1=$(status_kb VmRSS)
      exec 3>&-
      wait "$cl" || true
      rm -f "$out/hold"
      f=$s-idle
      [ "$ip" = connect ] && f=$s-idle-connect
      echo $(((rss1 - rss0) * 1024 / idle)) >>"$out/$f"
      stop_server
    done
  done
done

m() { if [ -s "$out/$1" ]; then median <"$out/$1"; else echo n/a; fi; }
ratio() { # conch over other (higher is better for conch when $3 = up)
  a=$(m "$1") b=$(m "$2")
  case "$a$b" in *n/a*) echo n/a; return ;; esac
  awk -v a="$a" -v b="$b" 'BEGIN {if (b > 0 && a > 0) printf "%.2f", a / b; else print "n/a"}'
}
name() { case $1 in conch) echo "conch server core" ;; node) echo "connect-node" ;; grpc) echo "gRPC C++ (callback)" ;; esac; }

cat <<EOF2
# Server benchmark: conch's server core vs connect-node vs gRPC C++

Run by \`tools/bench/compare_server.sh\` at $rev, $(date -u '+%Y-%m-%d %H:%M UTC').
Machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1),
Linux $(uname -r), load average at start $load0 (the machine is shared).
Versions: node $(node --version), connect-node $(sed -n 's/^  "version": "\(.*\)",/\1/p' "$top/tests/node_modules/@connectrpc/connect-node/package.json"),
gRPC++ $(pkg-config --modversion grpc++ 2>/dev/null || echo n/a), $(h2load --version 2>/dev/null | head -1).

Load: h2load, unary process.Process/List (empty request, 485-byte response),
$conns connection(s), 64 in flight on each, $n calls per protocol after a 2,000-call
warm-up; every answer checked (2xx and the expected data bytes); then
$((n / 2)) gRPC calls from conch-bench (our client, 64 in flight, every
response decoded and checked).  Peak RSS after all three loads.  Idle:
$idle gRPC process.Process/Start streams over $idle_conns connections, each
with its first message, held open (tools/bench/idle_streams.mjs); server
VmRSS after minus before, fresh server; the same with Connect streams
(application/connect+proto; gRPC C++ speaks no Connect).  Medians of $rounds rounds.  CPU is
the server process's user+sys (all threads), $tck ticks a second.

| server | Connect calls / CPU-s | gRPC calls / CPU-s | gRPC calls / CPU-s, conch-bench load | Connect req/s (wall) | gRPC req/s (wall) | peak RSS (KiB) | bytes / idle gRPC stream | bytes / idle Connect stream |
|---|---|---|---|---|---|---|---|---|
EOF2
for s in $servers; do
  echo "| $(name $s) | $(m $s-connect-cpu) | $(m $s-grpc-cpu) | $(m $s-cb-cpu) | $(m $s-connect-rps) | $(m $s-grpc-rps) | $(m $s-hwm) | $(m $s-idle) | $(m $s-idle-connect) |"
done
cat <<EOF2

Ratios, same run (calls per CPU-second: higher is better for conch above 1;
memory: lower is better for conch below 1):

| conch over | Connect calls / CPU-s | gRPC calls / CPU-s | gRPC, conch-bench load | peak RSS | bytes / idle gRPC stream | bytes / idle Connect stream |
|---|---|---|---|---|---|---|
| connect-node | $(ratio conch-connect-cpu node-connect-cpu) | $(ratio conch-grpc-cpu node-grpc-cpu) | $(ratio conch-cb-cpu node-cb-cpu) | $(ratio conch-hwm node-hwm) | $(ratio conch-idle node-idle) | $(ratio conch-idle-connect node-idle-connect) |
EOF2
[ -x "$bd/grpc-bench-server" ] &&
  echo "| gRPC C++ | n/a (gRPC only) | $(ratio conch-grpc-cpu grpc-grpc-cpu) | $(ratio conch-cb-cpu grpc-cb-cpu) | $(ratio conch-hwm grpc-hwm) | $(ratio conch-idle grpc-idle) | n/a (gRPC only) |"
exit 0
