# Test peers for the bash suites (sourced), like tests/support/peer.h: runs
# a server that prints "LISTENING <port>" and learns the port, allowing it
# 120 s to start (a loaded 2-core machine).  Needs bash and $tmp, a private
# directory the caller removes.

# peer_start NAME CMD [ARG...]: runs CMD with its stdin a pipe this shell
# holds (the peer goes when we go, however we end), stdout in
# $tmp/NAME.out and stderr in $tmp/NAME.err.  Sets peer_pid, peer_port
# (what follows LISTENING: a port, or unix:PATH from `conch serve`) and
# peer_stdin (the descriptor holding the pipe).  Returns 0, or 1 (with
# peer_port empty) when the peer exits or prints no LISTENING line in time;
# the caller tells why, e.g. from $tmp/NAME.err.
peer_start() {
  local name=$1 i line gone=0
  shift
  mkfifo "$tmp/$name.in"
  "$@" <"$tmp/$name.in" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  peer_pid=$!
  exec {peer_stdin}>"$tmp/$name.in"
  peer_port=""
  for ((i = 0; i < 1200; i++)); do
    # Whole lines only: read fails on one still being written.
    while IFS= read -r line; do
      case $line in
      "LISTENING "?*)
        peer_port=${line#LISTENING }
        return 0
        ;;
      esac
    done <"$tmp/$name.out"
    [ "$gone" = 1 ] && return 1
    kill -0 "$peer_pid" 2>/dev/null || gone=1 # one more look, then fail
    [ "$gone" = 1 ] || sleep 0.1
  done
  return 1
}
