#!/bin/sh
# The cost per unary call of load balancing (client/balance.c), before and
# after, in one run: conch-bench's unary List (64 in flight) against
# bench-server, instructions per call by callgrind (runs of N1 and N2
# calls, differenced, so start-up does not count; median of ROUNDS).
#
#   tools/bench/lb.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN-lb.md
#
# BEFORE_BUILD: a build of the tree before (e.g. main, built in a second
# build directory); AFTER_BUILD: this tree's.  Rows: before and after with
# the default pool (no policy), and after with CONCH_BENCH_LB=pick_first and
# round_robin (conch-bench: the URL's host:port as the one static target).
# BEFORE_REV names the before build in the output (when it is no git tree,
# e.g. `git archive REV` built elsewhere).  Needs valgrind.
set -eu
before=$1 after=$2
rounds=${ROUNDS:-3}
n1=${N1:-2000} n2=${N2:-6000}
command -v valgrind >/dev/null || { echo "lb.sh: needs valgrind" >&2; exit 1; }
for b in "$before" "$after"; do
  [ -x "$b/tools/bench/conch-bench" ] || {
    echo "lb.sh: build conch-bench in $b first" >&2; exit 1; }
done
out=$(mktemp -d)
srv=
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
mkfifo "$out/srv"
"$after/tools/bench/bench-server" >"$out/srv" </dev/null &
srv=$!
read -r _ port <"$out/srv"
url=http://127.0.0.1:$port

ir_total() {
  sed -n 's/^totals: *\([0-9]*\).*/\1/p; s/^summary: *\([0-9]*\).*/\1/p' "$1" | head -1
}
run() { # build lb protocol count -> total Ir
  CONCH_BENCH_LB=$2 valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" \
    "$1/tools/bench/conch-bench" --protocol "$3" list "$url" 64 "$4" >/dev/null 2>&1
  f=$(find "$out" -name "cg.*" | head -1)
  ir_total "$f"
  rm -f "$out"/cg.*
}
per_call() { # build lb protocol -> median Ir per call
  i=0
  while [ $i -lt "$rounds" ]; do
    a=$(run "$1" "$2" "$3" "$n1")
    b=$(run "$1" "$2" "$3" "$n2")
    awk -v a="$a" -v b="$b" -v n=$((n2 - n1)) 'BEGIN{printf "%.0f\n", (b-a)/n}'
    i=$((i + 1))
  done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

echo "# Load balancing: instructions per unary call, before and after"
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ); before: ${BEFORE_REV:-$(git -C "$before" rev-parse --short HEAD 2>/dev/null || echo "$before")};"
echo "after: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)$(git -C "$(dirname "$0")" diff --quiet HEAD -- ../../runtime 2>/dev/null || echo '+dirty');"
echo "conch-bench list (unary process.Process/List, 64 in flight) against bench-server;"
echo "callgrind, ($n2 - $n1 calls) differenced, median of $rounds rounds."
echo
echo "| protocol | before (no policy) | after (no policy) | x before | after pick_first | x before | after round_robin | x before |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for p in connect grpc; do
  b0=$(per_call "$before" "" $p)
  a0=$(per_call "$after" "" $p)
  a1=$(per_call "$after" pick_first $p)
  a2=$(per_call "$after" round_robin $p)
  awk -v p=$p -v b="$b0" -v a0="$a0" -v a1="$a1" -v a2="$a2" 'BEGIN{
    printf "| %s | %d | %d | %.4f | %d | %.4f | %d | %.4f |\n", p, b, a0, a0/b, a1, a1/b, a2, a2/b }'
done
