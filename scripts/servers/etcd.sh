#!/usr/bin/env bash
# A private etcd for tests and benchmarks: one member, or a cluster of three on loopback (for
# the leader-failover tests), each with its own data directory and ports on 127.0.0.1, started
# in the background and stopped by pid. Nothing system-wide is used.
#
#   scripts/servers/etcd.sh start DIR [MEMBERS]    MEMBERS 1 (default) or 3: initialise DIR (first
#                                                  time), start every member, wait until the
#                                                  cluster answers; print KEY=VALUE lines (below)
#   scripts/servers/etcd.sh stop DIR               stop every member of DIR
#   scripts/servers/etcd.sh stop-member DIR I      stop member I (1-based), e.g. the leader
#   scripts/servers/etcd.sh kill DIR I SIGNAL      send SIGNAL (KILL, TERM, STOP, CONT, ...) to
#                                                  member I; waits until it is gone after KILL,
#                                                  TERM or INT
#   scripts/servers/etcd.sh start-member DIR I     start member I again, with its data
#   scripts/servers/etcd.sh leader DIR             print the leader's member number
#
# Printed on start (also kept in DIR/env):
#   DLOCK_ETCD_URL        etcd://127.0.0.1:PORT[,127.0.0.1:PORT...]  (every member's client URL)
#   DLOCK_ETCD_ENDPOINTS  the same as etcdctl's --endpoints (http://…)
#   DLOCK_ETCD_DIR, DLOCK_ETCD_PORTS (the client ports, in member order)
#
# Authentication is off: the cluster listens on loopback only and lives as long as a test run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  sed -n '2,21p' "$0" >&2
  exit 64
}

install_if_missing() { install_packages etcd.sh etcd-server etcd-client; }

# Two free ports per member (client, peer) from 22379 on, as "client:peer" lines.
free_ports() {
  local members=$1 port found=0
  for port in $(seq 22379 2 22477); do
    if ! port_taken "$port" && ! port_taken $((port + 1)); then
      echo "$port:$((port + 1))"
      found=$((found + 1))
      [ "$found" -eq "$members" ] && return
    fi
  done
  echo "etcd.sh: no free ports in 22379-22478" >&2
  exit 69
}

# The cluster's layout, from DIR/ports (one "client:peer" line per member).
read_layout() {
  local dir=$1
  mapfile -t ports <"$dir/ports"
  cluster=""
  clients=()
  local i
  for i in "${!ports[@]}"; do
    cluster+="${cluster:+,}m$((i + 1))=http://127.0.0.1:${ports[$i]#*:}"
    clients+=("127.0.0.1:${ports[$i]%%:*}")
  done
}

endpoints() {
  local IFS=,
  local with_scheme=("${clients[@]/#/http://}")
  echo "${with_scheme[*]}"
}

start_member() {
  local dir=$1 i=$2
  read_layout "$dir"
  local client=${ports[$((i - 1))]%%:*} peer=${ports[$((i - 1))]#*:} state=new
  [ -d "$dir/m$i/member" ] && state=existing
  etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" --initial-cluster-token "dlock-$(basename "$dir")" \
    --listen-metrics-urls "" --logger zap --log-outputs "$dir/m$i.log" >/dev/null 2>&1 &
  echo $! >"$dir/m$i.pid"
}

wait_healthy() {
  local dir=$1 endpoint=$2
  for _ in $(seq 300); do
    if ETCDCTL_API=3 etcdctl --endpoints="$endpoint" --dial-timeout=1s endpoint health >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "etcd.sh: $endpoint not healthy within 30 s; see $dir/m*.log" >&2
  return 1
}

stop_member() {
  local dir=$1 i=$2 pid
  pid=$(cat "$dir/m$i.pid" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || { rm -f "$dir/m$i.pid"; return 0; }
  for _ in $(seq 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/m$i.pid"
      return 0
    fi
    sleep 0.1
  done
  echo "etcd.sh: member $i (pid $pid) did not stop within 30 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$dir/m$i.pid"
}

start() {
  local dir=$1 members=${2:-1}
  case $members in 1 | 3) ;; *) echo "etcd.sh: MEMBERS is 1 or 3, not $members" >&2; exit 64 ;; esac
  install_if_missing
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ -f "$dir/ports" ] || free_ports "$members" >"$dir/ports"
  read_layout "$dir"
  local i
  for i in $(seq "${#ports[@]}"); do start_member "$dir" "$i"; done
  for client in "${clients[@]}"; do wait_healthy "$dir" "http://$client"; done
  {
    local IFS=,
    echo "DLOCK_ETCD_URL=etcd://${clients[*]}"
    echo "DLOCK_ETCD_ENDPOINTS=$(endpoints)"
    echo "DLOCK_ETCD_DIR=$dir"
    local client_ports=()
    for p in "${ports[@]}"; do client_ports+=("${p%%:*}"); done
    IFS=' '
    echo "DLOCK_ETCD_PORTS=\"${client_ports[*]}\""
  } | tee "$dir/env"
}

alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

signal_member() {
  local dir=$1 i=$2 sig=$3 pid
  pid=$(cat "$dir/m$i.pid" 2>/dev/null) || { echo "etcd.sh: member $i of $dir has no pid file" >&2; return 1; }
  kill -s "$sig" "$pid" || return 1
  case $sig in
    KILL | TERM | INT)
      for _ in $(seq 300); do
        if ! alive "$pid"; then
          rm -f "$dir/m$i.pid"
          return 0
        fi
        sleep 0.1
      done
      echo "etcd.sh: member $i (pid $pid) still runs 30 s after SIG$sig" >&2
      return 1
      ;;
  esac
}

leader() {
  local dir
  dir=$(cd "$1" && pwd)
  read_layout "$dir"
  local i
  for i in "${!clients[@]}"; do
    if ETCDCTL_API=3 etcdctl --endpoints="http://${clients[$i]}" --dial-timeout=1s endpoint status -w json 2>/dev/null |
      python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; sys.exit(0 if s["leader"]==s["header"]["member_id"] else 1)'; then
      echo $((i + 1))
      return 0
    fi
  done
  echo "etcd.sh: no member of $dir reports itself leader" >&2
  return 1
}

[ $# -ge 2 ] || usage
case $1 in
  start) start "$2" "${3:-1}" ;;
  stop)
    for pidfile in "$2"/m*.pid; do
      [ -e "$pidfile" ] || continue
      member=$(basename "$pidfile" .pid)
      stop_member "$2" "${member#m}"
    done
    ;;
  stop-member) stop_member "$2" "${3:?member number}" ;;
  kill) [ $# -eq 4 ] || usage; signal_member "$2" "$3" "$4" ;;
  start-member)
    dir=$(cd "$2" && pwd)
    start_member "$dir" "${3:?member number}"
    read_layout "$dir"
    wait_healthy "$dir" "http://${clients[$(($3 - 1))]}"
    ;;
  leader) leader "$2" ;;
  *) usage ;;
esac
