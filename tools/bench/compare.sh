#!/bin/sh
# Compares clients against one neutral canned server (bench-server, nghttp2,
# h2c) in one run: conch (conch-bench), gRPC C++ (grpc-bench, callback API,
# one channel; skipped when not built) and h2load (nghttp2-client: raw HTTP/2,
# no protobuf).  A benchmark, not a test.
#
#   tools/bench/compare.sh [BUILD_DIR] > tools/bench/results/NNN-name.md
#
# Workloads: unary process.Process/List (485-byte response), 64 in flight,
# Connect and gRPC; stream set-up (process.Process/Start streams of one
# 64-byte message, 64 open at a time); one large server stream of 64 KiB
# messages.  Measures, medians of ROUNDS rounds:
#   - instructions per unit (callgrind): two runs of N1 and N2 units,
#     differenced, so start-up does not count;
#   - CPU seconds per unit and peak RSS (GNU time; one run of NCPU units);
#   - syscalls per unit (strace -f -c, two runs differenced);
#   - heap allocations per unit (memcheck's "total heap usage", differenced;
#     all libraries), and conch's split into its own and nghttp2's (its
#     conch_mem hooks, CONCH_BENCH_ALLOCS=1).
# Environment: ROUNDS (default 3), QUICK=1 (smaller counts), ROWS (the rows
# to run, e.g. "list-grpc setup-grpc"; default all).
# Needs valgrind, strace, h2load (Debian: nghttp2-client) and GNU time (time).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
bd=$build/tools/bench
rounds=${ROUNDS:-3}
# Each tool with the Debian 12 package that has it (not installed by
# scripts/setup.sh: no test needs them).
missing=
for t in valgrind:valgrind strace:strace h2load:nghttp2-client \
  /usr/bin/time:time; do
  command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
if [ -n "$missing" ]; then
  echo "compare.sh: needs valgrind, strace, h2load and GNU time;" \
    "install them with: apt-get install$missing" >&2
  exit 1
fi
[ -x "$bd/conch-bench" ] && [ -x "$bd/bench-server" ] || {
  echo "compare.sh: build conch-bench and bench-server first (a build with" \
    "CONCH_BUILD_TESTS)" >&2; exit 1; }
have_grpc=0
[ -x "$bd/grpc-bench" ] && have_grpc=1

# Units per run.  Unary and set-up: calls/streams; bulk: 64 KiB messages.
if [ "${QUICK:-0}" = 1 ]; then
  ncpu_u=50000 ncpu_b=4096 n1_u=1000 n2_u=3000 n1_b=256 n2_b=768
else
  ncpu_u=200000 ncpu_b=16384 n1_u=2000 n2_u=6000 n1_b=512 n2_b=1536
fi
msg=65536

# What is measured, taken before the runs (the tree may change meanwhile).
rev="$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet HEAD -- runtime tools/bench || echo '+dirty')"

out=$(mktemp -d)
srv= srv1=
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null
  [ -n "$srv1" ] && kill "$srv1" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
mkfifo "$out/srv"
"$bd/bench-server" >"$out/srv" </dev/null &
srv=$!
read -r _ port <"$out/srv"
url=http://127.0.0.1:$port
mkfifo "$out/srv1"
"$bd/bench-server" 0 h1 >"$out/srv1" </dev/null &
srv1=$!
read -r _ port1 <"$out/srv1"
url1=http://127.0.0.1:$port1

