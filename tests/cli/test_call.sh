#!/bin/bash
# `conch call` (issue 25), a generic RPC client in JSON:
#  - against `conch serve` through its reflection: list, list SERVICE,
#    describe (service, message, method, enum), unary, a server stream,
#    an error (exit code by status, --json-errors), -H on the reflection
#    calls too (a server that wants a token), --protocol grpc / grpc-web,
#    --http1.1, --codec json, --max-time, TLS with --cacert, usage errors,
#    and without --url the local server, started as every command does;
#  - against the server core's conchtest service (server_core_peer) with
#    --schema (a .proto through protoc, a binary FileDescriptorSet): a bidi
#    stream from stdin, each message answered before the next is written
#    (sent as read), a client stream from @FILE, an error with details
#    (decoded on stderr, base64 in --json-errors), no reflection there;
#  - against the greet example (examples/greet/greet_server), reflection
#    registered as an application does: list, describe, unary, a stream;
#  - against connect-node's envd-like peer (tests/api/node/server.mjs),
#    when tests/node_modules is there: --schema process.proto over Connect,
#    gRPC and gRPC-Web.
#
#   test_call.sh /path/to/conch /path/to/server_core_peer /path/to/greet_server
set -u
CONCH=$1
PEER=$2
GREET=${3:-} # empty: a build without the examples
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
. "$here/../support/suite.sh"
unset CONCH_URL CONCH_TOKEN CONCH_TOKEN_FILE CONCH_JSON_ERRORS CONCH_USER \
  CONCH_PROTOCOL CONCH_CODEC CONCH_HTTP

start() { # name CMD...
  local name=$1
  shift
  peer_start "$name" "$@" || {
    echo "FAIL $name printed no LISTENING line within 120 s:"
    cat "$tmp/$name.err"
    exit 1
  }
  pids+=("$peer_pid")
}

# ---- conch serve, through reflection ---------------------------------------
start serve "$CONCH" serve --listen 127.0.0.1:0 --no-token
U="--url http://127.0.0.1:$peer_port"

out=$("$CONCH" $U call list)
check "list: exit 0" 0 $?
has "list: process.Process" "process.Process" "$out"
has "list: grpc.health.v1.Health" "grpc.health.v1.Health" "$out"
has "list: grpc.reflection.v1.ServerReflection" \
  "grpc.reflection.v1.ServerReflection" "$out"
out=$("$CONCH" $U call list process.Process)
has "list SERVICE: its methods as call takes them" "process.Process/Start" \
  "$out"
check "list SERVICE: one a line" 8 "$(printf '%s\n' "$out" | wc -l)"
out=$("$CONCH" $U call describe process.Process)
has "describe a service: a server stream" \
  "rpc Start(.process.StartRequest) returns (stream .process.StartResponse);" \
  "$out"
has "describe a service: a client stream" \
  "rpc StreamInput(stream .process.StreamInputRequest)" "$out"
has "describe a message" "string tag = 3;" \
  "$("$CONCH" $U call describe .process.StartRequest)"
has "describe a method" "rpc process.Process.List(.process.ListRequest)" \
  "$("$CONCH" $U call describe process.Process.List)"
has "describe an enum" "SIGNAL_SIGKILL = 9;" \
  "$("$CONCH" $U call describe process.Signal)"
check "describe an unknown symbol exits 252" 252 \
  "$(rc "$CONCH" $U call describe no.Such)"

out=$("$CONCH" $U call process.Process/List)
check "unary: exit 0" 0 $?
check "unary: the response as one JSON line" 1 \
  "$(printf '%s\n' "$out" | grep -c '^{.*}$')"
start_json='{"process":{"cmd":"sh","args":["-c","echo hi; exit 3"]}}'
out=$("$CONCH" $U call process.Process/Start -d "$start_json")
check "server stream: exit 0" 0 $?
check "server stream: start, data, end" 3 "$(printf '%s\n' "$out" | wc -l)"
has "server stream: stdout in base64" '{"event":{"data":{"stdout":"aGkK"}}}' \
  "$out"
has "server stream: the end" '"exitCode":3' "$out"
printf '%s' "$start_json" >"$tmp/start.json"
has "-d @FILE" '"exitCode":3' \
  "$("$CONCH" $U call process.Process/Start -d @"$tmp/start.json")"
has "-d @- (one message for a server stream)" '"exitCode":3' \
  "$("$CONCH" $U call process.Process/Start -d @- <"$tmp/start.json")"
