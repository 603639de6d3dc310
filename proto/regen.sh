#!/bin/sh
# Regenerates gen/ from proto/.
#
#   proto/regen.sh [--check] [--plugin PATH] [GEN_DIR]
#
#   GEN_DIR          the folder to rewrite (default: <repo>/gen)
#   --check          regenerate into a scratch folder and fail if GEN_DIR
#                    differs from it (CI's freshness check)
#   --plugin PATH    the protoc-gen-conch to run (the build's, from the
#                    `regen` targets); without it the plugin is compiled
#                    here from tools/protoc-gen-conch with ${CC:-cc}, so the
#                    check needs no build folder
#
# protoc-c writes *.pb-c.[ch] for PROTOS; protoc-gen-conch writes
# *.conch.[ch] for CONCH_PROTOS.  Each proto3 file is first passed through
# optional_to_oneof.awk (Debian's protoc-c 1.4.1 rejects proto3
# `optional`); the rewritten copy keeps the same relative path, so the
# generated files name the same source.  proto2 files go through unchanged:
# there `optional` is the ordinary label.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
check=0
plugin=""
while [ $# -gt 0 ]; do
  case $1 in
  --check) check=1; shift ;;
  --plugin) plugin=${2:?--plugin needs a path}; shift 2 ;;
  --) shift; break ;;
  -*) echo "regen.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
gen=${1:-$top/gen}

# The process and filesystem services (filesystem imports the well-known
# Timestamp), and the plugin's own view of protoc's messages.
# Then the conformance suite's schemas and the well-known types they import,
# for tools/conformance-client (their outputs sit two folders deep, out of
# libconch's gen/*/ globs).
PROTOS="process/process.proto filesystem/filesystem.proto
google/protobuf/timestamp.proto conch/plugin/descriptor.proto
conch/plugin/plugin.proto google/protobuf/any.proto google/protobuf/empty.proto
google/protobuf/struct.proto conformance/v1/config.proto
conformance/v1/service.proto conformance/v1/client_compat.proto
conformance/v1/server_compat.proto"
CONCH_PROTOS="process/process.proto filesystem/filesystem.proto
conformance/v1/service.proto"

# gRPC's health and reflection services, which the server core serves
# (runtime/server/server_svc.c).
GRPC_PROTOS="grpc/health/v1/health.proto grpc/reflection/v1/reflection.proto"
PROTOS="$PROTOS $GRPC_PROTOS"
CONCH_PROTOS="$CONCH_PROTOS $GRPC_PROTOS"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
mkdir -p "$scratch/src" "$scratch/out" "$scratch/bin"

for f in $PROTOS; do
  mkdir -p "$scratch/src/$(dirname "$f")"
  if grep -q '^syntax *= *"proto3"' "$here/$f"; then
    awk -f "$here/optional_to_oneof.awk" "$here/$f" >"$scratch/src/$f"
  else
    cp "$here/$f" "$scratch/src/$f"
  fi
done
(cd "$scratch/src" && protoc --proto_path=. --c_out="$scratch/out" $PROTOS)

if [ -z "$plugin" ]; then
  # Built from the descriptors just generated, so a change to them is
  # picked up in the same run.
  sg=$top/tools/protoc-gen-conch
  pbc=$(pkg-config --cflags --libs libprotobuf-c 2>/dev/null ||
    echo -lprotobuf-c)
  ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O1 -I"$sg" \
    -I"$scratch/out" -o "$scratch/bin/protoc-gen-conch" \
    "$sg"/main.c "$sg"/model.c "$sg"/emit.c "$sg"/emit_header.c \
    "$sg"/emit_source.c "$sg"/names.c "$sg"/util.c \
    "$scratch/out/conch/plugin/descriptor.pb-c.c" \
    "$scratch/out/conch/plugin/plugin.pb-c.c" $pbc
  plugin=$scratch/bin/protoc-gen-conch
fi
case $plugin in
/*) ;;
*) plugin=$(pwd)/$plugin ;;
esac
# The plugin reads the .proto files as they are (it takes proto3
# `optional`): the descriptors it embeds are the real ones.
(cd "$here" && protoc --proto_path=. \
  --plugin=protoc-gen-conch="$plugin" --conch_out="$scratch/out" \
  $CONCH_PROTOS)

if [ "$check" = 1 ]; then
  if ! diff -r -u "$scratch/out" "$gen" --exclude=CMakeLists.txt >&2; then
    echo "gen/ is stale: run 'cmake --build <build> --target regen'" >&2
    exit 1
  fi
  echo "gen/ is up to date"
  exit 0
fi
mkdir -p "$gen"
cp -R "$scratch/out/." "$gen/"
echo "regenerated $gen"
