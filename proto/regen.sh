#!/bin/sh
# Regenerates gen/ from proto/.
#
#   proto/regen.sh [GEN_DIR]        rewrite GEN_DIR (default: <repo>/gen)
#   proto/regen.sh --check [GEN_DIR] regenerate into a scratch folder and fail
#                                    if GEN_DIR differs from it
#
# Each .proto is first passed through optional_to_oneof.awk (Debian's
# protoc-c 1.4.1 rejects proto3 `optional`); the rewritten copy keeps the
# same relative path, so the generated files name the same source.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
gen=${1:-$top/gen}

PROTOS="process/process.proto"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
mkdir -p "$scratch/src" "$scratch/out"

for f in $PROTOS; do
  mkdir -p "$scratch/src/$(dirname "$f")"
  awk -f "$here/optional_to_oneof.awk" "$here/$f" >"$scratch/src/$f"
done
(cd "$scratch/src" && protoc --proto_path=. --c_out="$scratch/out" $PROTOS)

if [ "$check" = 1 ]; then
  if ! diff -r -u "$scratch/out" "$gen" --exclude='*.conch.*' \
       --exclude=CMakeLists.txt >&2; then
    echo "gen/ is stale: run 'cmake --build <build> --target regen'" >&2
    exit 1
  fi
  echo "gen/ is up to date"
  exit 0
fi
mkdir -p "$gen"
cp -R "$scratch/out/." "$gen/"
echo "regenerated $gen"
