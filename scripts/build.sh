#!/usr/bin/env bash
# Configures and builds ratewall in build/ (Release with debug info, Ninja, 2 jobs by default).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  ${CMAKE_ARGS:-} >/dev/null
# Arguments name targets (all of them when none).
targets=()
for t in "$@"; do
  targets+=(--target "$t")
done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
