#!/usr/bin/env bash
# Installs dependencies, builds the test build (AddressSanitizer + UBSan, warnings as errors)
# and runs the whole suite with ctest. Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset asan >/dev/null
cmake --build --preset asan -j2
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset asan "$@"
