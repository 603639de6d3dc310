#!/bin/sh
# Sets up a fresh Debian 12 machine and runs every test of conch:
#   source checks, gen/ freshness, the whole ctest suite once normally and
#   once under ASan+UBSan, the unit tests under valgrind, the install check,
#   the client-only build (unit tests, install), and (with clang) a short
#   libFuzzer run per fuzz target.
# Environment: CONCH_JOBS (parallel jobs, default: cores),
#   CONCH_FUZZ_SECONDS (per target, default 20; 0 skips fuzzing).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=${CONCH_JOBS:-$(nproc)}
fuzz_seconds=${CONCH_FUZZ_SECONDS:-20}

step() { printf '\n==== %s\n' "$*"; }

step "setup"
sh scripts/setup.sh

step "source checks"
sh scripts/check-source.sh
sh proto/regen.sh --check

step "build (gcc, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
# ctest conformance/official-*: without the suite's runner they are skipped;
# say so here, where it cannot be missed.
if ! runner=$(sh tests/conformance/official.sh --locate build 2>&1); then
  printf '\n**** WARNING: %s\n**** conformance/official-client and -server will be SKIPPED\n' \
    "$runner"
fi
step "tests"
(cd build && ctest -j "$jobs" --output-on-failure)

step "build (ASan+UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCONCH_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
step "tests under ASan+UBSan"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest -j "$jobs" --output-on-failure)

step "wakeup and the resolver threads under ThreadSanitizer"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCONCH_TSAN=ON >/dev/null
cmake --build build-tsan -j "$jobs" --target test_wakeup test_resolve >/dev/null
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_wakeup
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_resolve

step "unit tests under valgrind"
for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --error-exitcode=1 "$t" >/dev/null
  echo "valgrind: $(basename "$t") clean"
done

step "install check"
sh tests/install/check.sh build

# Under a minute on 2 cores (31 s measured): the library, protoc-gen-conch
# (installed) and the unit tests, nothing else.
step "client-only build (every CONCH_WITH_* off): unit tests, install"
cmake -S . -B build-min -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCONCH_WITH_SERVER=OFF -DCONCH_WITH_BROTLI=OFF -DCONCH_WITH_ZSTD=OFF \
  -DCONCH_WITH_SNAPPY=OFF -DCONCH_WITH_JSON=OFF >/dev/null
cmake --build build-min -j "$jobs" --target conch conch_static \
  protoc-gen-conch conch_unit_tests
(cd build-min && ctest -L unit -j "$jobs" --output-on-failure)
sh tests/install/minimal.sh build build-min

if [ "$fuzz_seconds" -gt 0 ] && command -v clang >/dev/null 2>&1; then
  step "libFuzzer, ${fuzz_seconds}s per target"
  CC=clang cmake -S . -B build-fuzz -DCONCH_FUZZ=ON -DCONCH_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
  targets=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/||; s|\.c$||')
  for t in $targets; do
    cmake --build build-fuzz -j "$jobs" --target "$t" >/dev/null
  done
  # One fuzzer per core: each runs on one thread, so |jobs| of them at a
  # time take the stage from 22 x 20 s to half of that on two cores.
  fuzz_one() { # $1: the target's binary; says how it went, non-zero on a find
    name=$(basename "$1")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    work=$(mktemp -d)
    # New inputs go to a scratch folder; the committed corpus is read only.
    # (fuzz_files, in a mount namespace of its own, keeps these two folders
    # writable there: see tests/fuzz/fuzz_files.c.)
    if "$1" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$work/" "$work" "$corpus" >"$work/log" 2>&1; then
      echo "fuzz: $name $(grep -o 'Done [0-9]* runs' "$work/log" | tail -1)"
      rm -rf "$work"
      return 0
    fi
    tail -40 "$work/log"
    echo "fuzz: $name found a problem; inputs in $work" >&2
    return 1
  }
  failed=0
  set -- build-fuzz/tests/fuzz/fuzz_*
  while [ $# -gt 0 ]; do
    pids=
    i=0
    while [ $# -gt 0 ] && [ "$i" -lt "$jobs" ]; do
      if [ -x "$1" ]; then
        fuzz_one "$1" &
        pids="$pids $!"
        i=$((i + 1))
      fi
      shift
    done
    for p in $pids; do
      wait "$p" || failed=1
    done
  done
  [ "$failed" -eq 0 ] || exit 1
fi

step "all tests passed"
