#!/usr/bin/env bash
# A private MariaDB for tests and benchmarks: its own data directory, port and socket, on
# 127.0.0.1 only, started in the background and stopped by pid. Nothing system-wide is used.
#
#   scripts/servers/mariadb.sh start DIR [PORT]   initialise DIR (first time), start, wait until
#                                                 it answers; print KEY=VALUE lines (below)
#   scripts/servers/mariadb.sh stop DIR           stop the server whose pid is in DIR
#   scripts/servers/mariadb.sh restart DIR        stop, then start again on the same port
#
# Printed on start (also kept in DIR/env):
#   DLOCK_MYSQL_URL        mysql://dlock:…@127.0.0.1:PORT/dlock_test  (all rights on dlock_test)
#   DLOCK_MYSQL_ADMIN_URL  a user with every privilege (KILL, GRANT), for fault tests
#   DLOCK_MYSQL_DML_URL    SELECT/INSERT/UPDATE/DELETE on dlock_test only: no CREATE
#   DLOCK_MYSQL_NONE_URL   no privilege on dlock_test at all
#   DLOCK_MYSQL_DIR, DLOCK_MYSQL_PORT, DLOCK_MYSQL_SOCKET
#
# With MARIADB_TLS=1 at the first start, the server also speaks TLS, with a throwaway CA and
# a certificate for 127.0.0.1 and localhost made in DIR/tls (later starts keep using them),
# and listens on 127.0.0.2 too, an address that certificate does not name. Also printed then:
#   DLOCK_MYSQL_TLS_URL            a user the server admits over TLS only (REQUIRE SSL)
#   DLOCK_MYSQL_TLS_MISNAMED_URL   the same user at 127.0.0.2
#   DLOCK_MYSQL_TLS_CA             the CA that signed the server's certificate (PEM)
#   DLOCK_MYSQL_TLS_OTHER_CA       a CA that signed nothing the server has
#
# The passwords are fixed: the server listens on loopback only and lives as long as a test run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  sed -n '2,25p' "$0" >&2
  exit 64
}

install_if_missing() { install_packages mariadb.sh mariadb-server mariadb-client; }

server_args() {
  local dir=$1 port=$2 bind=127.0.0.1
  local tls=()
  if [ -f "$dir/tls/server-cert.pem" ]; then
    bind=127.0.0.1,127.0.0.2
    tls=(--ssl-ca="$dir/tls/ca.pem" --ssl-cert="$dir/tls/server-cert.pem" --ssl-key="$dir/tls/server-key.pem")
  fi
  echo --no-defaults --user="$(id -un)" --datadir="$dir/data" --socket="$dir/mysqld.sock" \
    --pid-file="$dir/mysqld.pid" --port="$port" --bind-address="$bind" --skip-name-resolve \
    --log-error="$dir/error.log" --innodb-buffer-pool-size=64M --max-connections=500 "${tls[@]}"
}

# A CA, a server certificate it signs (for 127.0.0.1 and localhost) and an unrelated CA, in
# DIR/tls. EC keys: made in a few milliseconds.
make_certificates() {
  local tls=$1/tls
  mkdir -p "$tls"
  local key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  {
    openssl req -x509 "${key[@]}" -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" -days 3650 -subj "/CN=dlock test CA"
    openssl req -x509 "${key[@]}" -keyout "$tls/other-ca-key.pem" -out "$tls/other-ca.pem" -days 3650 \
      -subj "/CN=dlock unrelated CA"
    openssl req -new "${key[@]}" -keyout "$tls/server-key.pem" -out "$tls/server.csr" -subj "/CN=localhost"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$tls/server.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial \
      -days 3650 -extfile "$tls/server.ext" -out "$tls/server-cert.pem"
  } >"$tls/openssl.log" 2>&1 || { echo "mariadb.sh: making certificates failed; see $tls/openssl.log" >&2; exit 69; }
}

admin() {
  local dir=$1
  shift
  mariadb --no-defaults --socket="$dir/mysqld.sock" -uroot "$@"
}

wait_ready() {
  local dir=$1 pid=$2
  for _ in $(seq 300); do
    if mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -uroot ping >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "mariadb.sh: the server exited during start-up; last lines of $dir/error.log:" >&2
      tail -n 20 "$dir/error.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "mariadb.sh: no answer within 30 s; see $dir/error.log" >&2
  return 1
}

