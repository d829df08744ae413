#!/usr/bin/env bash
# Installs dependencies, builds the test build (AddressSanitizer + UBSan, warnings as errors)
# and runs the whole suite with ctest; then runs the CLI tests again against the statically
# linked release binary, the one users get. Usage: scripts/test.sh [extra ctest arguments]
#
# A private MariaDB (scripts/servers/mariadb.sh: its own data directory in /tmp, a free port
# on 127.0.0.1) runs for the length of the run, stopped and deleted on exit. The conformance
# suite runs over it (DLOCK_TEST_URLS) and so do the mysql fault tests (DLOCK_MYSQL_*).
#
#   DLOCK_NO_MARIADB=1        start no server: the mysql:// cases are skipped or not listed
#   DLOCK_TEST_URLS="URL ..." the servers the conformance suite runs over (default: one URL
#                             per mode in DLOCK_TEST_MYSQL_MODES on the private MariaDB)
#   DLOCK_TEST_MYSQL_MODES    the mysql:// modes tested (default below)
set -euo pipefail
cd "$(dirname "$0")/.."

# The mysql:// modes the conformance suite covers: lease is the plain URL, any other mode is
# URL?mode=MODE.
mysql_modes=${DLOCK_TEST_MYSQL_MODES:-lease session row}

scripts/install-deps.sh

if [ "${DLOCK_NO_MARIADB:-0}" != 1 ]; then
  mariadb_dir=$(mktemp -d /tmp/dlock-mariadb.XXXXXX)
  # shellcheck disable=SC2064  # the directory is fixed now
  trap "scripts/servers/mariadb.sh stop '$mariadb_dir' || true; rm -rf '$mariadb_dir'" EXIT
  scripts/servers/mariadb.sh start "$mariadb_dir" >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$mariadb_dir/env"
  set +a
  echo "test.sh: MariaDB on 127.0.0.1:$DLOCK_MYSQL_PORT (data in $mariadb_dir)"
  if [ -z "${DLOCK_TEST_URLS+set}" ]; then
    urls=()
    for mode in $mysql_modes; do
      if [ "$mode" = lease ]; then urls+=("$DLOCK_MYSQL_URL"); else urls+=("$DLOCK_MYSQL_URL?mode=$mode"); fi
    done
    export DLOCK_TEST_URLS="${urls[*]}"
  fi
fi

cmake --preset asan >/dev/null
cmake --build --preset asan -j2
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target dlock_cli dlock_serve
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
DLOCK_TEST_BINARY="$PWD/build/release/dlock" ctest --preset asan -L cli
ctest --preset asan "$@"
