#!/bin/bash
# `conch serve`'s start: every refusal exits at once with its message on
# stderr and its documented exit status (tools/conch/README.md, "Exit
# status"), never a crash (issue 21, item 2: each of these was a SIGSEGV,
# status 139); a LISTENING line that cannot be written is a failure
# (item 7); the loser of the auto-start race exits 5 and the CLIs that
# raced all reach the winner.
#
#   test_serve_start.sh /path/to/conch
set -u
CONCH_BUILD=$1
. "$(dirname "$0")/../support/wait.sh"
. "$(dirname "$0")/../support/peer.sh"
fails=0
skips=0
tmp=$(mktemp -d)
chmod 755 "$tmp" # nobody reads its token file and runs its copy from here
cleanup() {
  # Our background jobs not yet waited for (so their pids are still ours).
  local left
  left=$(jobs -p)
  [ -n "$left" ] && kill $left 2>/dev/null
  wait 2>/dev/null
  XDG_RUNTIME_DIR="$tmp/xdg-race" "$CONCH" serve --stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

# A copy nobody may execute (the build tree may be closed to it).
mkdir "$tmp/bin"
cp "$CONCH_BUILD" "$tmp/bin/conch"
chmod 755 "$tmp/bin" "$tmp/bin/conch"
CONCH=$tmp/bin/conch
unset CONCH_URL CONCH_TOKEN
mkdir -m 700 "$tmp/xdg"
export XDG_RUNTIME_DIR="$tmp/xdg"

check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    fails=$((fails + 1))
  fi
}

skip() {
  echo "skip $1"
  skips=$((skips + 1))
}

can_switch=no
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
  setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  can_switch=yes
fi
nobody=(env -u XDG_RUNTIME_DIR TMPDIR="$tmp/shared" HOME=/
  setpriv --reuid=65534 --regid=65534 --clear-groups)
mkdir -m 1777 "$tmp/shared"

# refused NAME STATUS REGEX [runner...] -- serve args...: the server must
# exit STATUS on its own (60 s allowed: a loaded machine), print no
# LISTENING line and say REGEX (grep -E) on stderr.
refused() {
  local name=$1 want=$2 re=$3 runner=()
  shift 3
  while [ "$1" != -- ]; do
    runner+=("$1")
    shift
  done
  shift
  timeout -s KILL 60 "${runner[@]}" "$CONCH" serve "$@" </dev/null \
    >"$tmp/r.out" 2>"$tmp/r.err"
  local rc=$?
  local got="exit $rc"
  if grep -q LISTENING "$tmp/r.out"; then
    got="listened, exit $rc"
  elif ! grep -qE -- "$re" "$tmp/r.err"; then
    got="exit $rc, stderr [$(head -c 300 "$tmp/r.err")]"
  fi
  check "$name" "exit $want" "$got"
}

# ---- The listener ---------------------------------------------------------
refused "TCP without a token: 3" 3 "needs an access token" \
  -- --listen 127.0.0.1:0
refused "0.0.0.0 without a token: 3" 3 "not a loopback address" \
  -- --listen 0.0.0.0:0 --no-token
refused "[::] without a token: 3" 3 "not a loopback address" \
  -- --listen '[::]:0' --no-token

peer_start busy "$CONCH" serve --listen 127.0.0.1:0 --no-token
busy=$peer_port
if [ -n "$busy" ]; then
  refused "port in use: 4" 4 "127.0.0.1:$busy: Address already in use" \
    -- --listen "127.0.0.1:$busy" --no-token
else
  check "a server for the port in use" "LISTENING" "none: $(cat "$tmp/busy.err")"
fi
printf 'tok-%s\n' $$ >"$tmp/tok"
chmod 644 "$tmp/tok"
refused "an address not this machine's: 4" 4 "Cannot assign requested address" \
  -- --listen 192.0.2.1:0 --access-token-file "$tmp/tok"
refused "unix: in a missing directory: 4" 4 "No such file or directory" \
  -- --listen "unix:$tmp/nodir/s.sock"
: >"$tmp/plain"
refused "unix: on a regular file: 4" 4 "exists and is not a socket" \
  -- --listen "unix:$tmp/plain"
long=$tmp/$(printf '%0200d' 0)
refused "unix: path too long: 2" 2 "longer than" -- --listen "unix:$long"
refused "unix: empty: 2" 2 "is empty" -- --listen unix:
for l in foo 127.0.0.1: 127.0.0.1:99999 127.0.0.1:8x '[::1' '[::1]8'; do
  refused "--listen $l: 2" 2 "--listen wants HOST:PORT" -- --listen "$l" --no-token
done
mkdir -m 700 "$tmp/xdg-open"
chmod 755 "$tmp/xdg-open"
mkdir -m 755 "$tmp/xdg-open/conch"
refused "the default socket in a runtime directory not private: 4" 4 \
  "not a private directory" env XDG_RUNTIME_DIR="$tmp/xdg-open" --

