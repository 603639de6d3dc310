#!/bin/sh
# The conch CLI end to end: every command against a `conch serve` of its
# own (port 0), then the no-URL path that starts the background server on
# the private Unix socket (a runtime directory of its own) and
# `conch serve --stop`.  Attacks on both: test_security.sh.  Exit codes, stream separation,
# stdin, signals, tags, attach, a PTY, and nothing left running.
#
#   test_cli.sh /path/to/conch
set -u
CONCH=$1
. "$(dirname "$0")/../support/wait.sh"
fails=0
tmp=$(mktemp -d)
srv2=
trap 'kill -CONT $srv2 2>/dev/null; kill "$srv" $srv2 2>/dev/null; rm -rf "$tmp"' \
  EXIT INT TERM

check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    fails=$((fails + 1))
  fi
}

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# "yes" if process $1 is still there after up to 20 s, "no" once it is gone
# (servers reap asynchronously; a loaded machine takes its time).
still_alive() {
  wait_while "$CONCH_WAIT_S" alive "$1"
  alive "$1" && echo yes || echo no
}

# Process $1 alive and still running command line $2 (pids are reused
# quickly on a busy machine: pid_max is 32768).
alive_as() {
  alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q "^$2 *$"
}

# "yes" if process $2 still runs $3 after up to $1 seconds, "no" once not.
alive_after() {
  wait_while "$1" alive_as "$2" "$3"
  alive_as "$2" "$3" && echo yes || echo no
}

# Sets pid to the first column of the line of `conch ps` (server URL
# options in $1) that the awk program $2 selects; fails while there is none.
ps_pid() {
  pid=$("$CONCH" $1 ps | awk "$2")
  [ -n "$pid" ]
}

mkfifo "$tmp/srv"
"$CONCH" serve --listen 127.0.0.1:0 --no-token >"$tmp/srv" 2>"$tmp/srv.err" </dev/null &
srv=$!
read -r _ port <"$tmp/srv"
U="--url http://127.0.0.1:$port"
echo "server on $port"

# run: streams, exit codes, stdin.
out=$("$CONCH" $U run -- sh -c 'echo out; echo err >&2; exit 3' 2>"$tmp/err")
code=$?
check "run stdout" "out" "$out"
check "run stderr" "err" "$(cat "$tmp/err")"
check "run exit code" "3" "$code"
out=$(printf 'abc\ndef\n' | "$CONCH" $U run --stdin -- cat)
check "run --stdin" "abc
def" "$out"
out=$("$CONCH" $U run --env FOO=bar --cwd /tmp -- sh -c 'echo $FOO; pwd')
check "run --env --cwd" "bar
/tmp" "$out"
"$CONCH" $U run -- sh -c 'kill -9 $$' 2>/dev/null
check "killed by signal 9 -> 137" "137" "$?"
"$CONCH" $U run -- sh -c 'kill -15 $$' 2>/dev/null
check "killed by signal 15 -> 143" "143" "$?"
# A core dump: Go (envd) and conch serve say "signal: segmentation fault
# (core dumped)"; still 128 + 11, as a shell says.
"$CONCH" $U run --cwd "$tmp" -- sh -c 'ulimit -c unlimited; kill -SEGV $$' \
  2>/dev/null
check "core-dumping SIGSEGV -> 139" "139" "$?"
[ -e "$tmp/core" ] || echo "note: no core file in $tmp (core_pattern:" \
  "$(cat /proc/sys/kernel/core_pattern)): the (core dumped) case was not met"
rm -f "$tmp/core"
"$CONCH" $U run -- sh -c 'ulimit -c 0; kill -SEGV $$' 2>/dev/null
check "SIGSEGV without a core -> 139" "139" "$?"
"$CONCH" $U run -- sh -c 'kill -USR1 $$' 2>/dev/null
check "killed by SIGUSR1 -> 138" "138" "$?"
"$CONCH" $U run --cwd /nonexistent -- true 2>"$tmp/err"
check "invalid_argument exits 253" "253" "$?"
check "rpc failure message" "conch: invalid_argument:" \
  "$(cut -c1-24 "$tmp/err")"
head -c 100000 /dev/urandom >"$tmp/bin"
"$CONCH" $U run -- cat "$tmp/bin" >"$tmp/bin.out"
check "binary output intact" "$(sha256sum <"$tmp/bin")" \
  "$(sha256sum <"$tmp/bin.out")"
