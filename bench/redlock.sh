#!/usr/bin/env bash
# The redlock:// figures of docs/bench.md and src/backends/redlock/README.md: the four workloads
# (8 processes where the workload has several clients) over 3 servers, contended with 2 and 64
# waiters, and the uncontended cycle over 5 servers. JSON lines on stdout.
#
#   bench/redlock.sh [DLOCK_BINARY]     default: build/release/dlock
#
# Starts private Redis servers (scripts/servers/redis.sh) in a temporary directory and stops
# them afterwards. DURATION: seconds per run (default 10). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dlock=$(realpath "${1:-build/release/dlock}")
duration=${DURATION:-10}

run() {
  "$dlock" --url "$1" bench --duration "$duration" "${@:2}" || echo "redlock.sh: failed: bench $*" >&2
}

for servers in 3 5; do
  dir=$(mktemp -d /tmp/dlock-bench-redlock.XXXXXX)
  trap 'scripts/servers/redis.sh stop "$dir"; rm -rf "$dir"' EXIT
  scripts/servers/redis.sh start "$dir" "$servers" >/dev/null
  url=$(sed -n 's/^DLOCK_REDLOCK_URL=//p' "$dir/env")
  run "$url" --workload ping --clients 1
  run "$url" --workload uncontended
  if [ "$servers" = 3 ]; then
    run "$url" --workload distinct --clients 8
    run "$url" --workload contended --clients 8
    run "$url" --workload contended --clients 2
    run "$url" --workload contended --clients 64
  fi
  scripts/servers/redis.sh stop "$dir"
  rm -rf "$dir"
  trap - EXIT
done
