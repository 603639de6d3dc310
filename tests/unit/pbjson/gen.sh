#!/bin/sh
# Regenerates the JSON codec's test data in this folder (test_pbjson.c):
#
#   types.pb-c.[ch], types2.pb-c.[ch]   protoc-c output for types.proto and
#                                       types2.proto (proto3 `optional` is
#                                       rewritten first, as proto/regen.sh
#                                       does for process.proto)
#   google/protobuf/*.pb-c.[ch]         protoc-c output for the well-known
#                                       types types.proto uses (their
#                                       .proto files come with protoc)
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
inc=${PROTOBUF_INCLUDE:-/usr/include} # where protoc's google/protobuf/ is
(cd "$tmp" && protoc --proto_path=. --proto_path="$inc" --c_out=. types.proto \
  types2.proto)
cp "$tmp/types.pb-c.c" "$tmp/types.pb-c.h" "$tmp/types2.pb-c.c" \
  "$tmp/types2.pb-c.h" "$here/"

# The well-known types.  Their sources include each other as
# "google/protobuf/x.pb-c.h", which only resolves from this folder; the
# test compiles them from their own folder, so they name siblings plainly.
wkt="any duration empty field_mask struct timestamp wrappers"

mkdir -p "$tmp/wkt" "$here/google/protobuf"
(cd "$tmp/wkt" && protoc --proto_path="$inc" --c_out=. \
  $(for w in $wkt; do echo "google/protobuf/$w.proto"; done))
for w in $wkt; do
  for x in c h; do
    sed 's|#include "google/protobuf/\([a-z_]*\.pb-c\.h\)"|#include "\1"|' \
      "$tmp/wkt/google/protobuf/$w.pb-c.$x" >"$here/google/protobuf/$w.pb-c.$x"
  done
done

# protobuf-es reads the originals (proto3 `optional` as such).
protoc --proto_path="$here" --proto_path="$top/proto" --proto_path="$inc" \
  --include_imports \
  --descriptor_set_out="$tmp/set.pb" types.proto types2.proto \
  process/process.proto
node "$here/vectors.mjs" "$tmp/set.pb" >"$tmp/vectors.json"
mv "$tmp/vectors.json" "$here/vectors.json"
echo "regenerated $here"