"$CONCH" $U --timeout 1 run -- sleep 37 2>"$tmp/err"
check "the lifetime ends the process: 124, as timeout(1)" "124" "$?"

# start, ps, attach, kill.
pid=$("$CONCH" $U start --tag cli-test -- sleep 67)
check "start prints a pid" "yes" "$(alive "$pid" && echo yes)"
"$CONCH" $U ps >"$tmp/ps"
check "ps lists it" "1" "$(grep -c "^$pid *cli-test *sleep 67" "$tmp/ps")"
"$CONCH" $U kill -s TERM @cli-test
check "kill by tag" "0" "$?"
check "killed process gone" "no" "$(still_alive "$pid")"
"$CONCH" $U kill 999999 2>"$tmp/err"
check "kill unknown pid: not_found exits 252" "252" "$?"
# Output is not replayed, so the process ticks until attach has seen a
# tick (it is subscribed), then says its last word.
pid=$("$CONCH" $U start -- sh -c \
  "while [ ! -e '$tmp/go' ]; do echo tick; sleep 0.1; done; echo late; exit 5")
"$CONCH" $U attach "$pid" >"$tmp/attach" &
attacher=$!
wait_until "$CONCH_WAIT_S" grep -q tick "$tmp/attach" 2>/dev/null
touch "$tmp/go"
wait "$attacher"
code=$?
check "attach output" "late" "$(grep -v '^tick$' "$tmp/attach")"
check "attach exit code" "5" "$code"

# Every signal a terminal user sends to end a program (Ctrl-C, Ctrl-\,
# kill, a closed terminal) ends the remote process as Ctrl-C does, and the
# CLI exits 128 + N.
n=0
for sig in INT QUIT TERM HUP; do
  n=$((n + 1))
  "$CONCH" $U run --tag "cli-$sig" -- sleep 67 &
  runner=$!
  pid=
  wait_until "$CONCH_WAIT_S" ps_pid "$U" "\$2 == \"cli-$sig\" {print \$1}"
  check "run to be interrupted by $sig started" "yes" \
    "$([ -n "$pid" ] && echo yes)"
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
  # The pid itself, still running our sleep (pids come round fast on a
  # busy machine); what it was doing if it stayed, to say why.
  left=$(alive_after "$CONCH_WAIT_S" "${pid:-0}" "sleep 67")
  check "run interrupted by $sig leaves nothing" "no" "$left"
  [ "$left" = no ] || {
    grep -E '^(State|PPid|SigCgt|SigIgn)' "/proc/$pid/status" | tr '\n' ' '
    echo
    tail -5 "$tmp/srv.err"
  }
done

# A frozen server (SIGSTOP) does not hang attach or run: with
# CONCH_KEEPALIVE=1 they end with unavailable (exit 255) within
# 3 x 1 + 5 s of silence, and run's attempt to end its process is bounded
# too.  Once the server runs again, the process's lifetime (--timeout)
# ends it.
mkfifo "$tmp/srv2"
"$CONCH" serve --listen 127.0.0.1:0 --no-token >"$tmp/srv2" 2>>"$tmp/srv.err" </dev/null &
srv2=$!
read -r _ port2 <"$tmp/srv2"
U2="--url http://127.0.0.1:$port2"
pid=$("$CONCH" $U2 start -- sleep 97)
CONCH_KEEPALIVE=1 "$CONCH" $U2 attach "$pid" >/dev/null 2>"$tmp/attach.err" &
attacher=$!
CONCH_KEEPALIVE=1 "$CONCH" $U2 --timeout 12 run -- sleep 98 2>"$tmp/run.err" &
runner=$!
ps_has() { "$CONCH" $U2 ps | grep -q "$1"; }
wait_until "$CONCH_WAIT_S" ps_has "sleep 98"
kill -STOP "$srv2"
t0=$(date +%s)
wait "$attacher"
check "attach to a frozen server exits 255" "255" "$?"
wait "$runner"
check "run on a frozen server exits 255" "255" "$?"
took=$(($(date +%s) - t0))
check "frozen server noticed and closes bounded (<= 30 s, took $took s)" yes \
  "$([ "$took" -le 30 ] && echo yes)"
