#!/usr/bin/env bash
# The mysql:// figures of docs/bench.md: the four workloads in each mode (8 processes where
# the workload has several clients), the bare GET_LOCK/RELEASE_LOCK yardstick, the peers (the
# same workloads, ping aside, run by two designs a MySQL user would write instead of dlock:
# bench/mysql_peers.cpp), the statements one `dlock run` sends, read from the server's
# general log, and what those statements cost on the server (bench/mysql_statement_cost.cpp).
# JSON lines on stdout.
#
#   bench/mysql.sh [DLOCK_BINARY]     default: build/release/dlock
#
# Starts a private MariaDB (scripts/servers/mariadb.sh) in a temporary directory and stops it
# afterwards. DURATION: seconds per run (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
dlock=$(realpath "${1:-build/release/dlock}")
duration=${DURATION:-10}

dir=$(mktemp -d /tmp/dlock-bench-mariadb.XXXXXX)
trap 'scripts/servers/mariadb.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/servers/mariadb.sh start "$dir" >/dev/null
set -a
. "$dir/env"
set +a
sql() { mariadb --no-defaults --socket="$DLOCK_MYSQL_SOCKET" -uroot -N dlock_test -e "$1"; }

# Row mode locks rows of a table of one's own: the bench's keys are its ids.
sql "CREATE TABLE bench_rows (id VARBINARY(255) PRIMARY KEY, lock_owner VARBINARY(128) NOT NULL DEFAULT '',
     lock_expire_time DATETIME(6) NULL, version BIGINT UNSIGNED NOT NULL DEFAULT 0,
     lock_holds INT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB;
     INSERT INTO bench_rows (id) VALUES ('rb/uncontended'), ('rb/contended'), ('run-key'),
       ('rb/distinct/0'), ('rb/distinct/1'), ('rb/distinct/2'), ('rb/distinct/3'),
       ('rb/distinct/4'), ('rb/distinct/5'), ('rb/distinct/6'), ('rb/distinct/7');"

declare -A urls=(
  [lease]="$DLOCK_MYSQL_URL?table=bench_lease"
  [session]="$DLOCK_MYSQL_URL?mode=session&table=bench_session"
  [row]="$DLOCK_MYSQL_URL?mode=row&table=bench_rows"
)

# The yardstick: the server's own lock primitive, one connection, no table.
yardstick=$dir/yardstick
g++ -O2 -std=c++20 bench/mysql_yardstick.cpp $(pkg-config --cflags --libs libmariadb) -o "$yardstick"
"$yardstick" 127.0.0.1 "$DLOCK_MYSQL_PORT" dlock dlock-test-pw dlock_test 20000

# The peers: bare GET_LOCK/RELEASE_LOCK, and seed 001's upsert into a table, polling.
g++ -O2 -std=c++20 -Isrc bench/mysql_peers.cpp $(pkg-config --cflags --libs libmariadb) -o "$dir/peers"
peers() {
  "$dir/peers" 127.0.0.1 "$DLOCK_MYSQL_PORT" dlock dlock-test-pw dlock_test --duration "$duration" \
    --key-prefix rb/ "$@" || echo "mysql.sh: failed: peers $*" >&2
}
for impl in bare-get-lock seed001-upsert; do
  peers --impl "$impl" --workload uncontended --clients 1
  peers --impl "$impl" --workload distinct --clients 8
  peers --impl "$impl" --workload contended --clients 8
done

# Statements per acquire and per release: one `dlock run` under the general log, after a
# first run has made the tables. Set-up statements (SET, the table probe) are listed apart.
for mode in lease session row; do
  url=${urls[$mode]}
  "$dlock" --url "$url" run run-key -- true
  sql "SET GLOBAL general_log_file = '$dir/general-$mode.log'; SET GLOBAL general_log = ON;"
  "$dlock" --url "$url" run run-key -- true
  sql "SET GLOBAL general_log = OFF;"
  grep $' Execute\t' "$dir/general-$mode.log" | sed 's/^.*Execute\t//' >"$dir/executed-$mode" || true
  # Once per process: the table probe (row mode: information_schema) and the activity counts
  # added at exit (lease and session modes).
  setup='_seq` WHERE id = 0$|ON TRUE WHERE s.id = 0$|information_schema'
  activity='^INSERT INTO `[A-Za-z0-9_]*_activity`'
  executed=$(wc -l <"$dir/executed-$mode")
  activity_statements=$(grep -cE "$activity" "$dir/executed-$mode" || true)
  lock_statements=$(grep -Ev "$setup" "$dir/executed-$mode" | grep -cEv "$activity" || true)
  echo "{\"backend\":\"mysql\",\"mode\":\"$mode\",\"what\":\"statements of one dlock run\",\"executed\":$executed,\"lock_statements\":$lock_statements,\"activity_statements\":$activity_statements}"
  sed "s/^/  $mode: /" "$dir/executed-$mode" | cut -c1-150 >&2
done

# What the statements of a session-mode cycle cost on the server, beside the bare pair and a
# cycle without a table row (bench/mysql_statement_cost.cpp).
sql "CREATE SEQUENCE IF NOT EXISTS bench_session_tokens CACHE 100000;"
g++ -O2 -std=c++20 bench/mysql_statement_cost.cpp $(pkg-config --cflags --libs libmariadb) -o "$dir/cost"
"$dir/cost" 127.0.0.1 "$DLOCK_MYSQL_PORT" dlock dlock-test-pw dlock_test bench/mysql_session_statements.sql 10000

run() {
  "$dlock" --url "$1" bench --duration "$duration" "${@:2}" || echo "mysql.sh: failed: bench $*" >&2
}
for mode in lease session row; do
  url=${urls[$mode]}
  run "$url" --workload ping --clients 1
  run "$url" --workload uncontended --key-prefix rb/
  run "$url" --workload distinct --clients 8 --key-prefix rb/
  run "$url" --workload contended --clients 8 --key-prefix rb/
done
