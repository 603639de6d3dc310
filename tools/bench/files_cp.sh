#!/bin/bash
# A big file up to and down from `conch serve`'s /files: conch's CLI
# (`conch cp`, over HTTP/2 and HTTP/1.1) against the E2B SDK (npm e2b,
# files.write from a stream and files.read as a stream, HTTP/1.1 as the
# SDK speaks it) in the same run, on the same file and disk.  Each transfer
# gets a fresh server, so the server's peak RSS (VmHWM) is that
# transfer's; the client's peak RSS comes from /usr/bin/time.  Every copy
# is compared with the source.
#
#   tools/bench/files_cp.sh [BUILD_DIR]     (default: build)
#
# Environment: BYTES (default 1073741824), DIR (default: a directory in
# /tmp; it needs 3 x BYTES free), SERVER (conch, the default, or node: the
# envd-like connect-node peer of tests/api/node, h2c for `conch cp` and
# --http1 for the HTTP/1.1 clients, as one Node server speaks one).  The SDK is the one tests/ pins (`npm
# ci` in tests): tests/node_modules/e2b.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
conch=$build/tools/conch/conch
bytes=${BYTES:-1073741824}
server=${SERVER:-conch}
[ -x "$conch" ] || { echo "build first: $conch missing" >&2; exit 1; }
[ -d "$top/tests/node_modules/e2b" ] || {
  echo "the SDK is missing: npm ci in tests" >&2; exit 1; }
work=${DIR:-$(mktemp -d /tmp/conch-cp-bench-XXXXXX)}
. "$top/tools/bench/files_common.sh"

head -c "$bytes" /dev/urandom >"$work/src"
echo "server: $server"
table_head

for client in "conch cp" "conch cp --http1.1" "e2b SDK"; do
  for dir in up down; do
    case "$client" in
      "conch cp") start_server ;;
      *) start_server h1 ;;
    esac
    rm -f "$work/up" "$work/down"
    [ $dir = down ] && cp "$work/src" "$work/up"
    t0=$(now)
    case "$client" in
      "e2b SDK")
        if [ $dir = up ]; then
          E2B_SANDBOX_URL=$url /usr/bin/time -f %M -o "$work/rss" \
            node "$top/tools/bench/files_sdk.mjs" up "$work/src" "$work/up" >/dev/null
        else
          E2B_SANDBOX_URL=$url /usr/bin/time -f %M -o "$work/rss" \
            node "$top/tools/bench/files_sdk.mjs" down "$work/up" "$work/down" >/dev/null
        fi ;;
      *)
        flags=${client#conch cp}
        if [ $dir = up ]; then
          /usr/bin/time -f %M -o "$work/rss" "$conch" --url "$url" $flags cp \
            "$work/src" ":$work/up"
        else
          /usr/bin/time -f %M -o "$work/rss" "$conch" --url "$url" $flags cp \
            ":$work/up" "$work/down"
        fi ;;
    esac
    t1=$(now)
    stop_server
    verify "$work/$dir"
    row "$client" "$dir" "$t0" "$t1"
  done
done
