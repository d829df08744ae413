#!/usr/bin/env bash
# The zookeeper:// figures of docs/bench.md: the server's floors (bench/zookeeper_yardstick.cpp:
# exists, the create + getChildren + delete cycle, delete to watcher, delete to watcher plus
# one read), then the four workloads (8 processes where the workload has several clients),
# contended with 2 and 64 waiters too (handoff p50 should not grow with the queue). JSON lines
# on stdout.
#
#   bench/zookeeper.sh [DLOCK_BINARY]     default: build/release/dlock
#
# Starts a private standalone ZooKeeper (scripts/servers/zookeeper.sh) in a temporary directory
# and stops it afterwards. DURATION: seconds per run (default 10). Run it on an otherwise idle
# machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dlock=$(realpath "${1:-build/release/dlock}")
duration=${DURATION:-10}

dir=$(mktemp -d /tmp/dlock-bench-zookeeper.XXXXXX)
trap 'scripts/servers/zookeeper.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/servers/zookeeper.sh start "$dir" >/dev/null
set -a
. "$dir/env"
set +a
url=$DLOCK_ZK_URL

yardstick=$dir/yardstick
g++ -O2 -std=c++20 bench/zookeeper_yardstick.cpp -lzookeeper_mt -o "$yardstick"
"$yardstick" 127.0.0.1 "$DLOCK_ZK_PORT" 20000

run() {
  "$dlock" --url "$1" bench --duration "$duration" "${@:2}" || echo "zookeeper.sh: failed: bench $*" >&2
}
run "$url" --workload ping --clients 1
run "$url" --workload uncontended
run "$url" --workload distinct --clients 8
run "$url" --workload contended --clients 8
run "$url" --workload contended --clients 2
run "$url" --workload contended --clients 64