# ---- Options and the files they name --------------------------------------
refused "an unknown option: 2" 2 "unknown option --bogus" -- --bogus 1
refused "an argument: 2" 2 "unexpected argument" -- stray
refused "an option without its value: 2" 2 "needs a value" -- --listen
refused "a bad number: 2" 2 "not a number" -- --max-processes many
refused "--no-token with a token: 2" 2 "exclude each other" \
  -- --listen 127.0.0.1:0 --no-token --access-token x
refused "--tls-cert alone: 2" 2 "go together" \
  -- --listen 127.0.0.1:0 --no-token --tls-cert "$tmp/plain"
refused "missing TLS files: 2" 2 "TLS: .*No such file" \
  -- --listen 127.0.0.1:0 --no-token --tls-cert "$tmp/none.pem" \
  --tls-key "$tmp/none.key"
printf 'not a certificate\n' >"$tmp/bad.pem"
refused "TLS files that are no PEM: 2" 2 "TLS: " \
  -- --listen 127.0.0.1:0 --no-token --tls-cert "$tmp/bad.pem" \
  --tls-key "$tmp/bad.pem"
refused "--workdir missing: 2" 2 "--workdir $tmp/none: No such file" \
  -- --workdir "$tmp/none"
refused "--workdir relative: 2" 2 "not an absolute path" -- --workdir rel
refused "--workdir a file: 2" 2 "not a directory" -- --workdir "$tmp/plain"
refused "--user unknown: 2" 2 "--user no-such-user-$$: no such user" \
  -- --user "no-such-user-$$"
refused "--allow-user unknown: 2" 2 "--allow-user no-such-user-$$: no such user" \
  -- --allow-user "no-such-user-$$"
refused "--access-token-file missing: 2" 2 "--access-token-file .*No such file" \
  -- --listen 127.0.0.1:0 --access-token-file "$tmp/none.tok"
refused "--access-token-file a directory: 2" 2 "Is a directory" \
  -- --listen 127.0.0.1:0 --access-token-file "$tmp"
printf '\n' >"$tmp/empty.tok"
refused "an empty token file: 2" 2 "is empty" \
  -- --listen 127.0.0.1:0 --access-token-file "$tmp/empty.tok"
printf 'two words\n' >"$tmp/space.tok"
refused "a token with a space: 2" 2 "visible ASCII" \
  -- --listen 127.0.0.1:0 --access-token-file "$tmp/space.tok"

if [ "$can_switch" = yes ]; then
  printf 'secret\n' >"$tmp/root.tok"
  chmod 600 "$tmp/root.tok"
  refused "an unreadable token file: 2" 2 "Permission denied" "${nobody[@]}" \
    -- --listen 127.0.0.1:0 --access-token-file "$tmp/root.tok"
  refused "--user root, not root: 2" 2 "not running as root" "${nobody[@]}" \
    -- --listen 127.0.0.1:0 --no-token --user root
  refused "--allow-user root, not root: 2" 2 "not running as root" "${nobody[@]}" \
    -- --listen 127.0.0.1:0 --no-token --allow-user root
  # No second process (RLIMIT_NPROC 1 for nobody): no keeper, no start.
  # (LeakSanitizer's check at exit needs a thread, which that limit
  # forbids: under ASan it is off for this one.)
  refused "no keeper process: 1" 1 "cannot start the keeper process" \
    "${nobody[@]}" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
    prlimit --nproc=1:1 \
    -- --listen 127.0.0.1:0 --no-token
else
  skip "refusals as another user: not root, or no setpriv"
fi

# ---- Out of descriptors ---------------------------------------------------
# From 4 descriptors up (with 3 the dynamic loader has none): each limit
# either starts the server or refuses with status 1 and "Too many open
# files".
started=0
refused_n=0
# Whether PID (our child, not yet waited for) printed LISTENING in FILE or
# ended (a zombie).
listening_or_gone() { # pid file
  grep -q LISTENING "$2" 2>/dev/null || [ ! -d "/proc/$1" ] ||
    grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
for n in 4 5 6 7 8 9 10 12 16; do
  rm -f "$tmp/fd.out" "$tmp/fd.err"
  # The subshell execs the server: $pid is the server's.  Descriptors
  # over 2 that we inherited (ctest's) are closed first: the limit counts
  # the server's own.
  (
    for f in /proc/$BASHPID/fd/*; do
      f=${f##*/}
      [ "$f" -gt 2 ] && eval "exec $f>&-"
    done
    ulimit -n "$n" && exec "$CONCH" serve --listen 127.0.0.1:0 --no-token
  ) </dev/null >"$tmp/fd.out" 2>"$tmp/fd.err" &
  pid=$!
  wait_until 60 listening_or_gone "$pid" "$tmp/fd.out"
  if grep -q LISTENING "$tmp/fd.out"; then
    started=$((started + 1))
    kill -TERM "$pid"
    wait "$pid"
    check "ulimit -n $n: served, then SIGTERM: exit 0" 0 "$?"
  else
    wait "$pid"
    rc=$?
    if [ "$rc" = 1 ] && grep -q "Too many open files" "$tmp/fd.err"; then
      refused_n=$((refused_n + 1))
      echo "ok   ulimit -n $n: exit 1, $(head -c 120 "$tmp/fd.err")"
    else
      check "ulimit -n $n" "exit 1, Too many open files" \
        "exit $rc, stderr [$(head -c 300 "$tmp/fd.err")]"
    fi
  fi
