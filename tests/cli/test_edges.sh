#!/bin/bash
# The CLI at its edges (issue 21, items 7, 8 and 10 for the CLI, and its
# "Also"): the token out of /proc/PID/cmdline; pty without a terminal and
# its default lifetime; output that cannot be written (>/dev/full, a
# closed pipe); one exit code per class of failure and --json-errors; run
# --max-output; the messages of `kill abc` and `--url localhost:PORT`; the
# completion of `kill @`.  Each check failed before its fix.
#
#   test_edges.sh /path/to/conch /path/to/tools/conch/doc
set -u
CONCH=$1
DOC=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
. "$here/../support/suite.sh"
unset CONCH_URL CONCH_TOKEN CONCH_TOKEN_FILE CONCH_JSON_ERRORS CONCH_TIMEOUT

start() { # name cmd...: sets $port
  local name=$1
  shift
  if ! peer_start "$name" "$@"; then
    echo "FAIL $name printed no LISTENING line within 120 s:"
    cat "$tmp/$name.err"
    exit 1
  fi
  pids+=("$peer_pid")
  port=$peer_port
}

# The last line of a file as JSON: "field=value ..." of the named fields
# (python3, Debian's), or "not JSON: <line>".
json_fields() { # file field...
  python3 - "$@" <<'EOF'
import json, sys
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().splitlines()
last = lines[-1] if lines else ""
try:
    o = json.loads(last)
except ValueError:
    print("not JSON: " + last)
    sys.exit(0)
print(" ".join("%s=%s" % (f, json.dumps(o.get(f))) for f in sys.argv[2:]))
EOF
}

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
listed() { "$CONCH" $U ps | grep -q -- "$1"; }

tok=edges-$$
printf '%s\n' "$tok" >"$tmp/tok"
start serve "$CONCH" serve --listen 127.0.0.1:0 --no-token
U="--url http://127.0.0.1:$port"
start guarded "$CONCH" serve --listen 127.0.0.1:0 --access-token-file "$tmp/tok"
G="--url http://127.0.0.1:$port"
start capped "$CONCH" serve --listen 127.0.0.1:0 --no-token --max-processes 1
C1="--url http://127.0.0.1:$port"
have_node=0
if command -v node >/dev/null 2>&1; then
  have_node=1
  H1_FRONT_LOG=$tmp/front.log start front node "$here/h1_front.mjs" \
    "${U##*:}"
  F="--url http://127.0.0.1:$port --http1.1"
  H1_FRONT_ERROR='{"code":"aborted","message":"try again","details":[{"type":"google.rpc.RetryInfo","value":"CgIIAQ"}]}' \
    start errfront node "$here/h1_front.mjs" "${U##*:}"
  E="--url http://127.0.0.1:$port --http1.1"
else
  echo "note: no node; the cases through h1_front.mjs are skipped"
fi

# ---- 7. The token out of /proc/PID/cmdline ------------------------------
for form in sep eq; do
  if [ $form = sep ]; then
    "$CONCH" $G --token "$tok" run --tag "tok-$form" -- sleep 60 &
  else
    "$CONCH" $G run "--token=$tok" --tag "tok-$form" -- sleep 60 &
  fi
  runner=$!
  seen() { CONCH_TOKEN=$tok "$CONCH" $G ps | grep -q "tok-$form"; }
  wait_until "$CONCH_WAIT_S" seen
  cmdline=$(tr '\0' ' ' <"/proc/$runner/cmdline")
  check "--token ($form) works" yes "$(seen && echo yes)"
  check "--token ($form) is not in /proc/PID/cmdline" no \
    "$(case $cmdline in *"$tok"*) echo yes ;; *) echo no ;; esac)"
  check "--token ($form): blanked, not removed" yes \
    "$(case $cmdline in *xxxxxxxx*) echo yes ;; *) echo no ;; esac)"
  kill -INT "$runner"
  wait "$runner" 2>/dev/null