# Request bodies for h2load, the same bytes the other clients send.
# StartRequest{process{cmd:"bench" args:[COUNT, BYTES]}}, enveloped.
start_body() { # count bytes file
  a=$1 b=$2
  il=$((7 + 2 + ${#a} + 2 + ${#b}))
  {
    printf '\000\000\000\000'"$(printf '\\%03o' $((il + 2)))"
    printf '\012'"$(printf '\\%03o' "$il")"'\012\005bench'
    printf '\022'"$(printf '\\%03o' ${#a})$a"
    printf '\022'"$(printf '\\%03o' ${#b})$b"
  } >"$3"
}
printf '\000\000\000\000\000' >"$out/grpc-list"
start_body 1 64 "$out/setup"

h2_args() { # workload protocol count -> h2load arguments
  case $1-$2 in
  list-connect) echo "-n $3 -c 1 -m 64 -H :method:POST -H content-type:application/proto -H connect-protocol-version:1 $url/process.Process/List" ;;
  list-grpc) echo "-n $3 -c 1 -m 64 -d $out/grpc-list -H content-type:application/grpc -H te:trailers $url/process.Process/List" ;;
  setup-connect) echo "-n $3 -c 1 -m 64 -d $out/setup -H content-type:application/connect+proto -H connect-protocol-version:1 $url/process.Process/Start" ;;
  setup-grpc) echo "-n $3 -c 1 -m 64 -d $out/setup -H content-type:application/grpc -H te:trailers $url/process.Process/Start" ;;
  bulk-connect) start_body "$3" $msg "$out/bulk$3"
    echo "-n 1 -c 1 -m 1 -d $out/bulk$3 -H content-type:application/connect+proto -H connect-protocol-version:1 $url/process.Process/Start" ;;
  bulk-grpc) start_body "$3" $msg "$out/bulk$3"
    echo "-n 1 -c 1 -m 1 -d $out/bulk$3 -H content-type:application/grpc -H te:trailers $url/process.Process/Start" ;;
  # HTTP/1.1: one request at a time per connection, 16 connections (conch's
  # HTTP/1.1 pool) for 64 calls in flight.
  list-h1) echo "--h1 -n $3 -c 16 -m 1 -H content-type:application/proto -H connect-protocol-version:1 $url1/process.Process/List" ;;
  setup-h1) echo "--h1 -n $3 -c 16 -m 1 -d $out/setup -H content-type:application/connect+proto -H connect-protocol-version:1 $url1/process.Process/Start" ;;
  bulk-h1) start_body "$3" $msg "$out/bulk$3"
    echo "--h1 -n 1 -c 1 -m 1 -d $out/bulk$3 -H content-type:application/connect+proto -H connect-protocol-version:1 $url1/process.Process/Start" ;;
  esac
}

cmd() { # client workload protocol count -> command line
  case $1 in
  conch)
    p=$3 u=$url h1=
    [ "$p" = h1 ] && p=connect u=$url1 h1=--http1
    case $2 in
    bulk) echo "$bd/conch-bench --protocol $p $h1 bulk $u $4 $msg" ;;
    *) echo "$bd/conch-bench --protocol $p $h1 $2 $u 64 $4" ;;
    esac ;;
  grpc++)
    case $2 in
    bulk) echo "$bd/grpc-bench bulk 127.0.0.1:$port $4 $msg" ;;
    *) echo "$bd/grpc-bench $2 127.0.0.1:$port 64 $4" ;;
    esac ;;
  h2load) echo "h2load $(h2_args "$2" "$3" "$4")" ;;
  esac
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

# Each measure prints one number for one run of client/workload/protocol.
ir_total() { # callgrind output file -> total Ir
  sed -n 's/^totals: *\([0-9]*\).*/\1/p; s/^summary: *\([0-9]*\).*/\1/p' "$1" | head -1
}
m_ir() { # per unit, N2 - N1
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$out/cg1.%p" $(cmd "$1" "$2" "$3" "$4") >/dev/null 2>&1
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$out/cg2.%p" $(cmd "$1" "$2" "$3" "$5") >/dev/null 2>&1
  a=$(ir_total "$(ls "$out"/cg1.* | head -1)")
  b=$(ir_total "$(ls "$out"/cg2.* | head -1)")
  if [ "$1" = conch ] && [ "$2" = list ]; then
    cp "$(ls "$out"/cg1.* | head -1)" "$out/keep1-$3"
    cp "$(ls "$out"/cg2.* | head -1)" "$out/keep2-$3"
  fi
  rm -f "$out"/cg1.* "$out"/cg2.*
  awk -v a="$a" -v b="$b" -v n="$(($5 - $4))" 'BEGIN{printf "%.0f\n", (b-a)/n}'
}
m_sys() {
  # shellcheck disable=SC2046
  strace -f -c -o "$out/st1" $(cmd "$1" "$2" "$3" "$4") >/dev/null 2>&1
  # shellcheck disable=SC2046
  strace -f -c -o "$out/st2" $(cmd "$1" "$2" "$3" "$5") >/dev/null 2>&1
  a=$(awk '$NF=="total" {print $4}' "$out/st1")
  b=$(awk '$NF=="total" {print $4}' "$out/st2")
  awk -v a="$a" -v b="$b" -v n="$(($5 - $4))" 'BEGIN{printf "%.2f\n", (b-a)/n}'
}
m_heap() {
  # shellcheck disable=SC2046
  a=$(valgrind $(cmd "$1" "$2" "$3" "$4") 2>&1 >/dev/null | sed -n 's/.*total heap usage: \([0-9,]*\) allocs.*/\1/p' | tr -d ,)
  # shellcheck disable=SC2046
  b=$(valgrind $(cmd "$1" "$2" "$3" "$5") 2>&1 >/dev/null | sed -n 's/.*total heap usage: \([0-9,]*\) allocs.*/\1/p' | tr -d ,)
  awk -v a="$a" -v b="$b" -v n="$(($5 - $4))" 'BEGIN{printf "%.2f\n", (b-a)/n}'
}
m_cpu() { # "cpu_seconds_per_unit rss_kib"
  # shellcheck disable=SC2046
  /usr/bin/time -f 'TIME %U %S %M' -o "$out/time" $(cmd "$1" "$2" "$3" "$4") >/dev/null 2>&1
  awk -v n="$4" '/^TIME/ {printf "%.9f %d\n", ($2+$3)/n, $4}' "$out/time"
}

