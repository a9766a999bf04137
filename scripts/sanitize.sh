#!/usr/bin/env bash
# Runs the tests under sanitizers, each stage in its own build directory:
#   bash scripts/sanitize.sh asan    AddressSanitizer + LeakSanitizer + UBSan, every CTest test
#                                    (build-asan/)
#   bash scripts/sanitize.sh tsan    ThreadSanitizer, every CTest test (build-tsan/)
#   bash scripts/sanitize.sh all     both (the default)
# Arguments after the stage go to ctest (e.g. `tsan -R integration`). JOBS sets build jobs (2).
#
# Any report fails the stage, including one from a ratewall process an integration test starts:
# the options below are exported, so those processes inherit them, and every sanitizer writes
# its reports to files in <build>/sanitizer-logs/ (log_path), which must be empty after ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-2}
stage=${1:-all}
shift || true
case $stage in
  asan | tsan | all) ;;
  *)
    echo "usage: bash scripts/sanitize.sh [asan|tsan|all] [ctest arguments...]" >&2
    exit 2
    ;;
esac

# Sanitizers slow the gateway several times over: integration tests that bound a latency (a
# Redis deadline, a load phase) scale their times by this (tests/support/time_scale.hpp).
export RATEWALL_TEST_TIME_SCALE=${RATEWALL_TEST_TIME_SCALE:-5}

# The sanitizer runtimes (libasan8, liblsan0, libubsan1, libtsan2) come with g++ (libgcc-12-dev).
bash scripts/setup.sh

# Configures and builds build-<name>/ with -fsanitize=<sanitize>: -O1 keeps the build and the
# run fast enough; no NDEBUG, so assert()s are checked too; no benchmarks.
build() {
  local dir=$1 sanitize=$2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
    -DRATEWALL_SANITIZE="$sanitize" -DRATEWALL_BENCH=OFF >/dev/null &&
    cmake --build "$dir" -j "$JOBS"
}

# Runs ctest in build-<name>/, then fails if it failed or if any report file was written.
# A failed test gets one more run: a few integration tests bound latencies in milliseconds,
# which a sanitizer's slowdown can overrun. A report fails the stage on either run.
run_tests() {
  local dir=$1 logs=$2
  shift 2
  local status=0
  (cd "$dir" && ctest --output-on-failure --timeout 1800 --repeat until-pass:2 "$@") || status=$?
  local reports
  reports=$(find "$logs" -type f | sort)
  if [[ -n $reports ]]; then
    echo "sanitize: $(wc -l <<<"$reports") report file(s) in $logs:" >&2
    while read -r f; do
      echo "---- $f" >&2
      head -n 400 "$f" >&2
    done <<<"$reports"
    status=1
  fi
  return "$status"
}

fresh_logs() {
  rm -rf "$1"
  mkdir -p "$1"
}

asan() {
  local dir=build-asan logs=$ROOT/build-asan/sanitizer-logs
  build "$dir" address,undefined || return 1
  fresh_logs "$logs" || return 1
  # LeakSanitizer needs to stop the process's threads (ptrace-like); where it cannot, it dies
  # with a fatal error on every exit, so it is probed once and switched off with a warning.
  local leaks=1
  local probe
  probe=$(ASAN_OPTIONS=detect_leaks=1 "$dir/ratewall" --version 2>&1 || true)
  if grep -qE 'LeakSanitizer (has encountered a fatal error|does not work)' <<<"$probe"; then
    echo "sanitize: LeakSanitizer does not work here; running without leak checks" >&2
    leaks=0
  fi
  # detect_stack_use_after_return: coroutine frames live on the heap (checked anyway); the
  # synchronous code's stack frames are checked by this, at a small cost.
  export ASAN_OPTIONS="detect_leaks=$leaks:detect_stack_use_after_return=1:strict_init_order=1"
  ASAN_OPTIONS+=":check_initialization_order=1:halt_on_error=1:log_path=$logs/asan"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
  echo "sanitize: asan: ASAN_OPTIONS=$ASAN_OPTIONS" >&2
  run_tests "$dir" "$logs" "$@"
}

tsan() {
  local dir=build-tsan logs=$ROOT/build-tsan/sanitizer-logs
  build "$dir" thread || return 1
  fresh_logs "$logs" || return 1
  # halt_on_error=0: one run lists every race; the process still exits 66 and the log fails it.
  export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:log_path=$logs/tsan"
  echo "sanitize: tsan: TSAN_OPTIONS=$TSAN_OPTIONS" >&2
  run_tests "$dir" "$logs" "$@"
}

# Says how a stage ended (its status, 0 or not) and how long it took; returns that status.
finished() {
  if (($2 == 0)); then
    echo "sanitize: $1 stage passed in ${SECONDS}s" >&2
  else
    echo "sanitize: $1 stage FAILED in ${SECONDS}s" >&2
  fi
  return "$2"
}

# Each stage runs in a subshell, so that the options one exports do not reach the other.
status=0
if [[ $stage == asan || $stage == all ]]; then
  SECONDS=0
  result=0
  (asan "$@") || result=$?
  finished asan "$result" || status=1
fi
if [[ $stage == tsan || $stage == all ]]; then
  SECONDS=0
  result=0
  (tsan "$@") || result=$?
  finished tsan "$result" || status=1
fi
exit "$status"
