#!/bin/sh
# protoc-c output for the JSON codec's tests, made at build time into OUT
# (tests/CMakeLists.txt runs this):
#
#   OUT/pbjson/types.pb-c.[ch], OUT/pbjson/types2.pb-c.[ch]
#       types.proto and types2.proto (proto3 `optional` rewritten first, as
#       proto/regen.sh does for process.proto: protoc-c 1.4.1 refuses it)
#   OUT/google/protobuf/*.pb-c.[ch]
#       the well-known types types.proto uses (their .proto files come with
#       protoc, under PROTOBUF_INCLUDE, default /usr/include)
#
# The tests put OUT on their include path.
#
#   gen_c.sh OUT
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
out=$1
inc=${PROTOBUF_INCLUDE:-/usr/include}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

mkdir -p "$tmp/pbjson" "$out/pbjson"
awk -f "$top/proto/optional_to_oneof.awk" "$here/types.proto" \
  >"$tmp/pbjson/types.proto"
cp "$here/types2.proto" "$tmp/pbjson/types2.proto"
(cd "$tmp" && protoc --proto_path=pbjson --proto_path="$inc" \
  --c_out=pbjson pbjson/types.proto pbjson/types2.proto)
for f in types types2; do
  for x in c h; do
    cp "$tmp/pbjson/$f.pb-c.$x" "$out/pbjson/$f.pb-c.$x"
  done
done
protoc --proto_path="$inc" --c_out="$out" \
  $(for w in any duration empty field_mask struct timestamp wrappers; do
    echo "google/protobuf/$w.proto"
  done)