done
check "some descriptor limits refused" yes "$([ "$refused_n" -gt 0 ] && echo yes || echo no)"
check "some descriptor limits served" yes "$([ "$started" -gt 0 ] && echo yes || echo no)"

# ---- The LISTENING line ---------------------------------------------------
refused "stdout on /dev/full: 1" 1 "writing the LISTENING line to stdout: No space left" \
  sh -c 'exec "$0" "$@" >/dev/full' -- --listen 127.0.0.1:0 --no-token
refused "stdout on /dev/full, unix: 1" 1 "writing the LISTENING line" \
  sh -c 'exec "$0" "$@" >/dev/full' -- --listen "unix:$tmp/full.sock"
check "... and the socket is removed" no \
  "$([ -e "$tmp/full.sock" ] && echo yes || echo no)"
refused "stdout closed: 1" 1 "stdout is closed" \
  sh -c 'exec "$0" "$@" >&-' -- --listen 127.0.0.1:0 --no-token
# A pipe whose reader has gone: EPIPE (SIGPIPE is ignored).
refused "stdout a pipe with no reader: 1" 1 \
  "writing the LISTENING line to stdout: Broken pipe" \
  python3 -c 'import os, sys
r, w = os.pipe()
os.close(r)
os.dup2(w, 1)
os.execv(sys.argv[1], sys.argv[1:])' -- --listen 127.0.0.1:0 --no-token
refused "--help on /dev/full: 1" 1 "writing the help" \
  sh -c 'exec "$0" "$@" >/dev/full' -- --help

# ---- The auto-start race --------------------------------------------------
# Eight servers for one socket at once: one serves, every other exits 5.
race_sock=$tmp/race.sock
racers=()
for i in 1 2 3 4 5 6 7 8; do
  mkfifo "$tmp/race$i.in"
  "$CONCH" serve --listen "unix:$race_sock" <"$tmp/race$i.in" \
    >"$tmp/race$i.out" 2>"$tmp/race$i.err" &
  racers+=("$!")
done
for i in 1 2 3 4 5 6 7 8; do
  exec {fd}>"$tmp/race$i.in" # each holds its stdin open until we go
done
one_listens() { [ "$(cat "$tmp"/race?.out | grep -c '^LISTENING')" -ge 1 ]; }
wait_until 120 one_listens
winner=""
lost=0
for i in 1 2 3 4 5 6 7 8; do
  p=${racers[$((i - 1))]}
  if grep -q '^LISTENING' "$tmp/race$i.out"; then
    [ -z "$winner" ] && winner=$p || check "two winners" "one" "$winner and $p"
    continue
  fi
  wait "$p"
  rc=$?
  if [ "$rc" = 5 ] && grep -q "another conch serve listens on unix:$race_sock" \
    "$tmp/race$i.err"; then
    lost=$((lost + 1))
  else
    check "race loser $i" "exit 5, another conch serve" \
      "exit $rc, stderr [$(cat "$tmp/race$i.err")]"
  fi
done
check "eight servers for one socket: one wins, seven exit 5" "1 7" \
  "$([ -n "$winner" ] && echo 1 || echo 0) $lost"
if [ -n "$winner" ]; then
  kill -TERM "$winner"
  wait "$winner"
  check "... the winner exits 0 on SIGTERM" 0 "$?"
fi

# Twelve CLIs at once on a fresh runtime directory: each starts a server,
# one wins, and every CLI gets its answer from the winner; no CLI says
# anything on stderr (a crashed loser would be said there).
mkdir -m 700 "$tmp/xdg-race"
clis=()
for i in $(seq 1 12); do
  XDG_RUNTIME_DIR=$tmp/xdg-race timeout -s KILL 120 "$CONCH" run -- echo "cli$i" \
    >"$tmp/cli$i.out" 2>"$tmp/cli$i.err" &
  clis+=("$!")
done
bad=""
for i in $(seq 1 12); do
  wait "${clis[$((i - 1))]}"
  rc=$?
  if [ "$rc" != 0 ] || [ "$(cat "$tmp/cli$i.out")" != "cli$i" ] ||
    [ -s "$tmp/cli$i.err" ]; then
    bad="$bad [cli$i: exit $rc, out $(cat "$tmp/cli$i.out"), err $(cat "$tmp/cli$i.err")]"
  fi
done
check "twelve CLIs at once reach one server" "" "$bad"
log=$tmp/xdg-race/conch/serve.log
check "... serve.log: one LISTENING line" 1 "$(grep -c '^LISTENING' "$log")"
check "... and otherwise only losers' lines" "" \
  "$(grep -v -e '^LISTENING' -e '^conch serve: another conch serve listens on' "$log")"
XDG_RUNTIME_DIR=$tmp/xdg-race "$CONCH" serve --stop
check "... serve --stop" 0 "$?"

echo "$fails failed, $skips skipped"
[ "$fails" = 0 ]
