#!/bin/bash
# Counts what one read of a big file through the Python package's
# sb.files costs in the client: allocations and memcpy/memmove of 4 KiB or
# more (tools/bench/python/count_copies.c, LD_PRELOAD), during the read
# only, blocking and asyncio, from a local `conch serve`.  With OLD_REV
# set, the same for the extension built from that revision's _conch.c
# against the same libconch.a (before/after in one run).  Deterministic
# up to the pieces the network makes; timings are not taken.
#
#   OLD_REV=<rev> tools/bench/python/read_copies.sh [BUILD_DIR]
#
# Environment: BYTES (default 268435456), PYTHON (default /usr/bin/python3).
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$top/build}
conch=$build/tools/conch/conch
py=${PYTHON:-/usr/bin/python3}
bytes=${BYTES:-268435456}
work=$(mktemp -d "${TMPDIR:-/tmp}/conch-read-copies-XXXXXX")
trap 'rm -rf "$work"' EXIT
. "$top/tools/bench/files_common.sh"

cc -O2 -shared -fPIC -o "$work/count.so" "$top/tools/bench/python/count_copies.c" -ldl
mods="new:$build/bindings/python"
if [ -n "${OLD_REV:-}" ]; then
  so=$(basename "$build"/bindings/python/conch/_conch*.so)
  mkdir -p "$work/old"
  cp -a "$build/bindings/python/conch" "$work/old/"
  git -C "$top" show "$OLD_REV:bindings/python/src/_conch.c" >"$work/old.c"
  cc -O2 -g -DNDEBUG -fPIC -shared -std=c11 -D_POSIX_C_SOURCE=200809L \
    -fvisibility=hidden -I"$top/runtime/include" -I"$build/runtime/include" \
    -I"$top/api/include" -I"$top/gen" \
    $("$py" -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])') \
    -o "$work/old/conch/$so" "$work/old.c" "$build/runtime/libconch.a" \
    -lnghttp2 -lprotobuf-c -lssl -lcrypto -lz -lhttp_parser -ljansson \
    -lbrotlienc -lbrotlidec -lzstd -lsnappy
  mods="old:$work/old $mods"
fi
head -c "$bytes" /dev/urandom >"$work/f"
echo warm >"$work/f.warm"
start_server
echo "bytes: $bytes"
echo '| module | mode | pieces | allocs >= 4 KiB | their bytes | copies >= 4 KiB | bytes copied |'
echo '|---|---|---|---|---|---|---|'
for m in $mods; do
  for mode in sync async; do
    set -- $(PYTHONPATH=${m#*:} LD_PRELOAD=$work/count.so \
      "$py" "$top/tools/bench/python/read_copies.py" "$mode" "$url" "$work/f")
    [ "$2" = "$bytes" ] || { echo "read $2 bytes of $bytes" >&2; exit 1; }
    echo "| ${m%%:*} | $mode | $1 | $3 | $4 | $5 | $6 |"
  done
done
stop_server
