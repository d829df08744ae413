#!/usr/bin/env bash
# Installs dependencies, builds the test build (AddressSanitizer + UBSan, warnings as errors)
# and runs the whole suite with ctest; then runs the CLI tests again against the statically
# linked release binary, the one users get. Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset asan >/dev/null
cmake --build --preset asan -j2
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target dlock_cli
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
DLOCK_TEST_BINARY="$PWD/build/release/dlock" ctest --preset asan -L cli
ctest --preset asan "$@"
