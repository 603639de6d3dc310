#!/bin/sh
# What idle connections cost the server core's busy one: conch-bench-server
# from one or two builds, unary calls over one h2c connection (h2load,
# Connect, 64 in flight) while IDLE other connections each hold an idle
# gRPC Start stream (idle_streams.mjs).  A fresh server for each
# measurement.  Two figures:
#   - instructions per call (callgrind, the server's user space: a run of
#     N/10 calls less a run of none, over N/10), deterministic;
#   - calls per server CPU-second (user+sys, kernel included: poll() is
#     O(descriptors) in any poll-mode server), median of ROUNDS rounds.
# A benchmark, not a test.
#
#   tools/bench/idle_conns.sh BUILD_DIR [BASE_BUILD_DIR] > results/NNN-x.md
#
# Environment: ROUNDS (3), N (100000), IDLE ("0 250 1000"; under the
# server's connection limit, 1024 by default, and the open-files limit).
# Needs h2load (nghttp2-client), valgrind and node with tests/node_modules.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
builds="$1${2:+ $2}"
rounds=${ROUNDS:-3}
n=${N:-100000}
idles=${IDLE:-0 250 1000}
for t in h2load valgrind node; do
  command -v $t >/dev/null || {
    echo "idle_conns.sh: needs h2load, valgrind and node" \
      "(apt-get install nghttp2-client valgrind nodejs)" >&2
    exit 1; }
done

out=$(mktemp -d)
pid= cl=
cleanup() {
  [ -n "$cl" ] && kill "$cl" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
tck=$(getconf CLK_TCK)
cpu_ticks() { sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}'; }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

start_server() { # build dir [wrapper...]; sets pid and port
  bdir=$1
  shift
  : >"$out/srv"
  "$@" "$bdir/tools/bench/conch-bench-server" >"$out/srv" 2>"$out/srv.err" \
    </dev/null &
  pid=$!
  port= i=0
  while [ -z "$port" ]; do # generous: valgrind starts slowly
    [ $i -lt 1200 ] || { echo "idle_conns.sh: the server did not start" >&2; exit 1; }
    sleep 0.1
    i=$((i + 1))
    port=$(sed -n 's/^LISTENING //p' "$out/srv")
  done
}
stop_server() { kill "$pid"; wait "$pid" || true; pid=; }

h2() { # calls; checks every answer
  h2load -n "$1" -c 1 -m 64 -H :method:POST -H content-type:application/proto \
    -H connect-protocol-version:1 "http://127.0.0.1:$port/process.Process/List" \
    >"$out/h2" 2>&1 || true
  ok=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' "$out/h2")
  [ "$ok" = "$1" ] || { echo "idle_conns.sh: $ok of $1 calls succeeded" >&2;
    cat "$out/h2" >&2; exit 1; }
}

open_idle() { # count
  [ "$1" -gt 0 ] || return 0
  mkfifo "$out/hold"
  node "$top/tools/bench/idle_streams.mjs" "http://127.0.0.1:$port" \
    "$1" "$1" grpc <"$out/hold" >"$out/idle" 2>/dev/null &
  cl=$!
  exec 3>"$out/hold"
  i=0
  until grep -q '^OPEN' "$out/idle"; do
    kill -0 "$cl" 2>/dev/null && [ $i -lt 3000 ] || {
      echo "idle_conns.sh: $1 idle streams did not open" >&2; exit 1; }
    sleep 0.1
    i=$((i + 1))
  done
}
close_idle() {
  [ -n "$cl" ] || return 0
  exec 3>&-
  wait "$cl" || true
  cl=
  rm -f "$out/hold"
}

# callgrind's total for a server that served |calls| calls.
ir_of() { # build idle calls
  start_server "$1" valgrind --tool=callgrind --callgrind-out-file="$out/cg"
  open_idle "$2"
  [ "$3" -eq 0 ] || h2 "$3"
  kill -INT "$pid"
  wait "$pid" || true
  pid=
  close_idle
  awk '$1 == "summary:" || $1 == "totals:" {print $2; exit}' "$out/cg"
}

ncg=$((n / 10))
b=0
for bd in $builds; do
  b=$((b + 1))
  for k in $idles; do
    i0=$(ir_of "$bd" "$k" 0)
    i1=$(ir_of "$bd" "$k" "$ncg")
    echo $(((i1 - i0) / ncg)) >"$out/$b-$k-ir"
  done
done
nb=$b

for r in $(seq "$rounds"); do
  b=0
  for bd in $builds; do
    b=$((b + 1))
    for k in $idles; do
      start_server "$bd"
      open_idle "$k"
      h2 2000 # warm-up
      c0=$(cpu_ticks)
      h2 "$n"
      c1=$(cpu_ticks)
      awk -v n="$n" -v t=$((c1 - c0)) -v k="$tck" \
        'BEGIN {printf "%.0f\n", (t > 0 ? n * k / t : 0)}' >>"$out/$b-$k"
      close_idle
      stop_server
    done
  done
done

head_row() {
  line="| idle connections |"
  sep="|---|"
  b=0
  for bd in $builds; do
    b=$((b + 1))
    line="$line build $b |"
    sep="$sep---|"
  done
  if [ "$nb" -gt 1 ]; then
    line="$line 2 / 1 |"
    sep="$sep---|"
  fi
  echo "$line"
  echo "$sep"
}
row() { # idle suffix
  a=$(median <"$out/1-$1$2")
  line="| $1 | $a |"
  if [ "$nb" -gt 1 ]; then
    c=$(median <"$out/2-$1$2")
    r=$(awk -v a="$a" -v c="$c" 'BEGIN {if (a > 0) printf "%.2f", c / a; else print "n/a"}')
    line="$line $c | $r |"
  fi
  echo "$line"
}

rev="$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet HEAD -- runtime tools/bench || echo '+dirty')"
echo "# Idle connections and the busy one: conch's server core"
echo
echo "Run by \`tools/bench/idle_conns.sh\` at $rev, $(date -u '+%Y-%m-%d %H:%M UTC'),"
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared machine)."
echo "Load: h2load, unary Connect List calls over one h2c connection, 64 in"
echo "flight, while IDLE other h2c connections each hold an idle gRPC Start"
echo "stream (conch-bench-server: conch_server_run, poll)."
echo
echo "Server instructions per call (callgrind, $ncg calls less none):"
echo
head_row
for k in $idles; do row "$k" -ir; done
echo
echo "Calls per server CPU-second (user+sys, $n calls, median of $rounds rounds):"
echo
head_row
for k in $idles; do row "$k" ""; done
echo
b=0
for bd in $builds; do
  b=$((b + 1))
  echo "Build $b: \`$bd\` ($(git -C "$bd/.." rev-parse --short HEAD 2>/dev/null || echo '?'))."
done
