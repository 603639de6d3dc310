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
cpid=""
cleanup() {
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

now() { date +%s.%N; }
mibs() { awk -v b="$bytes" -v s="$1" 'BEGIN {printf "%.0f", b / 1048576 / s}'; }

runs=0
start_server() {
  local i=0 port="" listen
  runs=$((runs + 1))
  listen=$work/listen.$runs
  "$conch" serve --listen 127.0.0.1:0 --no-token >"$listen" 2>"$work/err" &
  cpid=$!
  while [ -z "$port" ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "no LISTENING" >&2; exit 1; }
    sleep 0.1
    port=$(sed -n 's/^LISTENING \([0-9][0-9]*\)$/\1/p' "$listen" 2>/dev/null)
  done
  url=http://127.0.0.1:$port
}
stop_server() {
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$cpid/status")
  kill "$cpid"; wait "$cpid" 2>/dev/null || true
  cpid=""
}

head -c "$bytes" /dev/urandom >"$work/src"
echo "bytes: $bytes"
printf '| client | direction | MiB/s | server VmHWM (KiB) | client max RSS (KiB) |\n'
printf '|---|---|---|---|---|\n'
row() { # client direction seconds
  printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$(mibs "$3")" "$hwm" \
    "$(cat "$work/rss")"
}
verify() { cmp -s "$work/src" "$1" || { echo "$1 differs from the source" >&2; exit 1; }; }

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
    row "$client" "$dir" "$(awk -v s="$t0" -v e="$t1" 'BEGIN {print e - s}')"
  done
done
