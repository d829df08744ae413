#!/usr/bin/env bash
# A private PostgreSQL 15 for tests and benchmarks: its own data directory, port and socket
# directory, on 127.0.0.1 only, started in the background and stopped by pid. Nothing
# system-wide is used (Debian's own cluster, if any, stays as it is).
#
#   scripts/servers/postgres.sh start DIR [PORT]   initialise DIR (first time), start, wait until
#                                                  it answers; print KEY=VALUE lines (below)
#   scripts/servers/postgres.sh stop DIR           stop the server whose pid is in DIR
#   scripts/servers/postgres.sh restart DIR        stop, then start again on the same port
#
# Printed on start (also kept in DIR/env):
#   DLOCK_PG_URL        postgres://dlock:…@127.0.0.1:PORT/dlock_test  (owner of dlock_test)
#   DLOCK_PG_ADMIN_URL  a superuser (pg_terminate_backend, restarts), for fault tests
#   DLOCK_PG_NONE_URL   may connect to dlock_test, may not create anything there
#   DLOCK_PG_DIR, DLOCK_PG_PORT, DLOCK_PG_SOCKET_DIR
#
# initdb and postgres refuse to run as root: as root, the script runs them as the `postgres`
# user (runuser) on a data directory it owns. Connections over TCP need a password
# (scram-sha-256); the socket directory, DIR/socket, lets the server's own user in without one.
# The passwords are fixed: the server listens on loopback only and lives as long as a test run.
# Durability is PostgreSQL's default (fsync, synchronous_commit on): benchmarks measure it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

bin=/usr/lib/postgresql/15/bin

usage() {
  sed -n '2,21p' "$0" >&2
  exit 64
}

install_if_missing() { install_packages postgres.sh postgresql-15; }

# Runs a server binary as the user that owns the data directory.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

superuser_sql() {
  local dir=$1 port=$2
  shift 2
  as_owner "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/socket" -p "$port" -U postgres -d postgres "$@"
}

free_port() { first_free_port postgres.sh 25432 25499; }

server_pid() {
  head -n 1 "$1/data/postmaster.pid" 2>/dev/null || true
}

start() {
  local dir=$1 port=${2:-}
  install_if_missing
  settle_dir_and_port
  mkdir -p "$dir/socket"
  if [ "$(id -u)" -eq 0 ]; then
    chmod 711 "$dir"  # the server's user passes through to its own directories only
    chown postgres: "$dir/socket"
  fi
  local fresh=0
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    fresh=1
    mkdir -p "$dir/data"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/data"; fi
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
      { echo "postgres.sh: initdb failed; see $dir/initdb.log" >&2; exit 1; }
  fi
  if [ "$(id -u)" -eq 0 ]; then
    touch "$dir/server.log"
    chown postgres: "$dir/server.log"
  fi
  # pg_ctl -w returns once the server accepts connections (or failed to start).
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir/socket -c listen_addresses=127.0.0.1 -c max_connections=300" start >/dev/null ||
    { echo "postgres.sh: the server did not start; last lines of $dir/server.log:" >&2; tail -n 20 "$dir/server.log" >&2; exit 1; }
  if [ "$fresh" = 1 ]; then
    superuser_sql "$dir" "$port" <<'SQL'
CREATE ROLE dlock LOGIN PASSWORD 'dlock-test-pw';
CREATE ROLE dlock_admin LOGIN SUPERUSER PASSWORD 'dlock-admin-pw';
CREATE ROLE dlock_none LOGIN PASSWORD 'dlock-none-pw';
CREATE DATABASE dlock_test OWNER dlock;
\connect dlock_test
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
ALTER SCHEMA public OWNER TO dlock;
SQL
  fi
  {
    echo "DLOCK_PG_URL=postgres://dlock:dlock-test-pw@127.0.0.1:$port/dlock_test"
    echo "DLOCK_PG_ADMIN_URL=postgres://dlock_admin:dlock-admin-pw@127.0.0.1:$port/dlock_test"
    echo "DLOCK_PG_NONE_URL=postgres://dlock_none:dlock-none-pw@127.0.0.1:$port/dlock_test"
    echo "DLOCK_PG_DIR=$dir"
    echo "DLOCK_PG_PORT=$port"
    echo "DLOCK_PG_SOCKET_DIR=$dir/socket"
  } | tee "$dir/env"
}

stop() {
  local dir
  dir=$(cd "$1" && pwd)
  local pid
  pid=$(server_pid "$dir")
  [ -n "$pid" ] || return 0
  # SIGINT: the fast shutdown (sessions ended, a checkpoint, then exit).
  kill -INT "$pid" 2>/dev/null || return 0
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "postgres.sh: the server (pid $pid) did not stop within 30 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

[ $# -ge 2 ] || usage
case $1 in
  start) start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  restart)
    stop "$2"
    start "$2" "$(cat "$2/port")"
    ;;
  *) usage ;;
esac
