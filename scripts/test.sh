#!/usr/bin/env bash
# Installs dependencies, builds the test build (AddressSanitizer + UBSan, warnings as errors),
# runs the CLI's own tests (cli_tests) against the statically linked release binary, the one
# users get, and then the whole suite with ctest. Usage: scripts/test.sh [extra ctest arguments]
# ctest runs three tests at once (the asan test preset) on a 2-core machine: most of them wait on
# leases, timers and servers far more than they compute.
#
# A private MariaDB (scripts/servers/mariadb.sh: its own data directory in /tmp, a free port
# on 127.0.0.1, and TLS, which mysql:// connections use as ssl-mode=preferred asks and the TLS
# tests need) and three private Redis servers (scripts/servers/redis.sh, likewise; redlock://
# runs over the three), a private standalone ZooKeeper (scripts/servers/zookeeper.sh), a
# private PostgreSQL 15 (scripts/servers/postgres.sh) and a private single-member etcd
# (scripts/servers/etcd.sh) run for the length of the run, stopped and deleted on exit. The
# conformance suite runs over them (DLOCK_TEST_URLS), and so do the mysql and redis fault tests
# (DLOCK_MYSQL_*, DLOCK_REDIS_*); the redlock fault tests start servers of their own.
#
#   DLOCK_NO_MARIADB=1        start no MariaDB: the mysql:// cases are skipped or not listed
#   DLOCK_NO_REDIS=1          start no Redis: the redis:// cases are skipped or not listed
#   DLOCK_NO_ZOOKEEPER=1      start no ZooKeeper: the zookeeper:// cases are skipped or not listed
#   DLOCK_NO_POSTGRES=1       start no PostgreSQL: the postgres:// cases are skipped or not listed
#   DLOCK_NO_ETCD=1           start no etcd: the etcd:// cases are skipped or not listed
#   DLOCK_TEST_URLS="URL ..." the servers the conformance suite runs over (default: one URL
#                             per mode in DLOCK_TEST_MYSQL_MODES on the private MariaDB, and the
#                             private Redis plain and with fair=true, redlock:// over three,
#                             the private ZooKeeper with 2 s sessions, the private PostgreSQL in
#                             both modes and the private etcd with 2 s leases)
#   DLOCK_TEST_MYSQL_MODES    the mysql:// modes tested (default below)
set -euo pipefail
cd "$(dirname "$0")/.."

# The mysql:// modes the conformance suite covers: lease is the plain URL, any other mode is
# URL?mode=MODE (a mode may carry options: session&lock_delay=true).
mysql_modes=${DLOCK_TEST_MYSQL_MODES:-lease session session&lock_delay=true row}

scripts/install-deps.sh

urls=()
cleanup=()
trap 'for step in "${cleanup[@]}"; do eval "$step" || true; done' EXIT
if [ "${DLOCK_NO_MARIADB:-0}" != 1 ]; then
  mariadb_dir=$(mktemp -d /tmp/dlock-mariadb.XXXXXX)
  cleanup+=("scripts/servers/mariadb.sh stop '$mariadb_dir'; rm -rf '$mariadb_dir'")
  MARIADB_TLS=1 scripts/servers/mariadb.sh start "$mariadb_dir" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$mariadb_dir/env"
  set +a
  echo "test.sh: MariaDB on 127.0.0.1:$DLOCK_MYSQL_PORT (data in $mariadb_dir)"
  for mode in $mysql_modes; do
    if [ "$mode" = lease ]; then urls+=("$DLOCK_MYSQL_URL"); else urls+=("$DLOCK_MYSQL_URL?mode=$mode"); fi
  done
fi
if [ "${DLOCK_NO_REDIS:-0}" != 1 ]; then
  redis_dir=$(mktemp -d /tmp/dlock-redis.XXXXXX)
  cleanup+=("scripts/servers/redis.sh stop '$redis_dir'; rm -rf '$redis_dir'")
  # Three instances: redis:// uses the first, redlock:// all three.
  scripts/servers/redis.sh start "$redis_dir" 3 >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$redis_dir/env"
  set +a
  echo "test.sh: Redis on 127.0.0.1, ports $DLOCK_REDIS_PORTS (data in $redis_dir)"
  urls+=("$DLOCK_REDIS_URL" "$DLOCK_REDIS_URL?fair=true" "$DLOCK_REDLOCK_URL")
fi
if [ "${DLOCK_NO_ZOOKEEPER:-0}" != 1 ]; then
  zookeeper_dir=$(mktemp -d /tmp/dlock-zookeeper.XXXXXX)
  cleanup+=("scripts/servers/zookeeper.sh stop '$zookeeper_dir'; rm -rf '$zookeeper_dir'")
  scripts/servers/zookeeper.sh start "$zookeeper_dir" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$zookeeper_dir/env"
  set +a
  echo "test.sh: ZooKeeper on 127.0.0.1:$DLOCK_ZK_PORT (data in $zookeeper_dir)"
  # Sessions (the leases) of 2 s: a dead holder's key frees within the suite's patience.
  urls+=("$DLOCK_ZK_URL/dlock-test?session_timeout=2s")
  export DLOCK_ZOOKEEPER_URL="$DLOCK_ZK_URL"  # the serve and browser tests add a path of their own
fi
if [ "${DLOCK_NO_POSTGRES:-0}" != 1 ]; then
  postgres_dir=$(mktemp -d /tmp/dlock-postgres.XXXXXX)
  cleanup+=("scripts/servers/postgres.sh stop '$postgres_dir'; rm -rf '$postgres_dir'")
  scripts/servers/postgres.sh start "$postgres_dir" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$postgres_dir/env"
  set +a
  echo "test.sh: PostgreSQL on 127.0.0.1:$DLOCK_PG_PORT (data in $postgres_dir)"
  urls+=("$DLOCK_PG_URL" "$DLOCK_PG_URL?mode=session")
  export DLOCK_POSTGRES_URL="$DLOCK_PG_URL"  # the serve and browser tests add a table of their own
fi
if [ "${DLOCK_NO_ETCD:-0}" != 1 ]; then
  etcd_dir=$(mktemp -d /tmp/dlock-etcd.XXXXXX)
  cleanup+=("scripts/servers/etcd.sh stop '$etcd_dir'; rm -rf '$etcd_dir'")
  scripts/servers/etcd.sh start "$etcd_dir" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$etcd_dir/env"
  set +a
  echo "test.sh: etcd on 127.0.0.1:$DLOCK_ETCD_PORTS (data in $etcd_dir)"
  # Leases of 2 s: a dead holder's key frees within the suite's patience.
  urls+=("$DLOCK_ETCD_URL/dlock-test?ttl=2s")
fi
[ -n "${DLOCK_TEST_URLS+set}" ] || export DLOCK_TEST_URLS="${urls[*]}"

cmake --preset asan >/dev/null
cmake --build --preset asan -j2
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target dlock_cli dlock_serve
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
DLOCK_TEST_BINARY="$PWD/build/release/dlock" ctest --preset asan -L cli -R '^(CliTest|KeeperCliTest)[.]'
# The browser tests drive the release build's tools (tests/CMakeLists.txt says why).
DLOCK_BROWSER_BINARY="$PWD/build/release/dlock" ctest --preset asan "$@"
