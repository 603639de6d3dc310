#!/bin/bash
# `conch call` (issue 25) against grpc-js servers nobody here wrote
# (@grpc/grpc-js, gRPC over h2c, grpcjs_server.mjs) whose schema comes only
# from @grpc/reflection (protobufjs' descriptors, with relative type names):
#  - v1 and v1alpha served, as applications add ReflectionService: list,
#    list SERVICE, describe (service, message), a unary, a server stream,
#    a client stream and a bidi stream from -d @- (the bidi answered
#    message by message while stdin is open), an error with details
#    (decoded on stderr, in --json-errors), an unknown method; Connect
#    (the default protocol) refused with 415, with the --protocol hint;
#  - only v1alpha served, as older grpc-go / grpc-java servers do: the same
#    list, describe and calls through the fallback;
#  - no reflection: unimplemented (254), said once for both names, with the
#    --schema hint, and the call with --schema.
# Exits 77 (skipped) without tests/node_modules (npm ci in tests/).
#
#   test_call_grpcjs.sh /path/to/conch
set -u
CONCH=$1
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
for m in @grpc/grpc-js @grpc/proto-loader @grpc/reflection; do
  if [ ! -d "$here/../node_modules/$m" ]; then
    echo "SKIP: $m is not installed (npm ci in tests/)"
    exit 77
  fi
done
. "$here/../support/suite.sh"
unset CONCH_URL CONCH_TOKEN CONCH_TOKEN_FILE CONCH_JSON_ERRORS CONCH_USER \
  CONCH_PROTOCOL CONCH_CODEC CONCH_HTTP

start() { # name --reflection MODE
  local name=$1
  shift
  peer_start "$name" node "$here/grpcjs_server.mjs" "$top/tests/proto" "$@" || {
    echo "FAIL $name printed no LISTENING line within 120 s:"
    cat "$tmp/$name.err"
    exit 1
  }
  pids+=("$peer_pid")
}

SVC=conchtest.v1.TestService
err_json='{"error":{"code":9,"message":"not now","details":[{"type":"conchtest.v1.Header","value":"CgN3aHk="}]}}'

