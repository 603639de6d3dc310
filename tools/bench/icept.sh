#!/bin/sh
# Interceptors' cost on the unary path, client and server, for two builds
# (before and after a change) in one run.  A benchmark, not a test.
#
#   tools/bench/icept.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# Instructions per unary call (callgrind's total, the difference between a
# run of N2 and one of N1 calls, so that start and connection set-up drop
# out) of process.Process/List (Connect, application/proto, 16 in flight,
# h2c) between conch-bench and conch-bench-server:
# - client: conch-bench under valgrind, the server of the same build not;
# - server: conch-bench-server under valgrind, the client not;
# for each build without interceptors, and for AFTER also with one client
# interceptor (CONCH_BENCH_ICEPT=1: a start and a close hook, metrics by
# code) and, when the server bench has it, one server interceptor
# (CONCH_BENCH_ICEPT=1 for conch-bench-server).
# Environment: N1 (1000), N2 (6000).  Needs valgrind.  The harness is
# unary_ir.sh's.
[ $# -eq 2 ] || {
  echo "usage: $0 BEFORE_BUILD AFTER_BUILD" >&2
  exit 2
}
ir_name=icept.sh
ir_what="interceptors"
ir_env=CONCH_BENCH_ICEPT
ir_server=1
. "$(dirname "$0")/unary_ir.sh"
unary_ir_table "$1" "$2"