for p in "--protocol grpc" "--protocol grpc-web" "--http1.1" \
  "--http1.1 --protocol grpc-web" "--codec json" "--http2 --protocol grpc"; do
  has "server stream, $p" '"exitCode":3' \
    "$("$CONCH" $U $p call process.Process/Start -d "$start_json")"
done

sig='{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}'
check "an error exits by its code (not_found 252)" 252 \
  "$(rc "$CONCH" $U call process.Process/SendSignal -d "$sig")"
err=$("$CONCH" $U call process.Process/SendSignal -d "$sig" 2>&1 >/dev/null)
has "an error: its code and message" \
  "conch: not_found: process with pid 999999 not found" "$err"
err=$("$CONCH" $U --json-errors call process.Process/SendSignal -d "$sig" \
  2>&1 >/dev/null)
has "--json-errors: the object" '"code":"not_found","grpc_code":5' "$err"
has "--json-errors: exit_code and origin" '"exit_code":252,"origin":"server"' \
  "$err"
check "--max-time: deadline_exceeded exits 124" 124 \
  "$(rc "$CONCH" $U call --max-time 0.5 process.Process/Start \
    -d '{"process":{"cmd":"sleep","args":["30"]}}')"
# --service-config: a gRPC service config; what is wrong is said, exit 2.
cfg='{"methodConfig":[{"name":[{"service":"process.Process"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}'
check "--service-config: a call under a retry policy" 0 \
  "$(rc "$CONCH" $U call --service-config "$cfg" process.Process/List)"
printf '%s' "$cfg" >"$tmp/sc.json"
check "--service-config @FILE" 0 \
  "$(rc "$CONCH" $U call --service-config "@$tmp/sc.json" process.Process/List)"
err=$("$CONCH" $U call --service-config '{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":1}}]}' process.Process/List 2>&1 >/dev/null)
check "--service-config: a bad policy exits 2" 2 \
  "$(rc "$CONCH" $U call --service-config '{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":1}}]}' process.Process/List)"
has "--service-config: what is wrong" "maxAttempts must be an integer" "$err"
# --target: a static address; --url still names the authority and scheme.
check "--target: the call goes to the static address" 0 \
  "$(rc "$CONCH" --url http://127.0.0.1:1 call --target "127.0.0.1:$peer_port" \
    process.Process/List)"
check "--lb round_robin --target" 0 \
  "$(rc "$CONCH" --url http://127.0.0.1:1 call --lb round_robin \
    --target "127.0.0.1:$peer_port" process.Process/List)"
check "--lb pick_first over the URL's host" 0 \
  "$(rc "$CONCH" $U call --lb pick_first process.Process/List)"
check "--lb: an unknown policy exits 2" 2 \
  "$(rc "$CONCH" $U call --lb random process.Process/List)"
check "--target: a host name exits 2" 2 \
  "$(rc "$CONCH" $U call --target "localhost:$peer_port" process.Process/List)"
check "--lb without --url exits 2" 2 \
  "$(rc env XDG_RUNTIME_DIR="$tmp" "$CONCH" call --lb pick_first process.Process/List)"
check "an unknown method exits 252" 252 \
  "$(rc "$CONCH" $U call process.Process/Nope)"
check "an unknown service exits 252" 252 \
  "$(rc "$CONCH" $U call no.Such/Method)"
check "JSON that does not fit the type exits 2" 2 \
  "$(rc "$CONCH" $U call process.Process/Start -d '{"process":{"cmd":1}}')"
check "JSON cut short exits 2" 2 \
  "$(rc "$CONCH" $U call process.Process/List -d '{"a":')"
check "two messages for a unary method exit 2" 2 \
  "$(rc "$CONCH" $U call process.Process/List -d '{} {}')"
# No --url: the local server on the private socket, as every command.
mkdir -m 700 "$tmp/xdg"
has "no --url: the local server, started" '"stdout":"aGkK"' \
  "$(XDG_RUNTIME_DIR=$tmp/xdg "$CONCH" call process.Process/Start \
    -d "$start_json")"
has "no --url: list" "process.Process" \
  "$(XDG_RUNTIME_DIR=$tmp/xdg "$CONCH" call list)"
XDG_RUNTIME_DIR=$tmp/xdg "$CONCH" serve --stop
check "no --url: serve --stop" 0 $?
check "a bad -H exits 2" 2 "$(rc "$CONCH" $U call -H 'no colon' list)"
check "describe without a symbol exits 2" 2 "$(rc "$CONCH" $U call describe)"
check "no server exits 255" 255 \
  "$(rc "$CONCH" --url http://127.0.0.1:1 call list)"

