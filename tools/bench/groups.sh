#!/bin/sh
# Process groups in `conch serve` (issue 21, item 1), before and after in
# the same run: BEFORE_CONCH (a conch built from main, say) against this
# build's conch, one after the other, with the same client (serve-bench).
#   - expire N: N processes run with a lifetime (as `conch run` gives), so
#     that each is retained with its deadline; then their retention ends
#     together.  The server's CPU ticks over the expiry, and the longest
#     List meanwhile (a second client calling List in a loop).
#   - trees N: N trees whose grandchild ignores TERM, closed together
#     (TERM, the 2 s grace, KILL): seconds until the last grandchild is
#     gone, and the longest List meanwhile.
#
#   tools/bench/groups.sh BEFORE_CONCH [BUILD_DIR]    (default: build)
#
# Environment: EXPIRE (default "1000 10000"), TREES (default 100),
# RETAIN_MS (default: 3 s per 1,000 processes, at least 10 s: longer than
# starting them all).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
before=${1:?usage: groups.sh BEFORE_CONCH [BUILD_DIR]}
build=${2:-$top/build}
bench=$build/tools/bench/serve-bench
after=$build/tools/conch/conch
expire=${EXPIRE:-1000 10000}
trees=${TREES:-100}

[ -x "$bench" ] && [ -x "$after" ] && [ -x "$before" ] || {
  echo "build first: $bench, $after or $before missing" >&2
  exit 1
}
out=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
mkfifo "$out/l"

# serve BIN RETAIN_MS: starts it, sets spid and port.
serve() {
  "$1" serve --listen 127.0.0.1:0 --no-token --retention-ms "$2" \
    --max-processes 20000 >"$out/l" </dev/null &
  spid=$!
  read -r _ port <"$out/l"
}

unserve() {
  kill "$spid"
  wait "$spid" 2>/dev/null || true
  spid=
}

printf '%-8s %-6s %s\n' case server result
for n in $expire; do
  retain=${RETAIN_MS:-$((n * 3 > 10000 ? n * 3 : 10000))}
  for which in before after; do
    eval bin=\$$which
    serve "$bin" "$retain"
    r=$("$bench" expire "http://127.0.0.1:$port" "$n" "$retain" "$spid")
    unserve
    printf 'expire %-5s %-6s %s\n' "$n" "$which" "$r"
  done
done
for which in before after; do
  eval bin=\$$which
  serve "$bin" 30000
  r=$("$bench" trees "http://127.0.0.1:$port" "$trees")
  unserve
  printf 'trees %-6s %-6s %s\n' "$trees" "$which" "$r"
done
