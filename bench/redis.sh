#!/usr/bin/env bash
# The redis:// figures of docs/bench.md and src/backends/redis/README.md: the bare server
# primitives (bench/redis_yardstick.cpp), then the four workloads (8 processes where the
# workload has several clients), contended with 2 and 64 waiters (handoff p50 should not
# grow with the queue), and contended in fair mode. JSON lines on stdout.
#
#   bench/redis.sh [DLOCK_BINARY]     default: build/release/dlock
#
# Starts a private Redis (scripts/servers/redis.sh) in a temporary directory and stops it
# afterwards. DURATION: seconds per run (default 10). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dlock=$(realpath "${1:-build/release/dlock}")
duration=${DURATION:-10}

dir=$(mktemp -d /tmp/dlock-bench-redis.XXXXXX)
trap 'scripts/servers/redis.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/servers/redis.sh start "$dir" >/dev/null
set -a
. "$dir/env"
set +a
url=$DLOCK_REDIS_URL

yardstick=$dir/yardstick
g++ -O2 -std=c++20 bench/redis_yardstick.cpp $(pkg-config --cflags --libs hiredis) -o "$yardstick"
"$yardstick" 127.0.0.1 "$DLOCK_REDIS_PORT" dlock dlock-test-pw 20000 src/backends/redis/lua

run() {
  "$dlock" --url "$1" bench --duration "$duration" "${@:2}" || echo "redis.sh: failed: bench $*" >&2
}
run "$url" --workload ping --clients 1
run "$url" --workload uncontended
run "$url" --workload distinct --clients 8
run "$url" --workload contended --clients 8
run "$url" --workload contended --clients 2
run "$url" --workload contended --clients 64
run "$url?fair=true" --workload contended --clients 8
run "$url?fair=true" --workload contended --clients 64
