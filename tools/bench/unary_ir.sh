# The harness of icept.sh and retry.sh (sourced, not run): instructions per
# unary call (callgrind's total, the difference between a run of N2 and one
# of N1 calls, so that start and connection set-up drop out) of
# process.Process/List (Connect, application/proto, 16 in flight, h2c)
# between conch-bench and conch-bench-server, for two builds (before and
# after a change) in one run, as a Markdown table on stdout.
#
# The sourcing script sets, then calls unary_ir_table BEFORE AFTER:
#   ir_name    its name, for the header line;
#   ir_what    the table's column for the feature ("interceptors");
#   ir_env     the variable that turns the feature on (CONCH_BENCH_ICEPT),
#              given to both benches: =0 for "before none" and "after
#              none", =1 for "after one";
#   ir_server  1: a server column too (conch-bench-server under valgrind,
#              the client not); 0: the client's only.
# Environment: N1 (1000), N2 (6000).  Needs valgrind.
set -eu
n1=${N1:-1000}
n2=${N2:-6000}
. "$(dirname "$0")/peer.sh" # $0: the script that sourced this one

server_ir() { # build env calls -> total Ir of the server
  start env $2 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench-server"
  env $2 "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$3" \
    >/dev/null
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
client_ir() { # build env calls -> total Ir of the client
  start env $2 "$1/tools/bench/conch-bench-server"
  env $2 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$1/tools/bench/conch-bench" list "http://127.0.0.1:$port" 16 "$3" \
    >/dev/null 2>&1
  stop
  sed -n 's/^summary: *//p' "$out/cg"
}
per_call() { # fn build env
  per_unit "$n1" "$n2" "$@"
}

unary_ir_table() { # before after
  echo "$ir_name: N1=$n1 N2=$n2, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  if [ "$ir_server" = 1 ]; then
    echo "| build | $ir_what | client Ir/call | server Ir/call |"
    echo "|---|---|---:|---:|"
  else
    echo "| build | $ir_what | client Ir/call |"
    echo "|---|---|---:|"
  fi
  for row in "before none $1" "after none $2" "after one $2"; do
    set -- $row
    e=$ir_env=0
    [ "$2" = one ] && e=$ir_env=1
    if [ "$ir_server" = 1 ]; then
      echo "| $1 | $2 | $(per_call client_ir "$3" "$e") | $(per_call server_ir "$3" "$e") |"
    else
      echo "| $1 | $2 | $(per_call client_ir "$3" "$e") |"
    fi
  done
}