done
out=$("$CONCH" $G --token-file "$tmp/tok" run -- echo via-file)
check "--token-file" via-file "$out"
out=$(CONCH_TOKEN_FILE=$tmp/tok "$CONCH" $G run -- echo via-env-file)
check "CONCH_TOKEN_FILE" via-env-file "$out"
"$CONCH" $G --token-file "$tmp/none" ps 2>"$tmp/err"
check "--token-file missing: a usage error" 2 "$?"
check "--token-file missing: says so" \
  "conch: --token-file $tmp/none: No such file or directory" "$(cat "$tmp/err")"

# ---- 7. pty without a terminal, and its lifetime ------------------------
# Before: `bash -i -l` started and never ended (timeout's 124 here).
timeout 60 "$CONCH" $U pty </dev/null >"$tmp/out" 2>"$tmp/err"
check "pty with stdin not a terminal: refused (2)" 2 "$?"
check "pty with stdin not a terminal: says why" \
  "conch pty: stdin is not a terminal: a pseudo-terminal needs one" \
  "$(head -1 "$tmp/err")"
echo 'echo hi; exit' | timeout 60 "$CONCH" $U pty -- sh 2>/dev/null
check "pty with a pipe for stdin: refused" 2 "$?"
if [ $have_node = 1 ] && command -v script >/dev/null 2>&1; then
  : >"$tmp/front.log"
  script -qec "$CONCH $F pty -- true" /dev/null </dev/null >/dev/null 2>&1
  # The time left when the request went out: a little under the lifetime.
  check "pty's Start asks for its default lifetime (3600 s)" 1 \
    "$(grep -cE '^POST /process.Process/Start .*"connect-timeout-ms":"3[5-9][0-9]{5}"' "$tmp/front.log")"
  : >"$tmp/front.log"
  script -qec "$CONCH $F --timeout 7 pty -- true" /dev/null </dev/null \
    >/dev/null 2>&1
  check "pty --timeout 7: 7000 ms" 1 \
    "$(grep -cE '^POST /process.Process/Start .*"connect-timeout-ms":"(7000|6[0-9]{3})"' "$tmp/front.log")"
  : >"$tmp/front.log"
  script -qec "$CONCH $F --timeout 0 pty -- true" /dev/null </dev/null \
    >/dev/null 2>&1
  check "pty --timeout 0: none" 0 \
    "$(grep -c '^POST /process.Process/Start .*connect-timeout-ms' "$tmp/front.log")"
fi

# ---- 7. Output that cannot be written -----------------------------------
# Before: ps and start exited 0, run 0 or 1, all without a word.
"$CONCH" $U ps >/dev/full 2>"$tmp/err"
check "ps >/dev/full: 249" 249 "$?"
check "ps >/dev/full: says so" \
  "conch: cannot write to stdout: No space left on device" "$(cat "$tmp/err")"
"$CONCH" $U run -- echo hi >/dev/full 2>"$tmp/err"
check "run >/dev/full: 249" 249 "$?"
check "run >/dev/full: says so" yes \
  "$(grep -q '^conch: cannot write to stdout: No space left on device' "$tmp/err" && echo yes)"
"$CONCH" $U start --tag full-start -- sleep 61 >/dev/full 2>"$tmp/err"
check "start >/dev/full: 249" 249 "$?"
pid=$(sed -n 's/.*runs on as pid \([0-9]*\),.*/\1/p' "$tmp/err")
check "start >/dev/full: names the pid it started" yes \
  "$([ -n "$pid" ] && alive "$pid" && echo yes)"
"$CONCH" $U kill @full-start
"$CONCH" $U --help >/dev/full 2>/dev/null
check "--help >/dev/full: 249" 249 "$?"
"$CONCH" $U run -- sh -c 'echo to-stderr >&2' 2>/dev/full
check "run 2>/dev/full: 249 (nowhere to say it)" 249 "$?"
# A reader that goes away: the process is ended, as by Ctrl-C.
"$CONCH" $U run --tag epipe -- sh -c 'while :; do echo y; done' 2>"$tmp/err" |
  head -c 10 >/dev/null
