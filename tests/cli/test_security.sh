#!/bin/bash
# Attacks on `conch serve` and the CLI by another user of the same machine
# (issue 16, items 1-4), all on loopback and bounded in time.  Each check
# failed before the server and the CLI were made secure by default.  The
# checks that need a second user run as `nobody` through setpriv (as root
# only; skipped otherwise).
#
#   test_security.sh /path/to/conch
set -u
CONCH_BUILD=$1
. "$(dirname "$0")/../support/wait.sh"
. "$(dirname "$0")/../support/peer.sh"
fails=0
skips=0
tmp=$(mktemp -d)
chmod 755 "$tmp" # nobody must reach its own corners of it
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null
  done
  XDG_RUNTIME_DIR="$tmp/xdg" "$CONCH" serve --stop >/dev/null 2>&1
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

contains() { # file text -> yes/no
  grep -qF -- "$2" "$1" 2>/dev/null && echo yes || echo no
}

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

port_taken() { bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

can_switch=no
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
  setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  can_switch=yes
fi
mkdir -m 1777 "$tmp/shared"
as_nobody() {
  env -u XDG_RUNTIME_DIR TMPDIR="$tmp/shared" HOME=/ \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}

# Starts a server in the background (its stdin a pipe we hold: it ends with
# us), waits up to 120 s for its LISTENING line; sets $srv and $listening.
start_server() { # [runner...] -- serve args...
  local runner=()
  while [ "$1" != -- ]; do
    runner+=("$1")
    shift
  done
  shift
  local n=${#pids[@]}
  peer_start "srv$n" "${runner[@]}" "$CONCH" serve "$@"
  srv=$peer_pid
  pids+=("$srv")
  listening=$peer_port
  srv_err=$tmp/srv$n.err
}

# ---- 4. TCP without a token, every interface, empty tokens ----------------
# Each must refuse at once (no LISTENING, not killed by the timeout).
refused() { # args... -> "refused" or what happened
  timeout 10 "$CONCH" serve "$@" </dev/null >"$tmp/r.out" 2>"$tmp/r.err"
  local rc=$?
  if [ "$rc" = 124 ] || grep -q LISTENING "$tmp/r.out"; then
    echo "listened (rc $rc)"
  elif [ "$rc" = 0 ]; then
    echo "exit 0"
  else
    echo refused
  fi
}
check "TCP without a token or --no-token" refused \
  "$(refused --listen 127.0.0.1:0)"
check "... says why" yes "$(contains "$tmp/r.err" "needs an access token")"
check "0.0.0.0 with --no-token" refused \
  "$(refused --listen 0.0.0.0:0 --no-token)"
check "... says why" yes "$(contains "$tmp/r.err" "not a loopback address")"
check ":P with --no-token" refused "$(refused --listen :0 --no-token)"
check "[::]:P with --no-token" refused "$(refused --listen '[::]:0' --no-token)"
check "0.0.0.0 without anything" refused "$(refused --listen 0.0.0.0:0)"
check "--access-token \"\"" refused \
  "$(refused --listen 127.0.0.1:0 --access-token '')"
check "... says why" yes "$(contains "$tmp/r.err" "is empty")"
check "--access-token= (empty)" refused \
  "$(refused --listen 127.0.0.1:0 --access-token=)"
check "CONCH_TOKEN empty" refused \
  "$(CONCH_TOKEN= refused --listen 127.0.0.1:0)"
printf '\n' >"$tmp/empty.tok"
check "an empty token file" refused \
  "$(refused --listen 127.0.0.1:0 --access-token-file "$tmp/empty.tok")"

# The token from a file, from the environment; argv blanked.
printf 'file-tok-%s\n' $$ >"$tmp/tok"
start_server -- --listen 127.0.0.1:0 --access-token-file "$tmp/tok"
U="--url http://127.0.0.1:$listening"
"$CONCH" $U run -- true 2>"$tmp/e"
check "token file: no token -> refused (unauthenticated: 251)" 251 "$?"
out=$(CONCH_TOKEN=file-tok-$$ "$CONCH" $U run -- echo in)
check "token file: the token works" in "$out"
start_server env CONCH_TOKEN=env-tok-$$ -- --listen 127.0.0.1:0
U="--url http://127.0.0.1:$listening"
"$CONCH" $U run -- true 2>/dev/null
check "CONCH_TOKEN: no token -> refused (unauthenticated: 251)" 251 "$?"
out=$(CONCH_TOKEN=env-tok-$$ "$CONCH" $U run -- echo in)
check "CONCH_TOKEN: the token works" in "$out"
start_server -- --listen 127.0.0.1:0 --access-token argv-tok-$$
check "--access-token: not in /proc/PID/cmdline" no \
  "$(tr '\0' ' ' <"/proc/$srv/cmdline" | grep -qF "argv-tok-$$" && echo yes ||
    echo no)"
out=$(CONCH_TOKEN=argv-tok-$$ "$CONCH" --url "http://127.0.0.1:$listening" \
  run -- echo in)
check "--access-token: still works" in "$out"

# DNS rebinding: a tokenless TCP listener serves loopback names only.
start_server -- --listen 127.0.0.1:0 --no-token
port=$listening
if command -v curl >/dev/null 2>&1; then
  code() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$@"; }
  check "Host rebind.example -> 403" 403 \
    "$(code -H "Host: rebind.example:$port" "http://127.0.0.1:$port/health")"
  check "HTTP/2 :authority rebind.example -> 403" 403 \
    "$(code --http2-prior-knowledge -H "Host: rebind.example:$port" \
      "http://127.0.0.1:$port/health")"
  check "a List with Host rebind.example -> 403" 403 \
    "$(code -X POST -H "Host: rebind.example" -H 'Content-Type: application/json' \
      -d '{}' "http://127.0.0.1:$port/process.Process/List")"
  for h in localhost.rebind.example 127.0.0.1.rebind.example "localhost:x" \
    "[::2]"; do
    check "Host $h -> 403" 403 \
      "$(code -H "Host: $h" "http://127.0.0.1:$port/health")"
  done
  check "Host localhost -> 204" 204 \
    "$(code -H "Host: localhost:$port" "http://127.0.0.1:$port/health")"
  check "Host 127.0.0.1 -> 204" 204 "$(code "http://127.0.0.1:$port/health")"
  check "Host [::1] -> 204" 204 \
    "$(code -H "Host: [::1]:$port" "http://127.0.0.1:$port/health")"
else
  skip "Host checks: no curl"
fi

# ---- 1. Other users and the server's user -----------------------------------
# A root server runs processes as the server's user only, unless allowed.
U="--url http://127.0.0.1:$port"
if [ "$(id -u)" = 0 ]; then
  out=$("$CONCH" $U --user nobody run -- id -u 2>"$tmp/e")
  check "run as nobody without --allow-user -> refused (251)" "251 " "$? $out"
  check "... permission_denied" yes "$(contains "$tmp/e" permission_denied)"
  start_server -- --listen 127.0.0.1:0 --no-token --allow-user nobody
  out=$("$CONCH" --url "http://127.0.0.1:$listening" --user nobody run --cwd / -- id -u)
  check "--allow-user nobody" 65534 "$out"
else
  skip "--allow-user: not root"
fi

# The auto-started server: a private socket, nothing on envd's TCP port.
if port_taken 49983; then
  skip "auto-start leaves 49983 closed: something listens there"
  taken=yes
else
  taken=no
fi
out=$("$CONCH" run -- echo auto)
check "auto-start" auto "$out"
sock=$tmp/xdg/conch/serve.sock
check "auto-start: a socket of mode 0600" "srw-------" \
  "$(stat -c %A "$sock" 2>/dev/null)"
if [ "$taken" = no ]; then
  check "auto-start: nothing on 127.0.0.1:49983" no \
    "$(port_taken 49983 && echo yes || echo no)"
fi

if [ "$can_switch" = yes ]; then
  out=$(as_nobody "$CONCH" --url "unix:$sock" run -- id -u 2>&1)
  check "nobody cannot use root's auto-started server" "no" \
    "$(echo "$out" | grep -qx 0 && echo yes || echo no)"
  # Even with the socket and its directory opened up, the server checks
  # the peer (SO_PEERCRED).
  mkdir -m 777 "$tmp/open"
  start_server -- --listen "unix:$tmp/open/root.sock"
  chmod 666 "$tmp/open/root.sock"
  out=$("$CONCH" --url "unix:$tmp/open/root.sock" run -- id -u)
  check "root's client on root's socket" 0 "$out"
  out=$(as_nobody "$CONCH" --url "unix:$tmp/open/root.sock" run -- id -u \
    2>/dev/null)
  check "nobody on an open socket: refused by the server" "255 " "$? $out"
  check "... and logged" yes "$(contains "$srv_err" "refused a connection from uid 65534")"
  start_server -- --listen "unix:$tmp/open/allow.sock" --allow-uid 65534
  chmod 666 "$tmp/open/allow.sock"
  out=$(as_nobody "$CONCH" --url "unix:$tmp/open/allow.sock" run -- echo in)
  check "--allow-uid 65534 lets nobody in" in "$out"
  # The other way: a socket whose server is nobody's is refused by root's
  # client (nothing is sent to it).
  # (setpriv execs the server: $srv is its pid, for the cleanup)
  start_server env -u XDG_RUNTIME_DIR setpriv --reuid=65534 --regid=65534 \
    --clear-groups -- --listen "unix:$tmp/open/nobody.sock"
  out=$(as_nobody "$CONCH" --url "unix:$tmp/open/nobody.sock" run --cwd / -- id -u)
  check "nobody's client on nobody's server" 65534 "$out"
  CONCH_TOKEN=leak-$$ "$CONCH" --url "unix:$tmp/open/nobody.sock" \
    run -- true 2>"$tmp/e"
  check "root's client refuses nobody's server" 255 "$?"
  check "... says why" yes "$(contains "$tmp/e" "neither ours nor root")"
else
  skip "second-user checks: not root or no setpriv"
fi

# ---- 2. A squatter on envd's port gets nothing --------------------------------
if [ "$taken" = no ] && command -v node >/dev/null 2>&1; then
  "$CONCH" serve --stop >/dev/null 2>&1
  : >"$tmp/squat"
  : >"$tmp/squat.up"
  # An HTTP/2 (h2c) squatter that records every request's headers and body.
  node -e '
const fs = require("fs");
const log = (x) => fs.appendFileSync(process.argv[1], x + "\n");
const srv = require("http2").createServer();
srv.on("stream", (st, headers) => {
  log(JSON.stringify(headers));
  st.on("data", (d) => log(d.toString("latin1")));
  st.on("error", () => {});
});
srv.on("sessionError", () => {});
srv.listen(49983, "127.0.0.1", () => console.log("up"));
' "$tmp/squat" >"$tmp/squat.up" &
  pids+=("$!")
  wait_until 120 grep -q up "$tmp/squat.up"
  check "the squatter is up" yes "$(contains "$tmp/squat.up" up)"
  out=$(CONCH_TOKEN=squat-tok-$$ timeout 20 "$CONCH" run -- echo squat-arg-$$)
  check "with a squatter on 49983: our own server answers" "squat-arg-$$" "$out"
  check "the squatter got no token" no "$(contains "$tmp/squat" "squat-tok-$$")"
  check "the squatter got no arguments" no \
    "$(contains "$tmp/squat" "squat-arg-$$")"
else
  skip "squatter: 49983 taken or no node"
fi

# ---- 3. The runtime directory, its files and --stop -------------------------
echo precious >"$tmp/victim"
# A directory planted in place of ours (XDG_RUNTIME_DIR and the /tmp
# fallback), with symlinks in it to a file of ours.
planted() { # dir
  mkdir -m 777 "$1"
  for f in serve-49983.pid serve-49983.log serve.log serve.sock.lock; do
    ln -s "$tmp/victim" "$1/$f"
  done
  [ "$can_switch" = yes ] && chown -h -R 65534:65534 "$1"
}
mkdir -m 1777 "$tmp/xdg-planted"
planted "$tmp/xdg-planted/conch"
out=$(XDG_RUNTIME_DIR=$tmp/xdg-planted timeout 20 "$CONCH" run -- echo in \
  2>"$tmp/e")
check "a planted runtime directory is refused" "253 " "$? $out"
check "... says why" yes "$(contains "$tmp/e" "not a private directory")"
planted "$tmp/shared/conch-$(id -u)"
out=$(env -u XDG_RUNTIME_DIR TMPDIR="$tmp/shared" timeout 20 "$CONCH" run -- \
  echo in 2>"$tmp/e")
check "a planted \$TMPDIR/conch-UID is refused" "253 " "$? $out"
check "the symlinks' target is intact" precious "$(cat "$tmp/victim")"

# Our own private directory, with a symlink for the log.
mkdir -m 700 "$tmp/xdg-link" "$tmp/xdg-link/conch"
ln -s "$tmp/victim" "$tmp/xdg-link/conch/serve.log"
ln -s "$tmp/victim" "$tmp/xdg-link/conch/serve-49983.log"
XDG_RUNTIME_DIR=$tmp/xdg-link timeout 20 "$CONCH" run -- true 2>"$tmp/e"
check "a symlinked serve.log is refused" 253 "$?"
check "... says why" yes "$(contains "$tmp/e" "symlink")"
check "the log's target is intact" precious "$(cat "$tmp/victim")"

# An XDG_RUNTIME_DIR of another user's (a sudo shell's) is not used.
if [ "$(id -u)" = 0 ]; then
  mkdir -m 777 "$tmp/xdg-other"
  chown 65534 "$tmp/xdg-other"
  mkdir -m 700 "$tmp/fallback"
  out=$(XDG_RUNTIME_DIR=$tmp/xdg-other TMPDIR=$tmp/fallback timeout 20 \
    "$CONCH" run -- echo in)
  check "another user's XDG_RUNTIME_DIR: the fallback" in "$out"
  check "... nothing made in it" no \
    "$([ -e "$tmp/xdg-other/conch" ] && echo yes || echo no)"
  XDG_RUNTIME_DIR=$tmp/xdg-other TMPDIR=$tmp/fallback "$CONCH" serve --stop
  check "... and --stop finds it there" 0 "$?"
else
  skip "another user's XDG_RUNTIME_DIR: not root"
fi

# Three CLIs at once with no server: one server wins the socket's lock,
# every CLI gets its answer from it.
mkdir -m 700 "$tmp/xdg-race"
racers=()
for i in 1 2 3; do
  XDG_RUNTIME_DIR=$tmp/xdg-race timeout 30 "$CONCH" run -- echo "race$i" \
    >"$tmp/race$i" 2>&1 &
  racers+=("$!")
done
wait "${racers[@]}"
check "three CLIs at once" "race1 race2 race3" \
  "$(cat "$tmp/race1" "$tmp/race2" "$tmp/race3" | tr '\n' ' ' | sed 's/ $//')"
check "... one server" 1 \
  "$(grep -c '^LISTENING' "$tmp/xdg-race/conch/serve.log")"
XDG_RUNTIME_DIR=$tmp/xdg-race "$CONCH" serve --stop

# --stop signals only a server that answers on our socket, never a pid
# from a file.
sleep 89 &
victim=$!
pids+=("$victim")
mkdir -m 700 "$tmp/xdg-pid" "$tmp/xdg-pid/conch"
echo "$victim" >"$tmp/xdg-pid/conch/serve-49983.pid"
echo "$victim" >"$tmp/xdg-pid/conch/serve.pid"
XDG_RUNTIME_DIR=$tmp/xdg-pid "$CONCH" serve --stop 2>/dev/null
check "serve --stop with no server: exit 1" 1 "$?"
sleep 0.5
check "serve --stop signals no pid from a file" yes \
  "$(alive "$victim" && echo yes || echo no)"

echo "$fails failed, $skips skipped"
exit "$fails"
