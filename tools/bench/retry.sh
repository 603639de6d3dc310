#!/bin/sh
# What a retry policy (conch/retry.h) costs a unary call that does not
# fail, client side, for two builds (before and after a change) in one run.
# A benchmark, not a test.
#
#   tools/bench/retry.sh BEFORE_BUILD AFTER_BUILD > tools/bench/results/NNN.md
#
# Instructions per unary call (callgrind's total, the difference between a
# run of N2 and one of N1 calls, so that start and connection set-up drop
# out) of process.Process/List (Connect, application/proto, 16 in flight,
# h2c), conch-bench under valgrind against conch-bench-server of the same
# build: for each build without a policy, and for AFTER also with one for
# every method (CONCH_BENCH_RETRY=1: 3 attempts on unavailable).  The
# server's path did not change.  Environment: N1 (1000), N2 (6000).
# Needs valgrind.  The harness is unary_ir.sh's.
[ $# -eq 2 ] || {
  echo "usage: $0 BEFORE_BUILD AFTER_BUILD" >&2
  exit 2
}
ir_name=retry.sh
ir_what="retry policy"
ir_env=CONCH_BENCH_RETRY
ir_server=0
. "$(dirname "$0")/unary_ir.sh"
unary_ir_table "$1" "$2"
