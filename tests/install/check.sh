#!/bin/sh
# Installs the build in BUILD_DIR into a scratch prefix and builds a consumer
# with find_package(conch) and with pkg-config, then runs both.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$here" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
"$scratch/consumer/consumer_static"
PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
cc -o "$scratch/pc" "$here/consumer.c" $(pkg-config --cflags --libs conch)
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/pc"
echo "install check: ok"
