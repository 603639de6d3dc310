#!/bin/sh
# Regenerates the JSON codec's test data in this folder (test_pbjson.c):
#
#   types.pb-c.[ch], types2.pb-c.[ch]   protoc-c output for types.proto and
#                                       types2.proto (proto3 `optional` is
#                                       rewritten first, as proto/regen.sh
#                                       does for process.proto)
#   vectors.json                        what protobuf-es makes of the cases
#                                       in vectors.mjs
#
# Needs protoc, protoc-c and node with tests/server/node's packages (npm ci
# there).  ctest never runs this: the outputs are committed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

awk -f "$top/proto/optional_to_oneof.awk" "$here/types.proto" >"$tmp/types.proto"
cp "$here/types2.proto" "$tmp/types2.proto"
(cd "$tmp" && protoc --proto_path=. --c_out=. types.proto types2.proto)
cp "$tmp/types.pb-c.c" "$tmp/types.pb-c.h" "$tmp/types2.pb-c.c" \
  "$tmp/types2.pb-c.h" "$here/"

# protobuf-es reads the originals (proto3 `optional` as such).
protoc --proto_path="$here" --proto_path="$top/proto" \
  --descriptor_set_out="$tmp/set.pb" types.proto types2.proto \
  process/process.proto
node "$here/vectors.mjs" "$tmp/set.pb" >"$tmp/vectors.json"
mv "$tmp/vectors.json" "$here/vectors.json"
echo "regenerated $here"
