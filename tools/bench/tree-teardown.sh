#!/bin/sh
# The client's tree leader (conch/process.h, "Process trees") measured:
# ADR-0019's teardown cases (tests/api/test_teardown.c) against
# `conch serve --signal-pid-only` (envd's way: signals reach the pid
# only), with the leader on (CONCH_TREE=auto, the default) and off, and
# against plain `conch serve` (which signals groups) for reference.  For
# each case: the time from the close to the death of the last marked
# descendant, and the processes left, per run; ROUNDS runs of each mode,
# alternating.  Then the window of the leader's first milliseconds: a
# SendSignal KILL sent at once after the start (api/tree's own cases say
# the rest).
#
#   tools/bench/tree-teardown.sh [BUILD_DIR]     (default: build)
#
# Environment: ROUNDS (default 2).  Needs GNU timeout in PATH (the leader
# does).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
td=$build/tests/api/test_teardown
rounds=${ROUNDS:-2}
[ -x "$td" ] || {
  echo "build first: $td missing (CONCH_BUILD_TESTS)" >&2
  exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The tree cases of the suite (the frozen-server ones measure liveness).
cases="test_break_early test_error_in_chunk_callback
test_cancel_from_another_handle test_closed_during_grace
test_client_killed_during_grace test_trees_plain_and_trapping
test_hundred_handles test_server_killed"
run_mode() { # name args... (the case is appended)
  name=$1
  shift
  : >"$out/$name.$r.lines"
  for c in $cases; do
    "$@" "$c" >"$out/$name.$r.log" 2>&1 || true
    grep -E '^  .*leaks [0-9]' "$out/$name.$r.log" | sed 's/^  //' \
      >>"$out/$name.$r.lines"
  done
}
r=1
while [ "$r" -le "$rounds" ]; do
  echo "round $r/$rounds" >&2
  run_mode groups "$td"
  CONCH_TREE=off run_mode off "$td" pid-only
  CONCH_TREE=auto run_mode on "$td" pid-only
  r=$((r + 1))
done

# One table: case | conch serve | pid-only, leader off | pid-only, leader on.
cell() { # mode case -> "12 ms, 0 left; 14 ms, 0 left"
  r=1
  acc=
  while [ "$r" -le "$rounds" ]; do
    l=$(grep -F -- "$2" "$out/$1.$r.lines" | head -1)
    case $l in
    *"leaks 0, close -> last descendant dead "*)
      v=$(echo "$l" | sed 's/.*dead \([0-9]*\) ms.*/\1 ms/')
      ;;
    *leaks*)
      v=$(echo "$l" | sed 's/.*leaks \([0-9]*\).*/\1 LEFT/')
      ;;
    *) v="-" ;;
    esac
    acc=${acc:+$acc / }$v
    r=$((r + 1))
  done
  echo "$acc"
}
echo "| case | conch serve (groups) | --signal-pid-only, leader off | --signal-pid-only, leader on |"
echo "| --- | --- | --- | --- |"
sed 's/  *leaks.*//' "$out/on.1.lines" | while IFS= read -r c; do
  echo "| $c | $(cell groups "$c") | $(cell off "$c") | $(cell on "$c") |"
done

# The first milliseconds: `conch start` of a tree, then `conch kill -s
# KILL` at once, N times; how many trees were left (the watcher was not
# running yet).
n=${KILLS:-20}
conch=$build/tools/conch/conch
mkfifo "$out/srv"
"$conch" serve --listen 127.0.0.1:0 --no-token --signal-pid-only \
  >"$out/srv" 2>/dev/null </dev/null &
spid=$!
read -r _ port <"$out/srv"
i=0
mark=7794$$
while [ "$i" -lt "$n" ]; do
  pid=$("$conch" --url "http://127.0.0.1:$port" start -- sh -c \
    "sleep 600 $mark$i & sleep 600 $mark$i; true")
  "$conch" --url "http://127.0.0.1:$port" kill -s KILL "$pid" || true
  i=$((i + 1))
done
sleep 3 # the trees that will go are gone by then
left=$(pgrep -f "sleep 600 $mark" | wc -l)
trees=$(pgrep -f "sleep 600 $mark" -a | awk '{print $3}' | sort -u | wc -l)
pkill -KILL -f "sleep 600 $mark" || true
kill "$spid" 2>/dev/null || true
echo
echo "KILL at once after \`conch start\` (CLI to CLI), $n trees: $trees left ($left sleeps)"