# The calls every server with reflection answers alike; $1 names it, $2
# is a word for its files.
calls() {
  local v=$1
  out=$("$CONCH" $U call list)
  check "$v: list exits 0" 0 $?
  has "$v: list names the service" "$SVC" "$out"
  out=$("$CONCH" $U call list $SVC)
  check "$v: list SERVICE, its methods one a line" \
    "$SVC/Unary $SVC/ServerStream $SVC/ClientStream $SVC/Bidi $SVC/Unimplemented" \
    "$(printf '%s\n' "$out" | tr '\n' ' ' | sed 's/ $//')"
  out=$("$CONCH" $U call describe $SVC)
  has "$v: describe a service: a bidi method" \
    "rpc Bidi(stream .conchtest.v1.Request) returns (stream .conchtest.v1.Response);" \
    "$out"
  has "$v: describe a message (its relative type names resolved)" \
    ".conchtest.v1.ErrorSpec error = 5;" \
    "$("$CONCH" $U call describe conchtest.v1.Request)"

  check "$v: unary" '{"payload":"aGk="}' \
    "$("$CONCH" $U call $SVC/Unary -d '{"payload":"aGk="}')"
  check "$v: a server stream of 3, as they come" \
    '{"payload":"aGk="} {"payload":"aGk=","index":1} {"payload":"aGk=","index":2}' \
    "$("$CONCH" $U call $SVC/ServerStream -d '{"payload":"aGk=","responseCount":3}' |
      tr '\n' ' ' | sed 's/ $//')"
  check "$v: a client stream from -d @-" '{"messageCount":3,"totalBytes":"3"}' \
    "$(printf '{"payload":"MQ=="}\n{"payload":"Mg=="} {"payload":"Mw=="}' |
      "$CONCH" $U call $SVC/ClientStream -d @-)"

  # Bidi from stdin: each message answered before the next is written
  # (files of this round's own: a background job opens them later).
  local b=$tmp/bidi-$2 bidi bin
  mkfifo "$b.in"
  "$CONCH" $U call $SVC/Bidi -d @- <"$b.in" >"$b.out" 2>"$b.err" &
  bidi=$!
  exec {bin}>"$b.in"
  lines() { [ -f "$b.out" ] && [ "$(wc -l <"$b.out")" -ge "$1" ]; }
  printf '{"payload":"MQ=="}\n' >&$bin
  wait_until 60 lines 1
  check "$v: bidi, the first answer while stdin is open" 1 \
    "$(wc -l <"$b.out")"
  printf '{"payload":"Mg=="} {"payload":"Mw=="}\n' >&$bin
  wait_until 60 lines 3
  exec {bin}>&-
  wait "$bidi"
  check "$v: bidi exits 0 once stdin ends" 0 $?
  check "$v: bidi, the echoes in order" \
    '{"payload":"MQ=="} {"payload":"Mg=="} {"payload":"Mw=="}' \
    "$(tr '\n' ' ' <"$b.out" | sed 's/ $//')"

  check "$v: an error exits by its code (failed_precondition 253)" 253 \
    "$(rc "$CONCH" $U call $SVC/Unary -d "$err_json")"
  err=$("$CONCH" $U call $SVC/Unary -d "$err_json" 2>&1 >/dev/null)
  has "$v: the error's status" "conch: failed_precondition: not now" "$err"
  has "$v: its detail, decoded from the reflected schema" \
    'conch: detail conchtest.v1.Header: {"name":"why"}' "$err"
  err=$("$CONCH" $U --json-errors call $SVC/Unary -d "$err_json" 2>&1 \
    >/dev/null)
  has "$v: --json-errors with the details" \
    '"code":"failed_precondition","grpc_code":9,"message":"not now","details":[{"type":"conchtest.v1.Header","value":"CgN3aHk="}]' \
    "$err"
  err=$(printf '{"payload":"MQ=="} {"error":{"code":5,"message":"gone"}}' |
    "$CONCH" $U call $SVC/Bidi -d @- 2>&1)
  has "$v: bidi ending with an error: the answer before it" \
    '{"payload":"MQ=="}' "$err"
  has "$v: bidi ending with an error: the status" "conch: not_found: gone" \
    "$err"
  check "$v: grpc-js's unimplemented exits 254" 254 \
    "$(rc "$CONCH" $U call $SVC/Unimplemented)"
  check "$v: a method the schema lacks exits 252" 252 \
    "$(rc "$CONCH" $U call $SVC/Nope)"
}

# ---- v1 and v1alpha ---------------------------------------------------------
start both --reflection both
U="--url http://127.0.0.1:$peer_port --protocol grpc"
calls "v1+v1alpha" both
# Connect (the default) to a gRPC-only server: its 415, and the hint.
err=$("$CONCH" --url "http://127.0.0.1:$peer_port" call list 2>&1)
check "Connect to grpc-js: exits by unknown (254)" 254 \
  "$(rc "$CONCH" --url "http://127.0.0.1:$peer_port" call list)"
has "Connect to grpc-js: the status" "HTTP status 415" "$err"
has "Connect to grpc-js: the hint" "try --protocol grpc" "$err"

# ---- v1alpha only -----------------------------------------------------------
start alpha --reflection v1alpha
U="--url http://127.0.0.1:$peer_port --protocol grpc"
calls "v1alpha only" alpha

# ---- no reflection ----------------------------------------------------------
start none --reflection none
U="--url http://127.0.0.1:$peer_port --protocol grpc"
check "no reflection: list exits 254 (unimplemented)" 254 \
  "$(rc "$CONCH" $U call list)"
err=$("$CONCH" $U call $SVC/Unary 2>&1)
has "no reflection: said once for both names" \
  "the server has no reflection: neither grpc.reflection.v1.ServerReflection nor grpc.reflection.v1alpha.ServerReflection is served" \
  "$err"
has "no reflection: the hint" "give the schema with --schema FILE" "$err"
check "no reflection: the call with --schema" '{"payload":"aGk="}' \
  "$("$CONCH" $U call --schema "$top/tests/proto/conchtest/v1/test.proto" \
    $SVC/Unary -d '{"payload":"aGk="}')"

if [ "$fails" -ne 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
