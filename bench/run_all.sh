#!/bin/sh
# Runs the benchmark matrix of docs/bench.md and prints one JSON line per run on stdout.
#
#   bench/run_all.sh [DLOCK_BINARY]        default: build/release/dlock (cmake --preset release)
#
# Environment: DURATION (seconds of measured work per run, default 10) and SQLITE_URL
# (default sqlite:///tmp/dlock-bench.db). A failed run is reported on stderr; the others
# still run, and the script then exits 1.
set -u
dlock=${1:-build/release/dlock}
duration=${DURATION:-10}
sqlite=${SQLITE_URL:-sqlite:///tmp/dlock-bench.db}
status=0

run() {
  url=$1
  shift
  "$dlock" --url "$url" bench --duration "$duration" "$@" || {
    echo "run_all.sh: failed: $dlock --url $url bench --duration $duration $*" >&2
    status=1
  }
}

# SQLite: every client is a process of its own, as separate jobs on one host would be.
run "$sqlite" --workload ping --clients 1
run "$sqlite" --workload ping --clients 8
run "$sqlite" --workload uncontended
run "$sqlite" --workload distinct --clients 8
run "$sqlite" --workload contended --clients 8

# local:// lives inside one process, so its clients are threads.
run local:// --threads --workload ping --clients 1
run local:// --threads --workload ping --clients 8
run local:// --threads --workload uncontended
run local:// --threads --workload distinct --clients 8
run local:// --threads --workload contended --clients 8

exit $status