clients="conch h2load"
[ "$have_grpc" = 1 ] && clients="conch grpc++ h2load"

# Rows: workload protocol; gRPC C++ only speaks gRPC.
rows="list-connect list-grpc list-h1 setup-connect setup-grpc setup-h1"
rows="$rows bulk-connect bulk-grpc bulk-h1"
# conch only: list and setup through the typed one-callback stubs
# (p__s__m_async()), compared with the others' list and setup.
rows="$rows listasync-connect listasync-grpc setupasync-connect setupasync-grpc"
rows=${ROWS:-$rows}
: >"$out/data"
r=1
while [ "$r" -le "$rounds" ]; do
  for row in $rows; do
    w=${row%-*} p=${row#*-}
    if [ "$w" = bulk ]; then n1=$n1_b n2=$n2_b nc=$ncpu_b; else n1=$n1_u n2=$n2_u nc=$ncpu_u; fi
    for c in $clients; do
      [ "$c" = grpc++ ] && [ "$p" != grpc ] && continue
      case $w in *async) [ "$c" = conch ] || continue ;; esac
      echo "round $r: $c $row" >&2
      set -- $(m_cpu "$c" "$w" "$p" "$nc")
      echo "$row $c cpu $1" >>"$out/data"
      echo "$row $c rss $2" >>"$out/data"
      echo "$row $c ir $(m_ir "$c" "$w" "$p" "$n1" "$n2")" >>"$out/data"
      echo "$row $c sys $(m_sys "$c" "$w" "$p" "$n1" "$n2")" >>"$out/data"
      if [ "$w" != bulk ]; then
        echo "$row $c heap $(m_heap "$c" "$w" "$p" $((n1 / 2)) $((n2 / 2)))" >>"$out/data"
      fi
      if [ "$c" = conch ] && [ "$w" != bulk ]; then
        # shellcheck disable=SC2046
        CONCH_BENCH_ALLOCS=1 $(cmd conch "$w" "$p" "$n2") >"$out/j"
        echo "$row conch own $(sed -n 's/.*"allocs_own":\([0-9.]*\).*/\1/p' "$out/j")" >>"$out/data"
        echo "$row conch h2 $(sed -n 's/.*"allocs_nghttp2":\([0-9.]*\).*/\1/p' "$out/j")" >>"$out/data"
      fi
    done
  done
  r=$((r + 1))
done

get() { # row client measure -> median
  awk -v r="$1" -v c="$2" -v m="$3" '$1==r && $2==c && $3==m {print $4}' "$out/data" | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a=="-"||b=="-"||b==0) print "-"; else printf "%.2f\n", a/b}'; }

