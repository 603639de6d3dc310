#!/bin/bash
# `conch cp` against `conch serve`, over HTTP/2 and HTTP/1.1: a file both
# ways (byte for byte, a multi-MiB random one), into a directory that is
# there, stdin and stdout (-), -r for a tree both ways, and the exit code
# of each failure (no such source 252, a directory without -r 253, two
# local paths 2).  A progress line on a terminal (script(1)), none when
# stderr is not one.
#
#   test_cp.sh /path/to/conch [conch|node]
set -u
CONCH=$1
server=${2:-conch} # conch, or node: tests/api/node/server.mjs
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
. "$here/../support/suite.sh"
unset CONCH_URL CONCH_TOKEN CONCH_TOKEN_FILE CONCH_JSON_ERRORS CONCH_USER

same() { cmp -s "$1" "$2" && echo same || echo differ; }

# The server: conch serve, or with "node" the envd-like connect-node peer
# of tests/api/node (h2c; "h1" its second instance, with --http1).
start_server() { # name [--http1]
  local name=$1
  shift
  if [ "$server" = node ]; then
    if [ ! -d "$here/../node_modules/@connectrpc/connect-node" ]; then
      echo "FAIL no tests/node_modules: run \`npm ci\` in tests"
      exit 1
    fi
    peer_start "$name" node "$here/../api/node/server.mjs" --port 0 "$@"
  else
    peer_start "$name" "$CONCH" serve --listen 127.0.0.1:0 --no-token
  fi || {
    echo "FAIL the server printed no LISTENING line within 120 s:"
    cat "$tmp/$name.err"
    exit 1
  }
  pids+=("$peer_pid")
}
start_server serve
port_h2=$peer_port
port_h1=$peer_port
if [ "$server" = node ]; then
  start_server serve1 --http1 # one Node server speaks one HTTP version
  port_h1=$peer_port
fi

head -c $((6 * 1024 * 1024 + 321)) /dev/urandom >"$tmp/big.bin"
printf 'hello\n' >"$tmp/small.txt"
mkdir -p "$tmp/tree/a/b" "$tmp/tree/empty"
printf 'one' >"$tmp/tree/one"
printf 'two' >"$tmp/tree/a/two"
head -c 100000 /dev/urandom >"$tmp/tree/a/b/three.bin"

for mode in h2 h1; do
  U="--url http://127.0.0.1:$port_h2"
  [ $mode = h1 ] && U="--url http://127.0.0.1:$port_h1 --http1.1"
  r=$tmp/remote-$mode
  mkdir -p "$r"
  l=$tmp/local-$mode
  mkdir -p "$l"

  "$CONCH" $U cp "$tmp/big.bin" ":$r/new/dir/big.bin" 2>"$tmp/err"
  check "$mode: up, parents made" same "$(same "$tmp/big.bin" "$r/new/dir/big.bin")"
  check "$mode: no progress line off a terminal" "" "$(cat "$tmp/err")"
  "$CONCH" $U cp ":$r/new/dir/big.bin" "$l/big.bin"
  check "$mode: down" same "$(same "$tmp/big.bin" "$l/big.bin")"
  "$CONCH" $U cp "$tmp/small.txt" ":$r/new"
  check "$mode: up into a directory keeps the name" same \
    "$(same "$tmp/small.txt" "$r/new/small.txt")"
  "$CONCH" $U cp ":$r/new/small.txt" "$l"
  check "$mode: down into a directory keeps the name" same \
    "$(same "$tmp/small.txt" "$l/small.txt")"
  printf 'from stdin' | "$CONCH" $U cp - ":$r/stdin.txt"
  check "$mode: - as the source is stdin" "from stdin" "$(cat "$r/stdin.txt")"
  check "$mode: - as the destination is stdout" "from stdin" \
    "$("$CONCH" $U cp ":$r/stdin.txt" -)"
  : >"$tmp/empty"
  "$CONCH" $U cp "$tmp/empty" ":$r/empty"
  check "$mode: an empty file" "0" "$(stat -c %s "$r/empty")"

  "$CONCH" $U cp -r "$tmp/tree" ":$r/tree"
  check "$mode: -r up" "" "$(diff -r "$tmp/tree" "$r/tree")"
  "$CONCH" $U cp -r ":$r/tree" "$l/tree"
  check "$mode: -r down" "" "$(diff -r "$tmp/tree" "$l/tree")"
  check "$mode: -r down keeps the empty directory" yes \
    "$([ -d "$l/tree/empty" ] && echo yes)"

  check "$mode: a missing source exits 252" 252 \
    "$(rc "$CONCH" $U cp ":$r/not-there" "$l/x")"
  check "$mode: nothing left of a failed download" no \
    "$([ -e "$l/x" ] && echo yes || echo no)"
  check "$mode: a directory without -r exits 253" 253 \
    "$(rc "$CONCH" $U cp ":$r/tree" "$l/t2")"
  check "$mode: a local directory without -r exits 253" 253 \
    "$(rc "$CONCH" $U cp "$tmp/tree" ":$r/t2")"
  check "$mode: a missing local source exits 253" 253 \
    "$(rc "$CONCH" $U cp "$tmp/nope" ":$r/t3")"
done
# On a terminal (script(1) gives one): a progress line that ends at 100%.
if command -v script >/dev/null; then
  U="--url http://127.0.0.1:$port_h2"
  out=$(script -qec "'$CONCH' $U cp '$tmp/big.bin' ':$tmp/remote-h2/tty.bin'" /dev/null |
    tr '\r' '\n' | grep -q '100%' && echo yes)
  check "a progress line on a terminal, ending at 100%" yes "$out"
  check "... and the copy is whole" same "$(same "$tmp/big.bin" "$tmp/remote-h2/tty.bin")"
fi
check "two local paths are a usage error" 2 "$(rc "$CONCH" cp a b)"
check "-r with - is a usage error" 2 "$(rc "$CONCH" cp -r - :/tmp/x)"

[ "$fails" -eq 0 ] && echo "all cp checks passed"
exit $((fails > 0))