# -H reaches the reflection calls: a server that wants a token.
printf 'sekrit\n' >"$tmp/token"
start tok "$CONCH" serve --listen 127.0.0.1:0 --access-token-file "$tmp/token"
T="--url http://127.0.0.1:$peer_port"
check "no token: reflection refused (unauthenticated 251)" 251 \
  "$(rc "$CONCH" $T call list)"
has "-H X-Access-Token: reflection and the call" '"exitCode":3' \
  "$("$CONCH" $T call -H 'X-Access-Token: sekrit' process.Process/Start \
    -d "$start_json")"
has "--token: the same" "process.Process" \
  "$("$CONCH" $T --token-file "$tmp/token" call list)"

# TLS: --cacert, over HTTP/2 (ALPN) and HTTP/1.1.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" \
  -out "$tmp/cert.pem" -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
start tls "$CONCH" serve --listen 127.0.0.1:0 --access-token-file \
  "$tmp/token" --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem"
L="--url https://127.0.0.1:$peer_port --token-file $tmp/token"
has "TLS with --cacert: list" "process.Process" \
  "$("$CONCH" $L --cacert "$tmp/cert.pem" call list)"
has "TLS with --cacert, --http1.1: a server stream" '"exitCode":3' \
  "$("$CONCH" $L --cacert "$tmp/cert.pem" --http1.1 call \
    process.Process/Start -d "$start_json")"
check "TLS, a self-signed server without --cacert: unavailable (255)" 255 \
  "$(rc "$CONCH" $L call list)"

# ---- The server core's conchtest service, with --schema ---------------------
start core "$PEER"
P="--url http://127.0.0.1:$peer_port"
S="--schema $top/tests/proto/conchtest/v1/test.proto"
check "no reflection: unimplemented exits 254" 254 \
  "$(rc "$CONCH" $P call conchtest.v1.TestService/Unary)"
has "no reflection: the hint" "give the schema with --schema FILE" \
  "$("$CONCH" $P call conchtest.v1.TestService/Unary 2>&1)"
check "--schema .proto: list" "conchtest.v1.TestService" \
  "$("$CONCH" $P call $S list)"
if protoc --include_imports -I "$top/tests/proto" \
  -o "$tmp/test.fds" conchtest/v1/test.proto; then
  has "--schema FileDescriptorSet: unary" '{"payload":"aGk="' \
    "$("$CONCH" $P call --schema "$tmp/test.fds" \
      conchtest.v1.TestService/Unary -d '{"payload":"aGk="}')"
else
  echo "FAIL protoc -o"
  fails=$((fails + 1))
fi
# A JSON FileDescriptorSet, written by hand.
cat >"$tmp/echo.json" <<'EOF'
{"file": [{"name": "e.proto", "package": "conchtest.v1", "syntax": "proto3",
  "messageType": [
    {"name": "Request", "field": [
      {"name": "payload", "number": 1, "label": "LABEL_OPTIONAL",
       "type": "TYPE_BYTES", "jsonName": "data"}]},
    {"name": "Response", "field": [
      {"name": "payload", "number": 1, "label": "LABEL_OPTIONAL",
       "type": "TYPE_BYTES", "jsonName": "echoed"}]}],
  "service": [{"name": "TestService", "method": [
    {"name": "Unary", "inputType": ".conchtest.v1.Request",
     "outputType": ".conchtest.v1.Response"}]}]}]}
EOF
check "--schema JSON FileDescriptorSet, json_name both ways" \
  '{"echoed":"aGk="}' \
  "$("$CONCH" $P call --schema "$tmp/echo.json" \
    conchtest.v1.TestService/Unary -d '{"data":"aGk="}')"

# Bidi from stdin: each message is answered before the next is written.
mkfifo "$tmp/bidi.in"
"$CONCH" $P call $S conchtest.v1.TestService/Bidi -d @- \
  <"$tmp/bidi.in" >"$tmp/bidi.out" 2>"$tmp/bidi.err" &
bidi=$!
exec {bin}>"$tmp/bidi.in"
lines() { [ "$(wc -l <"$tmp/bidi.out")" -ge "$1" ]; }
printf '{"payload":"MQ=="}\n' >&$bin
wait_until 60 lines 1
check "bidi: the first answer while stdin is open" 1 \
  "$(wc -l <"$tmp/bidi.out")"
