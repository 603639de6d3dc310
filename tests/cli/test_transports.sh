#!/bin/bash
# The CLI over every transport it meets: an HTTP/1.1-only front for
# `conch serve` (h1_front.mjs: envd is an HTTP/1.1 server), `conch serve`
# over h2c and TLS, and connect-node's process server (tests/api/node)
# over h2c and HTTP/1.1; each protocol and codec the server speaks (both:
# Connect, gRPC, gRPC-Web; gRPC over HTTP/2 only).  Then the
# errors: a 401 on a stream, TLS, a missing option value; and ps.
#
#   test_transports.sh /path/to/conch
set -u
CONCH=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/peer.sh"
top=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
fails=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    fails=$((fails + 1))
  fi
}

# start NAME CMD...: runs a server whose stdin is a pipe we hold (it goes
# when we go) and sets $port from its "LISTENING <port>" line (120 s).
start() {
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

tok=transports-$$
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" \
  -out "$tmp/cert.pem" -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
start serve env CONCH_TOKEN=$tok "$CONCH" serve --listen 127.0.0.1:0
h2c=$port
start tls env CONCH_TOKEN=$tok "$CONCH" serve --listen 127.0.0.1:0 \
  --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem"
tls=$port
start front node "$here/h1_front.mjs" "$h2c"
front=$port
node_ok=1
if [ -d "$top/tests/node_modules/@connectrpc/connect-node" ]; then
  start node1 node "$top/tests/api/node/server.mjs" --http1 --port 0 \
    --access-token $tok
  node1=$port
  start node2 node "$top/tests/api/node/server.mjs" --port 0 \
    --access-token $tok
  node2=$port
else
  node_ok=0
  echo "note: no npm ci in tests; connect-node cases skipped"
fi

# A run through the CLI: stdout, stderr and the exit code.
try() { # name url flags...
  local name=$1 url=$2
  shift 2
  out=$("$CONCH" --url "$url" --token $tok "$@" run --env X=y -- \
    sh -c 'echo "out $X"; echo err >&2; exit 3' 2>"$tmp/err")
  check "$name: exit code" 3 "$?"
  check "$name: stdout" "out y" "$out"
  check "$name: stderr" err "$(cat "$tmp/err")"
}
for codec in proto json; do
  for http in "" --http1.1; do
    try "HTTP/1.1 front, connect $codec ${http:-auto}" \
      "http://127.0.0.1:$front" --codec $codec $http
  done
  for http in "" --http1.1 --http2; do
    for proto in connect grpc grpc-web; do
      [ $proto = grpc ] && [ "$http" = --http1.1 ] && continue
      try "conch serve h2c, $proto $codec ${http:-auto}" \
        "http://127.0.0.1:$h2c" --protocol $proto --codec $codec $http
      try "conch serve TLS, $proto $codec ${http:-auto}" \
        "https://127.0.0.1:$tls" --cacert "$tmp/cert.pem" --protocol $proto \
        --codec $codec $http
    done
  done
  try "HTTP/1.1 front, grpc-web $codec" "http://127.0.0.1:$front" \
    --protocol grpc-web --codec $codec
  if [ $node_ok = 1 ]; then
    for proto in connect grpc-web; do
      try "connect-node HTTP/1.1, $proto $codec" "http://127.0.0.1:$node1" \
        --http1.1 --protocol $proto --codec $codec
      CONCH_HTTP=1.1 CONCH_PROTOCOL=$proto CONCH_CODEC=$codec \
        try "connect-node HTTP/1.1, $proto $codec (CONCH_*)" \
        "http://127.0.0.1:$node1"
    done
    for proto in connect grpc grpc-web; do
      try "connect-node h2c, $proto $codec" "http://127.0.0.1:$node2" \
        --protocol $proto --codec $codec
    done
  fi
done
# stdin through the HTTP/1.1 front.
out=$(printf 'a\nb\n' | "$CONCH" --url "http://127.0.0.1:$front" --token $tok \
  run --stdin -- cat)
check "HTTP/1.1 front: run --stdin" "a
b" "$out"

# conch serve over gRPC and gRPC-Web: unary calls (List, a SendSignal
# that fails: its status comes in the trailers), stdin (StreamInput).
for proto in grpc grpc-web; do
  for http in "" --http1.1; do
    [ $proto = grpc ] && [ -n "$http" ] && continue
    G=(--url "http://127.0.0.1:$h2c" --token $tok --protocol $proto $http)
    pid=$("$CONCH" "${G[@]}" start --tag "$proto$http" -- sleep 60)
    check "conch serve $proto ${http:-h2c}: ps lists the process" 1 \
      "$("$CONCH" "${G[@]}" ps | awk -v p="$pid" -v t="$proto$http" \
        '$1 == p && $2 == t' | wc -l)"
    "$CONCH" "${G[@]}" kill "$pid"
    check "conch serve $proto ${http:-h2c}: kill" 0 "$?"
    "$CONCH" "${G[@]}" kill 999999 2>"$tmp/err"
    check "conch serve $proto ${http:-h2c}: kill of no process" \
      "252 conch: not_found: process with pid 999999 not found" \
      "$? $(cat "$tmp/err")"
    out=$(seq 1 20000 | "$CONCH" "${G[@]}" run --stdin -- sh -c 'wc -l; exit 4')
    check "conch serve $proto ${http:-h2c}: run --stdin" "4 20000" "$? $out"
  done
done
# gRPC needs HTTP/2: the client says so before sending anything.
"$CONCH" --url "http://127.0.0.1:$h2c" --token $tok --protocol grpc --http1.1 \
  ps 2>"$tmp/err"
check "grpc over --http1.1 refused" 1 "$(grep -c "gRPC needs HTTP/2" "$tmp/err")"
"$CONCH" --url "http://127.0.0.1:$front" --token $tok --http2 run -- true \
  2>"$tmp/err"
check "--http2 against the HTTP/1.1 front fails" 255 "$?"
check "--http2 against the HTTP/1.1 front: says why" 1 \
  "$(grep -c "does not speak HTTP/2 without TLS (h2c): leave out --http2" "$tmp/err")"
# Global options after the command's name.
out=$("$CONCH" run --url "http://127.0.0.1:$front" --token $tok --codec json \
  --cwd /tmp -- pwd)
check "global options after the command" /tmp "$out"

# A 401 on a stream says what the server said, as a unary call does.
for u in "http://127.0.0.1:$h2c" "http://127.0.0.1:$front"; do
  "$CONCH" --url "$u" --token wrong run -- true 2>"$tmp/err"
  check "401 on run ($u)" "conch: unauthenticated: unauthorized access, please provide a valid access token or method signing if supported" \
    "$(cat "$tmp/err")"
  "$CONCH" --url "$u" --token wrong ps 2>"$tmp/err2"
  check "401 on ps: the same message" "$(cat "$tmp/err")" "$(cat "$tmp/err2")"
done

# TLS errors name the file or the verification failure.
"$CONCH" --url "https://127.0.0.1:$tls" --cacert "$tmp/none.pem" run -- true \
  2>"$tmp/err"
check "--cacert missing" "conch: --cacert $tmp/none.pem: no such file" \
  "$(cat "$tmp/err")"
"$CONCH" --url "https://127.0.0.1:$tls" --token $tok run -- true 2>"$tmp/err"
check "self-signed without --cacert" 1 \
  "$(grep -c "certificate verify failed: self-signed certificate" "$tmp/err")"

# Usage errors name the option.
"$CONCH" run --cwd 2>"$tmp/err"
check "--cwd without a value: exit 2" 2 "$?"
check "--cwd without a value: message" "conch run: --cwd needs a value (DIR)" \
  "$(cat "$tmp/err")"
"$CONCH" --codec xml ps 2>"$tmp/err"
check "--codec xml" "conch: --codec: 'xml' is not one of proto, json" \
  "$(cat "$tmp/err")"
CONCH_PROTOCOL=h3 "$CONCH" ps 2>"$tmp/err"
check "CONCH_PROTOCOL=h3" "conch: CONCH_PROTOCOL: 'h3' is not one of connect, grpc, grpc-web" \
  "$(cat "$tmp/err")"

# run's lifetime.
"$CONCH" --url "http://127.0.0.1:$front" --token $tok --timeout 1 run -- \
  sleep 30 2>"$tmp/err"
check "run past its lifetime: 124, as timeout(1)" 124 "$?"
check "run past its lifetime: says so" 1 \
  "$(grep -c "reached its lifetime of 1 s and was killed; --timeout SEC (or CONCH_TIMEOUT)" "$tmp/err")"

# ps: arguments as a shell reads them back, and --json.
U=(--url "http://127.0.0.1:$front" --token $tok)
pid=$("$CONCH" "${U[@]}" start --tag quoted -- sh -c 'sleep 60' "a b" "it's" "" '$HOME' 'x"y')
line=$("$CONCH" "${U[@]}" ps | awk -v p="$pid" '$1 == p')
cmdline=${line#*quoted }
cmdline=${cmdline#"${cmdline%%[! ]*}"}
eval "set -- $cmdline"
check "ps: quoted words read back ($cmdline)" \
  "8|sh|-c|sleep 60|a b|it's||\$HOME|x\"y" "$#|$1|$2|${3:-}|${4:-}|${5:-}|${6:-}|${7:-}|${8:-}"
json=$("$CONCH" "${U[@]}" ps --json | grep "\"pid\":$pid,")
check "ps --json" "sh -c sleep 60|a b|it's||\$HOME|x\"y quoted" \
  "$(printf '%s' "$json" | node -e '
let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => {
  const o = JSON.parse(s);
  console.log(o.cmd, o.args.slice(0, 2).join(" ") + "|" + o.args.slice(2).join("|"), o.tag);
});')"
"$CONCH" "${U[@]}" kill "$pid"

# conch serve --user and --workdir: the user and cwd of requests that name
# none (root can name another user).
timeout 20 "$CONCH" serve --listen 127.0.0.1:0 --no-token --workdir rel 2>"$tmp/err"
check "serve --workdir relative refused" \
  "conch serve: --workdir rel: not an absolute path" "$(cat "$tmp/err")"
timeout 20 "$CONCH" serve --listen 127.0.0.1:0 --no-token --user no-such-user-x \
  2>"$tmp/err"
check "serve --user unknown refused" \
  "conch serve: --user no-such-user-x: no such user" "$(cat "$tmp/err")"
if [ "$(id -u)" = 0 ]; then
  mkdir "$tmp/wd" && chmod 755 "$tmp" "$tmp/wd"
  start defaults "$CONCH" serve --listen 127.0.0.1:0 --no-token \
    --user nobody --workdir "$tmp/wd"
  out=$("$CONCH" --url "http://127.0.0.1:$port" run -- sh -c 'id -un; pwd')
  check "serve --user nobody --workdir: a request naming neither" \
    "nobody
$tmp/wd" "$out"
  out=$("$CONCH" --url "http://127.0.0.1:$port" --user root run --cwd / -- \
    sh -c 'id -un; pwd')
  check "serve --user nobody: a request naming root and a cwd" "root
/" "$out"
else
  echo "skip serve --user nobody: not root"
fi

[ "$fails" -eq 0 ] && echo "all ok"
exit $((fails > 0))