free_port() { first_free_port mariadb.sh 23306 23399; }

start() {
  local dir=$1 port=${2:-}
  install_if_missing
  settle_dir_and_port
  if [ "${MARIADB_TLS:-0}" = 1 ] && [ ! -f "$dir/tls/server-cert.pem" ]; then make_certificates "$dir"; fi
  local fresh=0
  if [ ! -d "$dir/data/mysql" ]; then
    fresh=1
    mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$dir/data" \
      --auth-root-authentication-method=socket --skip-test-db >"$dir/install.log" 2>&1 ||
      { echo "mariadb.sh: mariadb-install-db failed; see $dir/install.log" >&2; exit 69; }
  fi
  # shellcheck disable=SC2046
  setsid mariadbd $(server_args "$dir" "$port") </dev/null >>"$dir/stdout.log" 2>&1 &
  local pid=$!
  wait_ready "$dir" "$pid"
  if [ "$fresh" = 1 ]; then
    admin "$dir" <<'SQL'
CREATE DATABASE dlock_test;
CREATE USER 'dlock'@'127.0.0.1' IDENTIFIED BY 'dlock-test-pw';
GRANT ALL PRIVILEGES ON dlock_test.* TO 'dlock'@'127.0.0.1';
CREATE USER 'dlock_admin'@'127.0.0.1' IDENTIFIED BY 'dlock-admin-pw';
GRANT ALL PRIVILEGES ON *.* TO 'dlock_admin'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER 'dlock_dml'@'127.0.0.1' IDENTIFIED BY 'dlock-dml-pw';
GRANT SELECT, INSERT, UPDATE, DELETE ON dlock_test.* TO 'dlock_dml'@'127.0.0.1';
CREATE USER 'dlock_none'@'127.0.0.1' IDENTIFIED BY 'dlock-none-pw';
SQL
  fi
  local base="127.0.0.1:$port/dlock_test"
  cat >"$dir/env" <<ENV
DLOCK_MYSQL_URL=mysql://dlock:dlock-test-pw@$base
DLOCK_MYSQL_ADMIN_URL=mysql://dlock_admin:dlock-admin-pw@$base
DLOCK_MYSQL_DML_URL=mysql://dlock_dml:dlock-dml-pw@$base
DLOCK_MYSQL_NONE_URL=mysql://dlock_none:dlock-none-pw@$base
DLOCK_MYSQL_DIR=$dir
DLOCK_MYSQL_PORT=$port
DLOCK_MYSQL_SOCKET=$dir/mysqld.sock
ENV
  if [ -f "$dir/tls/server-cert.pem" ]; then
    admin "$dir" <<'SQL'
CREATE USER IF NOT EXISTS 'dlock_tls'@'127.0.0.1' IDENTIFIED BY 'dlock-tls-pw' REQUIRE SSL;
GRANT ALL PRIVILEGES ON dlock_test.* TO 'dlock_tls'@'127.0.0.1';
SQL
    cat >>"$dir/env" <<ENV
DLOCK_MYSQL_TLS_URL=mysql://dlock_tls:dlock-tls-pw@$base
DLOCK_MYSQL_TLS_MISNAMED_URL=mysql://dlock_tls:dlock-tls-pw@127.0.0.2:$port/dlock_test
DLOCK_MYSQL_TLS_CA=$dir/tls/ca.pem
DLOCK_MYSQL_TLS_OTHER_CA=$dir/tls/other-ca.pem
ENV
  fi
  cat "$dir/env"
}

stop() {
  local dir=$1
  [ -f "$dir/mysqld.pid" ] || return 0
  local pid
  pid=$(cat "$dir/mysqld.pid")
  kill "$pid" 2>/dev/null || { rm -f "$dir/mysqld.pid"; return 0; }
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$dir/mysqld.pid"; return 0; }
    sleep 0.1
  done
  echo "mariadb.sh: pid $pid ignored SIGTERM for 30 s; killing it" >&2
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/mysqld.pid"
}

[ $# -ge 2 ] || usage
case "$1" in
  start) start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  restart) stop "$2" && start "$2" ;;
  *) usage ;;
esac
