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
  export LSAN_OPTIONS=""
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

status=0
if [[ $stage == asan || $stage == all ]]; then
  SECONDS=0
  asan "$@" || status=1
  echo "sanitize: asan stage: $( ((status == 0)) && echo passed || echo FAILED) in ${SECONDS}s" >&2
fi
if [[ $stage == tsan || $stage == all ]]; then
  SECONDS=0
  tsan_status=0
  tsan "$@" || tsan_status=1
  echo "sanitize: tsan stage: $( ((tsan_status == 0)) && echo passed || echo FAILED) in ${SECONDS}s" >&2
  ((tsan_status == 0)) || status=1
fi
exit "$status"
