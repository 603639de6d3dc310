#!/bin/sh
# One large server stream (process.Process/Start, 64 KiB messages) read by
# two conch builds, against one bench-server (AFTER's), in one run: what
# receiving a large message costs the client, and how often it is copied.
# A benchmark, not a test.
#
#   tools/bench/bulk.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN-x.md
#
# Per build and protocol (Connect, gRPC), medians of ROUNDS (default 3):
#   - instructions per GiB (callgrind; runs of N1 and N2 messages
#     differenced, so start-up does not count), and memcpy's share;
#   - user-space copies of 4 KiB or more (memcpy/memmove through the
#     dynamic linker: count_copies_exit.c, LD_PRELOAD; N2-N1 differenced)
#     per message, and bytes copied per message byte;
#   - CPU seconds per GiB (GNU time, NCPU messages).
# h2load (raw HTTP/2, no parsing; its default 16 KiB frames) is the floor.
# bench-server sends DATA frames as large as the client allows (as Go's
# net/http2 does); a client that advertises nothing gets 16 KiB frames.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
before=$1 after=$2
rounds=${ROUNDS:-3}
n1=${N1:-512} n2=${N2:-1536} ncpu=${NCPU:-16384}
msg=65536
out=$(mktemp -d)
srv=
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM
cc -O2 -shared -fPIC -I "$top/tools/bench" -o "$out/count.so" \
  "$top/tools/bench/count_copies_exit.c" -ldl
mkfifo "$out/srv"
"$after/tools/bench/bench-server" >"$out/srv" </dev/null &
srv=$!
read -r _ port <"$out/srv"
url=http://127.0.0.1:$port

# StartRequest{process{cmd:"bench" args:[COUNT, BYTES]}}, enveloped (h2load).
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
cmd() { # client protocol count
  case $1 in
  h2load) start_body "$3" $msg "$out/body$3"
    echo "h2load -n 1 -c 1 -m 1 -d $out/body$3 -H content-type:application/connect+proto -H connect-protocol-version:1 $url/process.Process/Start" ;;
  *) echo "$1/tools/bench/conch-bench --protocol $2 bulk $url $3 $msg" ;;
  esac
}
ir_of() { sed -n 's/^totals: *\([0-9]*\).*/\1/p; s/^summary: *\([0-9]*\).*/\1/p' "$1" | head -1; }
memcpy_ir() { # callgrind file -> self Ir of memcpy/memmove
  callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
    awk '/^ *[0-9,]+ .*:[^ ]*mem(cpy|move)[^ ]* \[/ { n = $1; gsub(",", "", n); s += n } END { print s + 0 }'
}
cg() { # client protocol count tag
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$4" $(cmd "$1" "$2" "$3") >/dev/null 2>&1
}
copies() { # client protocol count -> "copies bytes"
  # shellcheck disable=SC2046
  LD_PRELOAD=$out/count.so $(cmd "$1" "$2" "$3") 2>&1 >/dev/null |
    awk '/^copies:/ { print $4, $5 }'
}
: >"$out/data"
r=1
while [ "$r" -le "$rounds" ]; do
  for p in connect grpc; do
    for c in before after h2load; do
      [ "$c" = h2load ] && [ "$p" = grpc ] && continue
      case $c in before) b=$before ;; after) b=$after ;; *) b=h2load ;; esac
      echo "round $r: $c $p" >&2
      cg "$b" "$p" "$n1" 1
      cg "$b" "$p" "$n2" 2
      a1=$(ir_of "$out/cg.1") a2=$(ir_of "$out/cg.2")
      m1=$(memcpy_ir "$out/cg.1") m2=$(memcpy_ir "$out/cg.2")
      echo "$c $p ir $(awk -v a="$a1" -v b="$a2" -v n=$((n2 - n1)) -v m=$msg 'BEGIN{printf "%.0f", (b-a)/n*1073741824/m}')" >>"$out/data"
      echo "$c $p memcpy $(awk -v a="$m1" -v b="$m2" -v n=$((n2 - n1)) -v m=$msg 'BEGIN{printf "%.0f", (b-a)/n*1073741824/m}')" >>"$out/data"
      rm -f "$out"/cg.*
      if [ "$c" != h2load ]; then
        set -- $(copies "$b" "$p" "$n1") $(copies "$b" "$p" "$n2")
        echo "$c $p ncopy $(awk -v a="$1" -v b="$3" -v n=$((n2 - n1)) 'BEGIN{printf "%.3f", (b-a)/n}')" >>"$out/data"
        echo "$c $p bcopy $(awk -v a="$2" -v b="$4" -v n=$((n2 - n1)) -v m=$msg 'BEGIN{printf "%.3f", (b-a)/n/m}')" >>"$out/data"
      fi
      # shellcheck disable=SC2046
      /usr/bin/time -f 'TIME %U %S' -o "$out/time" $(cmd "$b" "$p" "$ncpu") >/dev/null 2>&1
      echo "$c $p cpu $(awk -v n="$ncpu" -v m=$msg '/^TIME/ {printf "%.3f", ($2+$3)/n*1073741824/m}' "$out/time")" >>"$out/data"
    done
  done
  r=$((r + 1))
done
get() {
  awk -v c="$1" -v p="$2" -v k="$3" '$1==c && $2==p && $3==k {print $4}' "$out/data" |
    sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'
}
echo "## Machine"
echo
echo "$(nproc) cores, $(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1); $(date -u +%Y-%m-%dT%H:%MZ); load $(cut -d' ' -f1-3 /proc/loadavg);"
echo "before: $before; after: $after; $(h2load --version 2>/dev/null | head -1); rounds: $rounds (medians);"
echo "N1=$n1 N2=$n2 messages of $msg bytes (callgrind, copies), NCPU=$ncpu (CPU time)."
echo
echo "| client | protocol | Ir per GiB | memcpy Ir per GiB | copies ≥4 KiB per message | bytes copied per message byte | CPU s per GiB |"
echo "|---|---|---:|---:|---:|---:|---:|"
for p in connect grpc; do
  for c in before after h2load; do
    [ "$c" = h2load ] && [ "$p" = grpc ] && continue
    echo "| $c | $p | $(get $c $p ir) | $(get $c $p memcpy) | $(get $c $p ncopy) | $(get $c $p bcopy) | $(get $c $p cpu) |"
  done
done
