#!/bin/bash
# A big file up to and down from `conch serve`'s /files through the Python
# package's sb.files (blocking and asyncio), against conch's CLI (`conch
# cp`, the same libconch calls from C) in the same run, on the same file
# and disk.  Each transfer gets a fresh server; the client's peak RSS comes
# from /usr/bin/time, the server's from its VmHWM.  Every copy is compared
# with the source.
#
#   tools/bench/python/files.sh [BUILD_DIR]     (default: build)
#
# Environment: BYTES (default 1073741824), DIR (default: a directory in
# /tmp; it needs 3 x BYTES free), PYTHON (default /usr/bin/python3).
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$top/build}
conch=$build/tools/conch/conch
py=${PYTHON:-/usr/bin/python3}
bytes=${BYTES:-1073741824}
[ -x "$conch" ] || { echo "build first: $conch missing" >&2; exit 1; }
[ -d "$build/bindings/python/conch" ] || {
  echo "no Python package in $build/bindings/python" >&2; exit 1; }
work=${DIR:-$(mktemp -d /tmp/conch-pyfiles-bench-XXXXXX)}
. "$top/tools/bench/files_common.sh"

head -c "$bytes" /dev/urandom >"$work/src"
echo "bytes: $bytes"
table_head

for client in "conch cp" "python sync" "python async"; do
  for dir in up down; do
    start_server
    rm -f "$work/up" "$work/down"
    [ $dir = down ] && cp "$work/src" "$work/up"
    t0=$(now)
    case "$client" in
      "conch cp")
        if [ $dir = up ]; then
          /usr/bin/time -f %M -o "$work/rss" "$conch" --url "$url" cp \
            "$work/src" ":$work/up"
        else
          /usr/bin/time -f %M -o "$work/rss" "$conch" --url "$url" cp \
            ":$work/up" "$work/down"
        fi ;;
      *)
        mode=${client#python }
        if [ $dir = up ]; then
          PYTHONPATH=$build/bindings/python /usr/bin/time -f %M -o "$work/rss" \
            "$py" "$top/tools/bench/python/files_py.py" "$mode" up "$url" \
            "$work/src" "$work/up"
        else
          PYTHONPATH=$build/bindings/python /usr/bin/time -f %M -o "$work/rss" \
            "$py" "$top/tools/bench/python/files_py.py" "$mode" down "$url" \
            "$work/up" "$work/down"
        fi ;;
    esac
    t1=$(now)
    stop_server
    verify "$work/$dir"
    row "$client" "$dir" "$t0" "$t1"
  done
done
