#!/usr/bin/env bash
# The floors beside a postgres:// backend (issue 19), measured on a private PostgreSQL 15
# (scripts/servers/postgres.sh, default durability): `SELECT 1`, a pg_advisory_lock /
# pg_advisory_unlock pair, one durable one-row UPDATE, and the advisory lock's wake-up between
# two connections (bench/postgres_yardstick.cpp). JSON lines on stdout. The dlock workloads
# join these lines when the backend exists.
#
#   bench/postgres.sh
#
# Starts the server in a temporary directory and stops it afterwards. ITERATIONS: per
# primitive (default 20000). Run it on an otherwise idle machine.
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