check "attach says unavailable" "conch: unavailable:" \
  "$(cut -c1-19 "$tmp/attach.err" | head -1)"
check "run says unavailable" "conch: unavailable:" \
  "$(cut -c1-19 "$tmp/run.err" | head -1)"
kill -CONT "$srv2"
os_has() { ps -eo args | grep -q "$1"; }
wait_while 30 os_has '^sleep 98$'
check "run's process ends at its lifetime once the server runs again" "0" \
  "$(ps -eo args | grep -c '^sleep 98$')"
"$CONCH" $U2 kill "$pid"
check "attach left its process to kill" "0" "$?"
CONCH_KEEPALIVE=soon "$CONCH" $U2 ps 2>"$tmp/err"
check "a bad CONCH_KEEPALIVE is refused (a usage error)" "2" "$?"
kill "$srv2"
wait "$srv2"
srv2=

# A PTY, through script(1) for a terminal.
if command -v script >/dev/null 2>&1; then
  out=$(printf 'echo hi-from-pty\nexit 7\n' | script -qec \
    "stty cols 91 rows 33; $CONCH $U pty -- sh -c 'stty size; read l; eval \$l; read l; eval \$l'" \
    /dev/null 2>&1)
  case "$out" in
  *"33 91"*hi-from-pty*) check "pty size and input" ok ok ;;
  *) check "pty size and input" "33 91 ... hi-from-pty" "$out" ;;
  esac
  # A closed terminal (script(1) killed: the master side goes away) ends
  # run's remote process, as Ctrl-C does.
  script -qec "exec $CONCH $U run --tag cli-tty -- sleep 67" /dev/null \
    </dev/null >/dev/null 2>&1 &
  term=$!
  pid=
  wait_until "$CONCH_WAIT_S" ps_pid "$U" '$2 == "cli-tty" {print $1}'
  check "run on a terminal started" "yes" "$([ -n "$pid" ] && echo yes)"
  kill -KILL "$term"
  wait "$term" 2>/dev/null
  check "a closed terminal leaves nothing" "no" \
    "$(alive_after 20 "${pid:-0}" "sleep 67")"
  # The same for pty (raw mode: Ctrl-C goes to the remote terminal).
  script -qec "exec $CONCH $U pty -- sleep 68" /dev/null \
    </dev/null >/dev/null 2>&1 &
  term=$!
  pid=
  wait_until "$CONCH_WAIT_S" ps_pid "$U" '$3 == "sleep" && $4 == "68" {print $1}'
  check "pty on a terminal started" "yes" "$([ -n "$pid" ] && echo yes)"
  kill -KILL "$term"
  wait "$term" 2>/dev/null
  check "a closed terminal ends pty's process" "no" \
    "$(alive_after 20 "${pid:-0}" "sleep 68")"
fi

# No URL: the background server on the private socket, then --stop.
mkdir -m 700 "$tmp/xdg"
export XDG_RUNTIME_DIR="$tmp/xdg"
out=$("$CONCH" run -- echo via-default)
check "no URL starts the local server" "via-default" "$out"
check "its socket" "yes" "$([ -S "$tmp/xdg/conch/serve.sock" ] && echo yes)"
pid=$("$CONCH" start -- sleep 67)
check "start via default" "yes" "$(alive "$pid" && echo yes)"
out=$("$CONCH" ps | grep -c "sleep 67")
check "same server sees it" "1" "$out"
"$CONCH" serve --stop
check "serve --stop" "0" "$?"
check "stopping kills its children" "no" "$(still_alive "$pid")"
check "the socket is gone" "no" \
  "$([ -e "$tmp/xdg/conch/serve.sock" ] && echo yes || echo no)"
"$CONCH" serve --stop 2>/dev/null
check "serve --stop with none running" "1" "$?"
unset XDG_RUNTIME_DIR

kill "$srv"
wait "$srv"
check "server exits cleanly" "0" "$?"
# Nothing this suite started runs on (its own durations: other suites may
# run sleeps of their own at the same time).
left=$(ps -eo pid,args | grep -E 'sleep (37|67|68|97|98)$' | grep -v grep | wc -l)
check "no child left running" "0" "$left"
[ "$fails" = 0 ] && echo "all CLI checks passed"
exit "$fails"
