#!/usr/bin/env bash
# Private Redis servers for tests and benchmarks: N independent instances (Redlock needs 3 or 5),
# each with its own port on 127.0.0.1 and its own directory under DIR, started in the
# background and stopped by pid. No persistence unless REDIS_PERSIST says so. Nothing
# system-wide is used.
#
#   scripts/servers/redis.sh start DIR [N]      start N instances (default 1; DIR/1 ... DIR/N),
#                                               wait until each answers; print KEY=VALUE lines
#   scripts/servers/redis.sh stop DIR           stop every instance whose pid is under DIR
#   scripts/servers/redis.sh restart DIR [I]    stop instance I (default 1) and start it again with
#                                               its settings: without persistence its data is gone
#
#   REDIS_PERSIST=always|everysec   append-only file with that fsync policy (default: none)
#
# Printed on start (also kept in DIR/env):
#   DLOCK_REDIS_URL        redis://dlock:…@127.0.0.1:PORT/0, instance 1, ACL user 'dlock' (all commands)
#   DLOCK_REDIS_URLS       that URL of every instance, space-separated
#   DLOCK_REDIS_PLAIN_URL  instance 1 through the default user's password (plain AUTH)
#   DLOCK_REDIS_DIR, DLOCK_REDIS_PORT (instance 1), DLOCK_REDIS_PORTS (all)
#   DLOCK_REDLOCK_URL      redlock://dlock:…@127.0.0.1:PORT1,127.0.0.1:PORT2,…/0 over every
#                          instance (3 or more only)
#
# The passwords are fixed: the servers listen on loopback only and live as long as a test run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  sed -n '2,24p' "$0" >&2
  exit 64
}

install_if_missing() { install_packages redis.sh redis-server redis-tools; }

free_port() {
  local port
  for port in $(seq 26379 26479); do
    port_taken "$port" || [ -n "${claimed[$port]:-}" ] || { echo "$port"; return; }
  done
  echo "redis.sh: no free port in 26379-26479" >&2
  exit 69
}

write_config() {
  local dir=$1 port=$2
  {
    echo "bind 127.0.0.1"
    echo "port $port"
    echo "dir $dir"
    echo "pidfile $dir/redis.pid"
    echo "logfile $dir/redis.log"
    echo "daemonize yes"
    echo "save \"\""
    case "${REDIS_PERSIST:-}" in
      always | everysec) echo "appendonly yes"; echo "appendfsync $REDIS_PERSIST" ;;
      "") echo "appendonly no" ;;
      *) echo "redis.sh: REDIS_PERSIST must be always or everysec" >&2; exit 64 ;;
    esac
    echo "maxclients 2000"
    echo "user default on >dlock-default-pw ~* &* +@all"
    echo "user dlock on >dlock-test-pw ~* &* +@all"
  } >"$dir/redis.conf"
}

cli() {
  local port=$1
  shift
  redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning --user dlock --pass dlock-test-pw "$@"
}

launch() {
  local dir=$1 port=$2
  redis-server "$dir/redis.conf" </dev/null >>"$dir/stdout.log" 2>&1 ||
    { echo "redis.sh: redis-server failed to start; see $dir/redis.log" >&2; exit 69; }
  for _ in $(seq 300); do
    [ "$(cli "$port" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "redis.sh: no answer on port $port within 30 s; last lines of $dir/redis.log:" >&2
  tail -n 20 "$dir/redis.log" >&2
  exit 69
}

write_env() {
  local dir=$1 n=$2 urls=() ports=() servers=() i
  for i in $(seq "$n"); do
    ports+=("$(cat "$dir/$i/port")")
    urls+=("redis://dlock:dlock-test-pw@127.0.0.1:${ports[-1]}/0")
    servers+=("127.0.0.1:${ports[-1]}")
  done
  {
    cat <<ENV
DLOCK_REDIS_URL=${urls[0]}
DLOCK_REDIS_URLS="${urls[*]}"
DLOCK_REDIS_PLAIN_URL=redis://:dlock-default-pw@127.0.0.1:${ports[0]}/0
DLOCK_REDIS_DIR=$dir
DLOCK_REDIS_PORT=${ports[0]}
DLOCK_REDIS_PORTS="${ports[*]}"
ENV
    if [ "$n" -ge 3 ]; then
      echo "DLOCK_REDLOCK_URL=redlock://dlock:dlock-test-pw@$(IFS=,; echo "${servers[*]}")/0"
    fi
  } >"$dir/env"
  cat "$dir/env"
}

start() {
  local dir=$1 n=${2:-1} i port
  [[ "$n" =~ ^[1-9][0-9]?$ ]] || usage
  install_if_missing
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  declare -A claimed=()
  for i in $(seq "$n"); do
    if [ -f "$dir/$i/port" ]; then port=$(cat "$dir/$i/port"); else port=$(free_port); fi
    claimed[$port]=1
    mkdir -p "$dir/$i"
    echo "$port" >"$dir/$i/port"
    write_config "$dir/$i" "$port"
    launch "$dir/$i" "$port"
  done
  echo "$n" >"$dir/instances"
  write_env "$dir" "$n"
}

# Running, and not a zombie: a daemon's exit waits for init to reap it, which can take seconds.
alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

stop_one() {
  local dir=$1 pid
  [ -f "$dir/redis.pid" ] || return 0
  pid=$(cat "$dir/redis.pid")
  kill "$pid" 2>/dev/null || { rm -f "$dir/redis.pid"; return 0; }
  for _ in $(seq 300); do
    alive "$pid" || { rm -f "$dir/redis.pid"; return 0; }
    sleep 0.1
  done
  echo "redis.sh: pid $pid ignored SIGTERM for 30 s; killing it" >&2
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/redis.pid"
}

stop() {
  local dir=$1 i
  [ -f "$dir/instances" ] || return 0
  for i in $(seq "$(cat "$dir/instances")"); do stop_one "$dir/$i"; done
}

restart() {
  local dir=$1 i=${2:-1}
  [ -f "$dir/$i/port" ] || { echo "redis.sh: no instance $i under $dir" >&2; exit 64; }
  stop_one "$dir/$i"
  launch "$dir/$i" "$(cat "$dir/$i/port")"
}

[ $# -ge 2 ] || usage
case "$1" in
  start) start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  restart) restart "$2" "${3:-}" ;;
  *) usage ;;
esac
