#!/bin/sh
# The client-only libconch (every CONCH_WITH_* off) against the full one:
#   sh tests/install/minimal.sh FULL_BUILD_DIR MINIMAL_BUILD_DIR
# The minimal build must have built conch, conch_static and
# protoc-gen-conch (what it installs).  Checks that the modules' libraries
# left libconch (NEEDED), conch.pc and the CMake package; that libconch
# still exports every symbol the full one does (the server's functions
# answer CONCH_ERR_UNSUPPORTED); and that an installed consumer builds with
# find_package(conch) and with pkg-config and runs (it checks features.h
# against the library and what the missing modules answer).  Prints the
# sizes and dependencies of both libraries.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
full=$1
min=$2
fail() {
  echo "minimal check: $*" >&2
  exit 1
}
lib_full=$(readlink -f "$full/runtime/libconch.so")
lib_min=$(readlink -f "$min/runtime/libconch.so")
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for dep in libjansson libbrotlienc libbrotlidec libzstd libsnappy; do
  needed "$lib_full" | grep -q "^$dep\." ||
    fail "the full libconch does not need $dep: nothing to compare"
  if needed "$lib_min" | grep -q "^$dep\."; then
    fail "the client-only libconch still needs $dep"
  fi
done
nm -D --defined-only "$lib_full" | awk '{print $3}' | sort >"$min/exports.full"
nm -D --defined-only "$lib_min" | awk '{print $3}' | sort >"$min/exports.min"
if ! cmp -s "$min/exports.full" "$min/exports.min"; then
  diff "$min/exports.full" "$min/exports.min" >&2 || true
  fail "the client-only libconch does not export what the full one does"
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
cmake --install "$min" --prefix "$scratch/prefix" >/dev/null
[ -f "$scratch/prefix/include/conch/features.h" ] ||
  fail "conch/features.h was not installed"
[ ! -e "$scratch/prefix/bin/conch" ] ||
  fail "a build without the server installed the conch CLI"
PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
reqs=$(pkg-config --print-requires-private conch)
for dep in jansson libbrotlienc libbrotlidec libzstd snappy; do
  if echo "$reqs" | grep -q "^$dep\b"; then
    fail "conch.pc still requires $dep"
  fi
done
for m in server brotli zstd snappy json; do
  [ "$(pkg-config --variable="with_$m" conch)" = 0 ] ||
    fail "conch.pc says with_$m is not 0"
done
grep -q 'set(conch_WITH_SERVER OFF)' \
  "$scratch/prefix/lib/cmake/conch/conchConfig.cmake" ||
  fail "conchConfig.cmake does not say the server is out"
if grep -qE 'JANSSON|BROTLI|ZSTD|SNAPPY' \
  "$scratch/prefix/lib/cmake/conch/conchTargets.cmake"; then
  fail "the exported targets still name a module's library"
fi
cmake -S "$here" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  >/dev/null
cmake --build "$scratch/consumer" >/dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
"$scratch/consumer/consumer_static"
cc -o "$scratch/pc" "$here/consumer.c" $(pkg-config --cflags --libs conch)
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/pc"
cc -static-libgcc -o "$scratch/pc_static" "$here/consumer.c" \
  $(pkg-config --cflags conch) "$scratch/prefix/lib/libconch.a" \
  $(pkg-config --libs --static conch | sed 's/-lconch//')
"$scratch/pc_static"

for f in "$lib_full" "$lib_min"; do
  echo "minimal check: $(basename "$(dirname "$(dirname "$f")")"):" \
    "$(stat -c %s "$f") bytes"
  size "$f" | tail -1
  echo "  needs: $(needed "$f" | tr '\n' ' ')"
done
echo "minimal check: ok"
