# The peer harness of the callgrind benchmarks (sourced, not run: frames.sh,
# unary_ir.sh, srvh1.sh, srvgzip.sh, srvcore.sh): a scratch folder |out|
# removed at exit, and one server at a time, started by start() and stopped
# by stop().
#
#   start COMMAND...  runs COMMAND in the background (|spid|) and waits for
#                     its first line, "LISTENING <port>" or "listening <port>",
#                     which sets |port|; its output is dropped after that;
#   stop              SIGTERM and reaping.
#
# And the arithmetic they share: cpu PID (the clock ticks, |tck| a second,
# the process has used), median (of the numbers on stdin, one a line) and
# per_unit N1 N2 COMMAND... (runs COMMAND... N1 and COMMAND... N2, the count
# last, each printing a total; prints the difference per unit).
out=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT INT TERM

start() { # command... ; sets spid and port
  mkfifo "$out/fifo"
  "$@" >"$out/fifo" 2>/dev/null </dev/null &
  spid=$!
  read -r _ port <"$out/fifo"
  rm -f "$out/fifo"
}
stop() {
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  spid=
}

tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
per_unit() { # n1 n2 command...
  u1=$1 u2=$2
  shift 2
  a=$("$@" "$u1")
  b=$("$@" "$u2")
  awk -v a="$a" -v b="$b" -v n1="$u1" -v n2="$u2" \
    'BEGIN{printf "%.0f", (b - a) / (n2 - n1)}'
}