echo "## Machine"
echo
echo "$(nproc) cores, $(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1); $(date -u +%Y-%m-%dT%H:%MZ);"
echo "conch $rev (source when the run began; the binaries are what $build holds); $(h2load --version 2>/dev/null | head -1);"
echo "gRPC C++ $(pkg-config --modversion grpc++ 2>/dev/null || echo 'not built'); rounds: $rounds (medians)."
echo
echo "Units: list and setup per call/stream (64 in flight); bulk per GiB of"
echo "64 KiB messages.  ir: instructions (callgrind, N2-N1 runs); cpu: user+system"
echo "time of the whole client process (GNU time, 10 ms resolution; $ncpu_u calls or"
echo "streams, $ncpu_b messages per run); rss: peak KiB; sys: syscalls (strace -f);"
echo "heap: allocations, all libraries (memcheck); own/h2: conch's allocations split"
echo "by its hooks into its own and nghttp2's.  x h2load, x gRPC: conch's figure"
echo "divided by theirs (lower is better for conch).  listasync and setupasync:"
echo "conch's list and setup through the typed one-callback stubs (p__s__m_async()),"
echo "compared with the others' list and setup."
echo
gib=$((1024 * 1024 * 1024))
echo "| workload | client | ir/unit | cpu/unit | rss KiB | sys/unit | heap/unit | own+h2 | ir x h2load | ir x gRPC | cpu x h2load | cpu x gRPC |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for row in $rows; do
  w=${row%-*}
  # The others' row to compare with: listasync-grpc with list-grpc.
  hrow=${w%async}-${row#*-}
  for c in $clients; do
    [ "$c" = grpc++ ] && [ "${row#*-}" != grpc ] && continue
    case $w in *async) [ "$c" = conch ] || continue ;; esac
    ir=$(get "$row" "$c" ir) cpu=$(get "$row" "$c" cpu)
    if [ "$w" = bulk ]; then
      # per message -> per GiB
      ir=$(awk -v x="$ir" -v g=$gib -v m=$msg 'BEGIN{printf "%.0f", x*g/m}')
      cpu=$(awk -v x="$cpu" -v g=$gib -v m=$msg 'BEGIN{printf "%.3f s", x*g/m}')
    else
      cpu=$(awk -v x="$cpu" 'BEGIN{printf "%.2f us", x*1e6}')
    fi
    sys=$(get "$row" "$c" sys) heap=$(get "$row" "$c" heap) split=
    [ "$c" = conch ] && [ "$w" != bulk ] && split="$(get "$row" conch own)+$(get "$row" conch h2)"
    ratios="| | | |"
    if [ "$c" = conch ]; then
      gir=$(get "list-grpc" grpc++ ir)
      ratios="| $(ratio "$(get "$row" conch ir)" "$(get "$hrow" h2load ir)") | $( [ "${row#*-}" = grpc ] && [ "$have_grpc" = 1 ] && ratio "$(get "$row" conch ir)" "$(get "$hrow" grpc++ ir)" || echo -) | $(ratio "$(get "$row" conch cpu)" "$(get "$hrow" h2load cpu)") | $( [ "${row#*-}" = grpc ] && [ "$have_grpc" = 1 ] && ratio "$(get "$row" conch cpu)" "$(get "$hrow" grpc++ cpu)" || echo -) |"
      : "$gir"
    fi
    echo "| $row | $c | $ir | $cpu | $(get "$row" "$c" rss) | $sys | ${heap:--} | ${split:--} $ratios"
  done
done
echo
echo "Bulk sys/unit is per 64 KiB message.  h2load's Connect unary request is a"
echo "POST with no DATA frame (h2load cannot send an empty body); conch sends an"
echo "empty DATA frame with END_STREAM."

# Where conch's instructions go (self cost by library, N2-N1 of the last round).
if command -v callgrind_annotate >/dev/null; then
  echo
  echo "### conch unary: instructions per call by library (self cost, callgrind)"
  echo
  echo "| protocol | conch | nghttp2 | protobuf-c | allocator | libc other | other |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for p in connect grpc h1; do
    [ -f "$out/keep1-$p" ] || continue
    for k in 1 2; do
      callgrind_annotate --threshold=100 "$out/keep$k-$p" 2>/dev/null | awk '
        /^ *[0-9,]+ .*\[.*\]$/ {
          n = $1; gsub(",", "", n); obj = $NF; fn = $0
          sub(/ *\[.*$/, "", fn); sub(/^.* [^ ]*:/, "", fn)
          if (obj ~ /nghttp2/) k = "nghttp2"
          else if (obj ~ /protobuf-c/) k = "protobuf-c"
          else if (obj ~ /libc\.so/ && fn ~ /(malloc|free|calloc|realloc|tcache|arena|^_int_|consolidate|unlink_chunk)/) k = "alloc"
          else if (obj ~ /libc\.so/) k = "libc"
          else if (obj ~ /conch-bench/) k = "conch"
          else k = "other"
          s[k] += n
        }
        END { printf "%d %d %d %d %d %d\n", s["conch"], s["nghttp2"], s["protobuf-c"], s["alloc"], s["libc"], s["other"] }' >"$out/by$k-$p"
    done
    paste "$out/by1-$p" "$out/by2-$p" | awk -v p="$p" -v n="$((n2_u - n1_u))" '{
      printf "| %s |", p; for (i = 1; i <= 6; i++) printf " %.0f |", ($(i+6) - $i) / n; printf "\n" }'
  done
fi
