#!/bin/bash
# The CLI's signal cases against `conch serve --signal-pid-only` (envd's
# way: signals reach the pid only), where the client's tree leader ends
# whole trees (conch/process.h, "Process trees"): Ctrl-C and the other
# terminal signals on `conch run`, `conch kill`, a lifetime; exit codes
# and `conch ps` as without it; and the same with CONCH_TREE=off leaving
# the children (what the leader is for).  Checked in /proc.
#
#   test_tree.sh /path/to/conch
set -u
CONCH=$1
. "$(dirname "$0")/../support/wait.sh"
fails=0
tmp=$(mktemp -d)
trap 'kill "$srv" 2>/dev/null; pkill -KILL -f "$tag" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
unset CONCH_TREE

check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    fails=$((fails + 1))
  fi
}

# Live processes whose command line holds $1 (zombies not counted).
marked() {
  n=0
  for d in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -q -- "$1" || continue
    grep -q '^State:.*Z' "$d/status" 2>/dev/null && continue
    n=$((n + 1))
  done
  echo "$n"
}
# A mark of this run (so that two runs at once do not count each other's).
tag=7793$$
some_marked() { [ "$(marked "$1")" -ge "$2" ]; }
none_marked() { [ "$(marked "$1")" = 0 ]; }
# "0" once every process marked $1 is gone (within the wait limit), else
# how many are left.
left() {
  wait_until "$CONCH_WAIT_S" none_marked "$1"
  marked "$1"
}

mkfifo "$tmp/srv"
"$CONCH" serve --listen 127.0.0.1:0 --no-token --signal-pid-only \
  >"$tmp/srv" 2>"$tmp/srv.err" </dev/null &
srv=$!
read -r _ port <"$tmp/srv"
U="--url http://127.0.0.1:$port"
echo "server (--signal-pid-only) on $port"

# Exit codes and deaths by signal as without the leader.
for c in 0 1 126 127 128 129 130 143 255; do
  "$CONCH" $U run -- sh -c "exit $c"
  check "exit $c -> $c" "$c" "$?"
done
"$CONCH" $U run -- sh -c 'kill -9 $$' 2>/dev/null
check "killed by signal 9 -> 137" "137" "$?"
"$CONCH" $U run -- sh -c 'ulimit -c 0; kill -SEGV $$' 2>/dev/null
check "SIGSEGV -> 139" "139" "$?"
"$CONCH" $U run -- conch-no-such-command 2>"$tmp/err"
check "unknown command -> 127" "127" "$?"
check "unknown command: the shell's message" "--: 1: exec: conch-no-such-command: not found" "$(cat "$tmp/err")"
out=$(echo piped | "$CONCH" $U run --stdin -- cat)
check "stdin" "piped" "$out"

# conch ps shows the command as given.
m=${tag}01
pid=$("$CONCH" $U start -- sleep 600 "$m")
"$CONCH" $U ps >"$tmp/ps"
check "ps shows the command" "1" "$(grep -c "^$pid *- *sleep 600 $m\$" "$tmp/ps")"
"$CONCH" $U kill "$pid"
check "kill (KILL)" "0" "$?"
check "kill leaves nothing" "0" "$(left "$m")"

# Every signal a terminal user sends on `conch run` of a tree: the CLI
# exits 128 + N and no descendant is left.
i=0
for sig in INT QUIT TERM HUP; do
  i=$((i + 1))
  m=${tag}1$i
  "$CONCH" $U run -- sh -c "sleep 600 $m & sleep 600 $m; true" &
  runner=$!
  wait_until "$CONCH_WAIT_S" some_marked "sleep 600 $m" 2
  check "$sig: the tree started" "yes" \
    "$(some_marked "sleep 600 $m" 2 && echo yes)"
  kill "-$sig" "$runner"
  wait "$runner"
  code=$?
  case $sig in
  INT) want=130 ;;
  QUIT) want=131 ;;
  TERM) want=143 ;;
  HUP) want=129 ;;
  esac
  check "run interrupted by $sig exits $want" "$want" "$code"
  check "run interrupted by $sig leaves 0 sleeps" "0" "$(left "$m")"
done

# conch kill of a tree, TERM and KILL; a TERM-trapping grandchild.
k=0
for s in TERM KILL; do
  k=$((k + 1))
  m=${tag}2$k # a number: sleep adds up its operands
  pid=$("$CONCH" $U start -- sh -c "sleep 600 $m & (sleep 600 $m & wait) & sleep 600 $m; true")
  wait_until "$CONCH_WAIT_S" some_marked "sleep 600 $m" 3
  "$CONCH" $U kill --signal "$s" "$pid"
  check "kill --signal $s" "0" "$?"
  check "kill --signal $s leaves nothing" "0" "$(left "$m")"
done
m=${tag}30
pid=$("$CONCH" $U start -- sh -c "(trap '' TERM; sleep 600 $m; : $m) & sleep 600 $m; true")
wait_until "$CONCH_WAIT_S" some_marked "sleep 600 $m" 2
"$CONCH" $U kill --signal TERM "$pid"
check "a TERM-trapping grandchild outlives the TERM" "yes" \
  "$(some_marked "sleep 600 $m" 1 && echo yes)"
check "... and not the grace" "0" "$(left "$m")"

# A lifetime: the server KILLs the pid; the tree goes with it.
m=${tag}40
"$CONCH" $U --timeout 1 run -- sh -c "sleep 600 $m & sleep 600 $m; true" 2>/dev/null
check "lifetime: 124" "124" "$?"
check "lifetime leaves nothing" "0" "$(left "$m")"

# Without the leader the same Ctrl-C leaves both sleeps: envd's way.
m=${tag}50
CONCH_TREE=off "$CONCH" $U run -- sh -c "sleep 600 $m & sleep 600 $m; true" &
runner=$!
wait_until "$CONCH_WAIT_S" some_marked "sleep 600 $m" 2
kill -INT "$runner"
wait "$runner"
check "CONCH_TREE=off: Ctrl-C exits 130" "130" "$?"
wait_until "$CONCH_WAIT_S" some_marked "sleep 600 $m" 2 # a second's calm
sleep 1 # nothing to wait for: the point is that they stay
check "CONCH_TREE=off: Ctrl-C leaves both sleeps" "2" "$(marked "sleep 600 $m")"
pkill -KILL -f "sleep 600 $m"

CONCH_TREE=sometimes "$CONCH" $U ps 2>"$tmp/err"
check "a bad CONCH_TREE is a usage error" "2" "$?"

echo "$fails failure(s)"
[ "$fails" = 0 ]