check "run | head: 249" 249 "${PIPESTATUS[0]}"
check "run | head: says the reader went away" yes \
  "$(grep -q 'cannot write to stdout: the reader went away (EPIPE); the process is ended' "$tmp/err" && echo yes)"
gone() { ! "$CONCH" $U ps | grep -q ' epipe '; }
wait_until "$CONCH_WAIT_S" gone
check "run | head: the process was ended" yes "$(gone && echo yes)"
"$CONCH" $U --json-errors ps >/dev/full 2>"$tmp/err"
check "ps >/dev/full --json-errors" \
  'code="data_loss" exit_code=249 origin="cli" retryable=false' \
  "$(json_fields "$tmp/err" code exit_code origin retryable)"

# ---- 8. One exit code per class of failure ------------------------------
"$CONCH" --url http://127.0.0.1:1 ps 2>"$tmp/err"
check "unavailable (refused): 255" 255 "$?"
"$CONCH" $U kill 999999 2>/dev/null
check "not_found: 252" 252 "$?"
"$CONCH" $U attach 999999 2>/dev/null
check "attach not_found: 252" 252 "$?"
"$CONCH" $U run --cwd /nonexistent -- true 2>/dev/null
check "invalid_argument: 253" 253 "$?"
"$CONCH" $G ps 2>/dev/null
check "unauthenticated (no token): 251" 251 "$?"
"$CONCH" $G --token wrong run -- true 2>/dev/null
check "unauthenticated (a wrong token, a stream): 251" 251 "$?"
"$CONCH" $U --timeout 1 run -- sleep 30 2>"$tmp/err"
check "deadline_exceeded (the lifetime): 124" 124 "$?"
check "deadline_exceeded: says which lifetime" 1 \
  "$(grep -c 'reached its lifetime of 1 s and was killed' "$tmp/err")"
pid=$("$CONCH" $C1 start -- sleep 62)
"$CONCH" $C1 --json-errors start -- true 2>"$tmp/err"
check "resource_exhausted (conch serve's process cap): 250" 250 "$?"
check "resource_exhausted from the server: retryable" \
  'code="resource_exhausted" retryable=true exit_code=250' \
  "$(json_fields "$tmp/err" code retryable exit_code)"
"$CONCH" $C1 kill "$pid"
"$CONCH" $U kill abc 2>"$tmp/err"
check "kill abc: 2" 2 "$?"
check "kill abc: names it" \
  "conch kill: 'abc' is not a pid (1-4294967295) or @TAG" "$(head -1 "$tmp/err")"
"$CONCH" $U attach @ 2>"$tmp/err"
check "attach @: names it" "conch attach: '@' names no tag (@TAG)" \
  "$(head -1 "$tmp/err")"
"$CONCH" --url "localhost:${U##*:}" ps 2>"$tmp/err"
check "--url without a scheme: 2" 2 "$?"
check "--url without a scheme: suggests http://" yes \
  "$(grep -q -- "--url http://localhost:${U##*:}" "$tmp/err" && echo yes)"
CONCH_KEEPALIVE=soon "$CONCH" $U ps 2>/dev/null
check "a bad CONCH_KEEPALIVE: 2" 2 "$?"

# ---- 8. --json-errors ---------------------------------------------------
"$CONCH" $U --json-errors kill 999999 2>"$tmp/err"
code=$?
check "json: not_found" \
  "code=\"not_found\" grpc_code=5 retryable=false exit_code=$code origin=\"server\"" \
  "$(json_fields "$tmp/err" code grpc_code retryable exit_code origin)"
check "json: one line, nothing else" 1 "$(wc -l <"$tmp/err")"
CONCH_JSON_ERRORS=1 "$CONCH" --url http://127.0.0.1:1 ps 2>"$tmp/err"
check "CONCH_JSON_ERRORS=1: unavailable is retryable" \
  'code="unavailable" grpc_code=14 retryable=true exit_code=255 origin="local"' \
  "$(json_fields "$tmp/err" code grpc_code retryable exit_code origin)"
