#!/bin/sh
# What the server core's DATA frame size costs a large unary response, on
# both sides, for two builds (before and after a change) in one run.  A
# benchmark, not a test.
#
#   tools/bench/frames.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# conch-bench list (process.Process/List, 16 in flight, h2c) against
# conch-bench-server --list-pad PAD (a response of PAD + 485 bytes, not
# compressed: --compress-min past it), per protocol (Connect, gRPC):
# - instructions per call (callgrind's total, a run of N2 calls less one
#   of N1) of the client (the server not under valgrind) and of the server
#   (the client not);
# - the client's user-space copies of 4 KiB or more per call
#   (count_copies_exit.c, LD_PRELOAD; N2 - N1 differenced).
# conch's client advertises SETTINGS_MAX_FRAME_SIZE 1 MiB; a server that
# sizes its frames by it sends each response in one frame.
# Environment: N1 (200), N2 (1200), PAD (60000).  Needs valgrind and cc.
set -eu
[ $# -eq 2 ] || {
  echo "usage: $0 BEFORE_BUILD AFTER_BUILD" >&2
  exit 2
}
top=$(cd "$(dirname "$0")/../.." && pwd)
n1=${N1:-200}
n2=${N2:-1200}
pad=${PAD:-60000}
. "$(dirname "$0")/peer.sh"
cc -O2 -shared -fPIC -I"$top/tools/bench" -o "$out/count.so" \
  "$top/tools/bench/count_copies_exit.c" -ldl

srv() { # build
  echo "$1/tools/bench/conch-bench-server --list-pad $pad --compress-min 100000000"
}
cli() { # build protocol calls
  echo "$1/tools/bench/conch-bench --protocol $2 list http://127.0.0.1:$port 16 $3"
}
client_ir() { # build protocol calls
  start $(srv "$1")
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" $(cli "$1" "$2" "$3") \
    >/dev/null 2>&1
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
server_ir() { # build protocol calls
  start valgrind --tool=callgrind --callgrind-out-file="$out/cg" $(srv "$1")
  $(cli "$1" "$2" "$3") >/dev/null
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
copies() { # build protocol calls -> copies
  start $(srv "$1")
  LD_PRELOAD=$out/count.so $(cli "$1" "$2" "$3") 2>&1 >/dev/null |
    sed -n 's/^copies: [0-9]* [0-9]* \([0-9]*\) .*/\1/p'
  stop
}
per_call() { # fn build protocol
  a=$($1 "$2" "$3" "$n1")
  b=$($1 "$2" "$3" "$n2")
  awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
    'BEGIN{printf "%.'"${4:-0}"'f", (b - a) / (n2 - n1)}'
}

echo "frames.sh: N1=$n1 N2=$n2 PAD=$pad, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| build | protocol | client Ir/call | server Ir/call | client copies/call |"
echo "|---|---|---:|---:|---:|"
for p in connect grpc; do
  for b in before after; do
    [ "$b" = before ] && dir=$1 || dir=$2
    echo "| $b | $p | $(per_call client_ir "$dir" $p) | $(per_call server_ir "$dir" $p) | $(per_call copies "$dir" $p 2) |"
  done
done
