#!/bin/sh
# Regenerates vectors.json, the JSON codec's test vectors (test_pbjson.c):
# what protobuf-es makes of the cases in vectors.mjs.  (The protoc-c output
# the tests compile is made at build time by gen_c.sh.)
#
# Needs protoc and node with the test peers' packages (npm ci in tests).
# ctest never runs this: vectors.json is committed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

inc=${PROTOBUF_INCLUDE:-/usr/include} # where protoc's google/protobuf/ is

# protobuf-es reads the originals (proto3 `optional` as such).
protoc --proto_path="$here" --proto_path="$top/proto" --proto_path="$inc" \
  --include_imports \
  --descriptor_set_out="$tmp/set.pb" types.proto types2.proto \
  process/process.proto
node "$here/vectors.mjs" "$tmp/set.pb" >"$tmp/vectors.json"
mv "$tmp/vectors.json" "$here/vectors.json"
echo "regenerated $here"
