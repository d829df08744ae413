#!/usr/bin/env bash
# postgres:// beside its server's floors, in one run on a private PostgreSQL 15
# (scripts/servers/postgres.sh, default durability): the floors first (`SELECT 1`, a
# pg_advisory_lock / pg_advisory_unlock pair, one durable one-row UPDATE, the advisory lock's
# wake-up between two connections: bench/postgres_yardstick.cpp), then `dlock bench`'s
# workloads (docs/bench.md) in each mode (MODES, default "lease session"): ping, uncontended,
# distinct keys (8 processes), contended (8, 2 and 64 processes; and 8 of which 6 read). JSON
# lines on stdout.
#
#   bench/postgres.sh [DLOCK_BINARY]      (default build/release/dlock)
#
# Starts the server in a temporary directory and stops it afterwards. ITERATIONS: per
# primitive (default 20000); DURATION: seconds per workload (default 10). Run it on an
# otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d /tmp/dlock-bench-postgres.XXXXXX)
trap 'scripts/servers/postgres.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/servers/postgres.sh start "$dir" >/dev/null
set -a
. "$dir/env"
set +a

. scripts/servers/common.sh
install_packages bench/postgres.sh libpq-dev
yardstick=$dir/yardstick
g++ -O2 -std=c++20 bench/postgres_yardstick.cpp $(pkg-config --cflags --libs libpq) -o "$yardstick"
"$yardstick" "$DLOCK_PG_URL" "${ITERATIONS:-20000}"

dlock=$(realpath "${1:-build/release/dlock}")
for mode in ${MODES:-lease session}; do
  run() {
    "$dlock" --url "$DLOCK_PG_URL?table=bench_$mode&mode=$mode" bench --duration "${DURATION:-10}" "$@" ||
      echo "postgres.sh: failed: mode=$mode bench $*" >&2
  }
  run --workload ping --clients 1
  run --workload uncontended
  run --workload distinct --clients 8
  for clients in 8 2 64; do
    run --workload contended --clients "$clients"
  done
  run --workload contended --clients 8 --readers 6  # a read-write lock: 6 readers, 2 writers
done
