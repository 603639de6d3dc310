#!/bin/sh
# The official Connect conformance runner (connectrpc/conformance's
# connectconformance, Go) against conch, the way the suite's users check
# an implementation:
#
#   official.sh [--full] client|server BUILD_DIR [RUNNER FLAGS...]
#   official.sh --locate BUILD_DIR
#
# client  tools/conformance-client against the runner's reference server,
#         every case tools/conformance-client/config.yaml selects (13,058;
#         about 30 s on 2 cores).
# server  tools/conformance-server driven by the runner's reference
#         clients (connect-go, grpc-go), with
#         tools/conformance-server/config.yaml: by default the CI subset
#         below; with --full every case (10,736; 8-13 minutes, the runner's
#         own pace).
# --locate  prints the runner's path (decompressed if need be), or why
#         there is none.
#
# The runner: $CONCH_CONFORMANCE_RUNNER (the binary, or an .xz of it; when
# set, that one or none), else ../shared/conformance/connectconformance.xz
# beside the checkout's top, else
# /work/shared/conformance/connectconformance.xz; an .xz is
# decompressed to BUILD_DIR/conformance/connectconformance.  With none,
# this says so on stdout and stderr and exits 77, which ctest reports as
# skipped (SKIP_RETURN_CODE), never as passed.
#
# Extra flags go to the runner (e.g. --run GLOB, -v, --known-failing @FILE).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

full=0
if [ "${1:-}" = --full ]; then
  full=1
  shift
fi
mode=${1:-}
build=${2:-}
if [ -z "$mode" ] || [ -z "$build" ]; then
  echo "usage: official.sh [--full] client|server BUILD_DIR [RUNNER FLAGS...]" >&2
  echo "       official.sh --locate BUILD_DIR" >&2
  exit 2
fi
shift 2
build=$(cd "$build" && pwd)

# The runner's path on stdout, or a message on stderr and status 1.
locate() {
  src=""
  if [ -n "${CONCH_CONFORMANCE_RUNNER:-}" ]; then
    # Named: that one or none.
    [ -f "$CONCH_CONFORMANCE_RUNNER" ] && src=$CONCH_CONFORMANCE_RUNNER
  else
    for c in "$top/../shared/conformance/connectconformance.xz" \
      /work/shared/conformance/connectconformance.xz; do
      if [ -f "$c" ]; then
        src=$c
        break
      fi
    done
  fi
  if [ -z "$src" ]; then
    if [ -n "${CONCH_CONFORMANCE_RUNNER:-}" ]; then
      echo "the official conformance runner was not found:" \
        "CONCH_CONFORMANCE_RUNNER=$CONCH_CONFORMANCE_RUNNER is no file" >&2
    else
      echo "the official conformance runner was not found: set" \
        "CONCH_CONFORMANCE_RUNNER, or put connectconformance.xz in" \
        "$top/../shared/conformance/ (or /work/shared/conformance/)" >&2
    fi
    return 1
  fi
  case $src in
  *.xz)
    out=$build/conformance/connectconformance
    mkdir -p "$build/conformance"
    # Decompressed again when the source is newer (or the copy is partial).
    if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
      xz -dc "$src" >"$out.tmp.$$" && chmod +x "$out.tmp.$$" &&
        mv "$out.tmp.$$" "$out" || {
        rm -f "$out.tmp.$$"
        echo "cannot decompress $src (xz-utils?)" >&2
        return 1
      }
    fi
    echo "$out"
    ;;
  *)
    [ -x "$src" ] || {
      echo "$src is not executable" >&2
      return 1
    }
    echo "$src"
    ;;
  esac
}

skip() {
  echo "SKIPPED: the official conformance suite did not run: $1"
  echo "SKIPPED: the official conformance suite did not run: $1" >&2
  exit 77
}

if [ "$mode" = --locate ]; then
  locate
  exit
fi
mkdir -p "$build/conformance"
runner=$(locate 2>"$build/conformance/locate.err") ||
  skip "$(cat "$build/conformance/locate.err")"

# The server-mode subset CI runs (--full: all).  Every test suite of the
# server mode, but only with the proto codec and the identity and gzip
# compressions: every protocol, HTTP version, TLS and client certificate
# setting, stream kind, error, timeout, header and size case still runs;
# the JSON codec and the other four compressions (the same handlers behind
# the codec and compression layers, which the client mode and the node
# suites cover in every combination) are left to --full.
if [ "$mode" = server ] && [ "$full" = 0 ]; then
  set -- --skip '**/Codec:CODEC_JSON/**' \
    --skip '**/Compression:COMPRESSION_BR/**' \
    --skip '**/Compression:COMPRESSION_ZSTD/**' \
    --skip '**/Compression:COMPRESSION_DEFLATE/**' \
    --skip '**/Compression:COMPRESSION_SNAPPY/**' "$@"
fi

case $mode in
client)
  conf=$top/tools/conformance-client/config.yaml
  bin=$build/tools/conformance-client/conformance-client
  ;;
server)
  conf=$top/tools/conformance-server/config.yaml
  bin=$build/tools/conformance-server/conformance-server
  ;;
*)
  echo "official.sh: the mode is client or server, not $mode" >&2
  exit 2
  ;;
esac
[ -x "$bin" ] || {
  echo "official.sh: $bin is not built" >&2
  exit 1
}

echo "runner: $runner ($("$runner" --version 2>&1 | head -1))"
echo "mode: $mode$([ "$full" = 1 ] && echo ", full" || true), config: $conf"
start=$(date +%s)
rc=0
"$runner" --mode "$mode" --conf "$conf" "$@" -- "$bin" || rc=$?
echo "wall time: $(($(date +%s) - start)) s, runner exit status $rc"
exit "$rc"
