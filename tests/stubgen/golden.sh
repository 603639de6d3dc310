#!/bin/sh
# Golden files of protoc-gen-conch: runs the plugin on tests/stubgen/proto
# twice and compares the *.conch.[ch] it writes with each other (the output
# must be deterministic) and with tests/stubgen/golden/.
#
#   golden.sh check PLUGIN PROTOBUF_C_INCLUDE   fail on any difference
#   golden.sh update PLUGIN PROTOBUF_C_INCLUDE  rewrite golden/
#
# PROTOBUF_C_INCLUDE is where protobuf-c/protobuf-c.proto lives (renamed.proto
# imports it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mode=$1
plugin=$2
pbc=$3
case $plugin in
/*) ;;
*) plugin=$(pwd)/$plugin ;;
esac
PROTOS="stubgen.proto stubgen/nested/v1/nested.proto stubgen/renamed.proto"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
for run in 1 2; do
  mkdir -p "$scratch/$run"
  (cd "$here/proto" && protoc -I. -I"$pbc" \
    --plugin=protoc-gen-conch="$plugin" --conch_out="$scratch/$run" $PROTOS)
done
if ! diff -r "$scratch/1" "$scratch/2" >&2; then
  echo "golden.sh: two runs of the plugin differ" >&2
  exit 1
fi
case $mode in
check)
  if ! diff -r -u "$here/golden" "$scratch/1" >&2; then
    echo "golden.sh: output differs from tests/stubgen/golden; if the" \
      "change is meant, run: cmake --build <build> --target stubgen-golden" >&2
    exit 1
  fi
  echo "golden.sh: output matches tests/stubgen/golden"
  ;;
update)
  rm -rf "$here/golden"
  mkdir -p "$here/golden"
  cp -R "$scratch/1/." "$here/golden/"
  echo "golden.sh: rewrote $here/golden"
  ;;
*)
  echo "golden.sh: check or update, not $mode" >&2
  exit 2
  ;;
esac