printf '{"payload":"Mg=="} {"payload":"Mw==",\n"responseCount":1}' >&$bin
wait_until 60 lines 3
check "bidi: the next two" 3 "$(wc -l <"$tmp/bidi.out")"
exec {bin}>&-
wait "$bidi"
check "bidi: exit 0 once stdin ends" 0 $?
check "bidi: the echoes in order" "MQ== Mg== Mw==" \
  "$(sed 's/.*"payload":"\([^"]*\)".*/\1/' "$tmp/bidi.out" | tr '\n' ' ' |
    sed 's/ $//')"
printf '{"payload":"MQ=="}\n{"payload":"Mg=="}\n' >"$tmp/cs.json"
check "client stream from @FILE" '{"messageCount":2,"totalBytes":"2"' \
  "$("$CONCH" $P call $S conchtest.v1.TestService/ClientStream \
    -d @"$tmp/cs.json" | cut -c1-34)"
check "client stream with no -d: no messages" '{}' \
  "$("$CONCH" $P call $S conchtest.v1.TestService/ClientStream)"

# An error with details: a conchtest.v1.Header {name: "why"}.
e='{"error":{"code":9,"message":"not now","details":[{"type":"conchtest.v1.Header","value":"CgN3aHk="}]}}'
check "an error with details exits by its code (253)" 253 \
  "$(rc "$CONCH" $P call $S conchtest.v1.TestService/Unary -d "$e")"
err=$("$CONCH" $P call $S conchtest.v1.TestService/Unary -d "$e" 2>&1)
has "details: the status" "conch: failed_precondition: not now" "$err"
has "details: decoded from the schema" \
  'conch: detail conchtest.v1.Header: {"name":"why"}' "$err"
err=$("$CONCH" $P --json-errors call $S conchtest.v1.TestService/Unary \
  -d "$e" 2>&1)
has "--json-errors: the details" \
  '"details":[{"type":"conchtest.v1.Header","value":"CgN3aHk="}]' "$err"
err=$(printf '{"payload":"MQ=="} {"error":{"code":5,"message":"gone"}}' |
  "$CONCH" $P call $S conchtest.v1.TestService/Bidi -d @- 2>&1)
has "bidi ending with an error: the answer before it" '"payload":"MQ=="' \
  "$err"
has "bidi ending with an error: the status" "conch: not_found: gone" "$err"

# ---- The greet example ------------------------------------------------------
if [ -z "$GREET" ]; then
  echo "skip greet: the examples are not built (CONCH_BUILD_EXAMPLES)"
else
mkfifo "$tmp/greet.in"
"$GREET" 127.0.0.1:0 <"$tmp/greet.in" >"$tmp/greet.out" 2>&1 &
pids+=($!)
exec {gin}>"$tmp/greet.in"
greet_up() { grep -q '^listening on port ' "$tmp/greet.out"; }
if wait_until 120 greet_up; then
  G="--url http://127.0.0.1:$(sed -n 's/^listening on port //p' "$tmp/greet.out")"
  has "greet: list" "greet.v1.Greeter" "$("$CONCH" $G call list)"
  has "greet: describe" \
    "rpc GreetMany(.greet.v1.GreetRequest) returns (stream .greet.v1.GreetResponse);" \
    "$("$CONCH" $G call describe greet.v1.Greeter)"
  check "greet: unary over gRPC" '{"greeting":"Hello, x!"}' \
    "$("$CONCH" $G --protocol grpc call greet.v1.Greeter/Greet -d '{"name":"x"}')"
  check "greet: a server stream of 3" 3 \
    "$("$CONCH" $G call greet.v1.Greeter/GreetMany -d '{"name":"x"}' | wc -l)"
else
  echo "FAIL greet_server did not start: $(cat "$tmp/greet.out")"
  fails=$((fails + 1))
fi
fi

# ---- connect-node's peer (not written here) ---------------------------------
if [ -d "$here/../node_modules/@connectrpc/connect-node" ]; then
  start node node "$here/../api/node/server.mjs" --port 0
  N="--url http://127.0.0.1:$peer_port"
  PS="--schema $top/proto/process/process.proto"
  for p in connect grpc grpc-web; do
    has "connect-node, $p: a server stream" '"stdout":"aGkK"' \
      "$("$CONCH" $N --protocol $p call $PS process.Process/Start \
        -d "$start_json")"
  done
  check "connect-node: its not_found exits 252" 252 \
    "$(rc "$CONCH" $N call $PS process.Process/SendSignal -d "$sig")"
else
  echo "skip connect-node: no tests/node_modules (npm ci in tests)"
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
