#!/bin/sh
# /files of `conch serve` (tools/conch/serve_files.c) moving a big file
# with curl: an upload (application/octet-stream) and a download, over
# HTTP/1.1 and HTTP/2, then a download whose client reads at 1 MiB/s for a
# few seconds (a client that stops reading must hold nothing more).
# Prints throughput per transfer and conch serve's peak RSS (VmHWM, since
# its start) after each step, with the baseline RSS of an idle server for
# comparison: the peak must stay under 32 MiB.  As a peer in the same run,
# `cat` copies the same file on the same disk (the disk's own speed).
#
#   tools/bench/files.sh [BUILD_DIR]     (default: build)
#
# Environment: BYTES (default 1073741824), DIR (default: a directory in
# /tmp; it needs 2 x BYTES free).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
conch=$build/tools/conch/conch
bytes=${BYTES:-1073741824}
[ -x "$conch" ] || { echo "build first: $conch missing" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl missing" >&2; exit 1; }
work=${DIR:-$(mktemp -d /tmp/conch-files-bench-XXXXXX)}
cleanup() {
  [ -n "${cpid:-}" ] && kill "$cpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

hwm() { awk '/^VmHWM/ {print $2}' "/proc/$cpid/status"; }
now() { date +%s.%N; }
mibs() { awk -v b="$bytes" -v s="$1" -v e="$2" 'BEGIN {printf "%.0f", b / 1048576 / (e - s)}'; }

head -c "$bytes" /dev/urandom > "$work/src"
t0=$(now); cat "$work/src" > "$work/copy"; t1=$(now); rm -f "$work/copy"
echo "peer: cat of the file on the same disk: $(mibs "$t0" "$t1") MiB/s"

"$conch" serve --listen 127.0.0.1:0 --no-token > "$work/listen" 2>"$work/err" &
cpid=$!
i=0
while ! grep -q LISTENING "$work/listen" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 600 ] || { echo "no LISTENING" >&2; exit 1; }
  sleep 0.1
done
port=$(awk '{print $2}' "$work/listen")
url=http://127.0.0.1:$port
echo "conch serve idle: VmHWM $(hwm) KiB"

for mode in --http1.1 --http2-prior-knowledge; do
  t0=$(now)
  curl -sS $mode -o /dev/null -H 'content-type: application/octet-stream' \
    -X POST -T "$work/src" "$url/files?path=$work/up$mode"
  t1=$(now)
  cmp -s "$work/src" "$work/up$mode" || { echo "upload differs" >&2; exit 1; }
  echo "upload $mode: $(mibs "$t0" "$t1") MiB/s, VmHWM $(hwm) KiB"
  t0=$(now)
  curl -sS $mode -o "$work/down" "$url/files?path=$work/up$mode"
  t1=$(now)
  cmp -s "$work/src" "$work/down" || { echo "download differs" >&2; exit 1; }
  rm -f "$work/down" "$work/up$mode"
  echo "download $mode: $(mibs "$t0" "$t1") MiB/s, VmHWM $(hwm) KiB"
done

# A reader at 1 MiB/s for 5 s: the server holds its budget, not the file.
curl -sS --limit-rate 1M --max-time 5 -o /dev/null "$url/files?path=$work/src" || true
echo "slow reader (1 MiB/s, 5 s): VmHWM $(hwm) KiB"