# Found before the parser reaches the flag, after the command's name.
"$CONCH" ps --bogus --json-errors 2>"$tmp/err"
check "json: a usage error met before the flag" \
  'code="invalid_argument" exit_code=2 origin="cli"' \
  "$(json_fields "$tmp/err" code exit_code origin)"
# The process's own stderr ends mid-line: conch's object still has a
# line of its own, the last one.
"$CONCH" $U --json-errors --timeout 1 run -- sh -c 'printf partial >&2; sleep 30' \
  2>"$tmp/err"
code=$?
check "json: the lifetime, after a partial line of the process's" \
  "code=\"deadline_exceeded\" exit_code=124 pid_known=true" \
  "$(json_fields "$tmp/err" code exit_code pid | sed 's/ pid=[0-9][0-9]*$/ pid_known=true/')"
check "json: ... the exit code matches" 124 "$code"
check "json: ... the partial line kept" partial "$(head -1 "$tmp/err")"
# The process's own exit writes no object.
"$CONCH" $U --json-errors run -- sh -c 'echo own >&2; exit 252' 2>"$tmp/err"
check "json: the process's own 252" "252 own" "$? $(cat "$tmp/err")"
if [ $have_node = 1 ]; then
  "$CONCH" $E --json-errors ps 2>"$tmp/err"
  code=$?
  check "json: details (type, base64 value), aborted is retryable" \
    "code=\"aborted\" message=\"try again\" details=[{\"type\": \"google.rpc.RetryInfo\", \"value\": \"CgIIAQ==\"}] retryable=true exit_code=254 http_status=409" \
    "$(json_fields "$tmp/err" code message details retryable exit_code http_status)"
  check "json: aborted exits 254" 254 "$code"
fi

# ---- 10. run --max-output ----------------------------------------------
"$CONCH" $U run --max-output 1K -- sh -c 'yes | head -c 50M; echo e >&2; exit 5' \
  >"$tmp/out" 2>"$tmp/err"
check "run --max-output 1K: the process's exit code" 5 "$?"
check "run --max-output 1K: 1024 bytes shown" 1024 "$(wc -c <"$tmp/out")"
check "run --max-output 1K: says how much was not shown" 1 \
  "$(grep -c '^conch: stdout cut at --max-output 1024 bytes: 52427776 more were read and not shown$' "$tmp/err")"
check "run --max-output 1K: stderr under it, whole" e "$(head -1 "$tmp/err")"
"$CONCH" $U run --max-output lots -- true 2>/dev/null
check "run --max-output lots: 2" 2 "$?"

# ---- The completion of kill @ and attach --------------------------------
"$CONCH" $U start --tag edge-web -- sleep 63 >"$tmp/pid"
complete_words() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
    _conch; echo "${COMPREPLY[*]}"' _ "$DOC/conch.bash" "$@"
}
check "completing 'kill @' lists the tags" @edge-web \
  "$(complete_words "$CONCH" $U kill @)"
check "completing 'attach @edge' after options" @edge-web \
  "$(complete_words "$CONCH" $U attach @edge)"
check "completing 'kill' '@' 'ed' (bash splits at @)" edge-web \
  "$(complete_words "$CONCH" $U kill -s TERM @ ed)"
check "completing 'kill 'the pid" "$(cat "$tmp/pid")" \
  "$(complete_words "$CONCH" $U kill "$(cut -c1-3 "$tmp/pid")" | tr ' ' '\n' |
    grep -x "$(cat "$tmp/pid")")"
"$CONCH" $U kill @edge-web
# No URL and no local server: nothing is asked, nothing started.
mkdir -m 700 "$tmp/xdg"
check "completing without a server starts none" "" \
  "$(XDG_RUNTIME_DIR=$tmp/xdg complete_words "$CONCH" kill @)"
check "... and no socket appeared" no \
  "$([ -e "$tmp/xdg/conch/serve.sock" ] && echo yes || echo no)"

[ "$fails" -eq 0 ] && echo "all edge checks passed"
exit $((fails > 0))
