# The peer harness of the callgrind benchmarks (sourced, not run: frames.sh,
# unary_ir.sh, srvh1.sh, srvgzip.sh): a scratch folder |out| removed at exit,
# and one server at a time, started by start() and stopped by stop().
#
#   start COMMAND...  runs COMMAND in the background (|spid|) and waits for
#                     its first line, "LISTENING <port>" or "listening <port>",
#                     which sets |port|; its output is dropped after that;
#   stop              SIGTERM and reaping.
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
