#!/usr/bin/env bash
# Private ZooKeeper 3.8 servers (Debian's package) for tests and benchmarks: one standalone
# server, or an ensemble of N (3 for the failover tests), each node with its own client,
# quorum and election ports on 127.0.0.1 and its own directory under DIR (config, data with
# its myid, log, pid), started in the background and stopped by pid. Nothing system-wide.
#
#   scripts/servers/zookeeper.sh start DIR [N]       start N nodes (default 1: standalone;
#                                                    DIR/1 ... DIR/N), wait until every node
#                                                    answers and an ensemble has elected its
#                                                    leader; print KEY=VALUE lines
#   scripts/servers/zookeeper.sh stop DIR            stop every node whose pid is under DIR
#                                                    (SIGTERM, SIGKILL after 15 s)
#   scripts/servers/zookeeper.sh kill DIR I SIGNAL   send SIGNAL (KILL, TERM, STOP, CONT, ...)
#                                                    to node I; waits until it is gone after
#                                                    KILL, TERM or INT
#   scripts/servers/zookeeper.sh restart DIR I       start node I again (stopped first if it
#                                                    runs) with its config and data; wait
#                                                    until it serves
#   scripts/servers/zookeeper.sh leader DIR          print the index of the leader (1 for a
#                                                    standalone server)
#
# Printed on start (also kept in DIR/env):
#   DLOCK_ZK_URL           zookeeper://127.0.0.1:PORT of node 1
#   DLOCK_ZK_ENSEMBLE_URL  zookeeper://127.0.0.1:P1,127.0.0.1:P2,... (ensembles only)
#   DLOCK_ZK_PORT, DLOCK_ZK_PORTS (client ports, node 1 and all), DLOCK_ZK_DIR
#
# Tuned for tests: tickTime 200 ms, sessions of 400 ms to 60 s, empty container nodes removed
# within about a second (znode.container.checkIntervalMs=1000), no TTL nodes, a 256 MB heap,
# small transaction log blocks. Timed on a 2-core VM (2026-11-26, beside a compile): start of
# a standalone server 0.4-0.8 s; of a 3-node ensemble 1.9-3.0 s until a leader and two
# followers serve (the JVMs' start-up; the election itself ~0.3 s); after a leader's SIGKILL a
# new leader in 0.5-0.7 s; `restart` of a node 1.3-1.5 s.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  sed -n '2,32p' "$0" >&2
  exit 64
}

install_if_missing() { install_packages zookeeper.sh zookeeper; }

# The jars the server loads classes from (checked with -Xlog:class+load, standalone and in an
# ensemble): zookeeper, zookeeper-jute, metrics-core, snappy-java, and slf4j bound to log4j 1.2
# (Debian's 3.8 logs through log4j 1.2, not logback; without a binding slf4j logs nothing).
# zookeeper.jar's manifest adds the rest of its dependencies (netty, jackson, commons-cli,
# jetty for the disabled admin server): opened, never used.
classpath() {
  local j=/usr/share/java
  echo "$j/zookeeper.jar:$j/zookeeper-jute.jar:$j/metrics-core.jar:$j/snappy-java.jar:$j/slf4j-api.jar:$j/slf4j-log4j12.jar:$j/log4j-1.2.jar"
}


# Sets `port` to a client port nobody listens on and start() has not handed out yet. An
# ensemble node's quorum and election ports are derived from it (+300, +600), free too: a
# running node holds its client port, so no other start here picks its peer ports, which
# only the leader (quorum) or no node at all (during a restart) may be holding.
free_port() {
  local peers=$1
  for port in $(seq 21000 21299); do
    [ -z "${claimed[$port]:-}" ] || continue
    port_taken "$port" && continue
    if [ "$peers" = 1 ]; then
      port_taken $((port + 300)) || port_taken $((port + 600)) && continue
    fi
    claimed[$port]=1
    return
  done
  echo "zookeeper.sh: no free port in 21000-21299 (peers: 21300-21899)" >&2
  exit 69
}

# DIR/I/ports holds node I's "CLIENT QUORUM ELECTION" ports.
client_port() { cut -d' ' -f1 "$1/$2/ports"; }

write_config() {
  local dir=$1 i=$2 n=$3 node=$1/$2 j client quorum election
  read -r client _ <"$node/ports"
  mkdir -p "$node/data"
  {
    echo "tickTime=200"
    echo "initLimit=50"
    echo "syncLimit=10"
    echo "dataDir=$node/data"
    echo "clientPort=$client"
    echo "clientPortAddress=127.0.0.1"
    echo "minSessionTimeout=400"
    echo "maxSessionTimeout=60000"
    echo "maxClientCnxns=0"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
    echo "extendedTypesEnabled=false"
    # In KB: transaction log files grow (sparsely) in 4 MB steps instead of 64 MB; a new log
    # and a snapshot every 5000 to 10000 transactions.
    echo "preAllocSize=4096"
    echo "snapCount=10000"
    echo "autopurge.snapRetainCount=3"
    echo "autopurge.purgeInterval=1"
    if [ "$n" -gt 1 ]; then
      for j in $(seq "$n"); do
        read -r _ quorum election <"$dir/$j/ports"
        echo "server.$j=127.0.0.1:$quorum:$election"
      done
    fi
  } >"$node/zoo.cfg"
  [ "$n" -gt 1 ] && echo "$i" >"$node/data/myid"
  cat >"$node/log4j.properties" <<CONF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.RollingFileAppender
log4j.appender.FILE.File=$node/zookeeper.log
log4j.appender.FILE.MaxFileSize=10MB
log4j.appender.FILE.MaxBackupIndex=2
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
CONF
}

# A four-letter command to a client port; empty if it does not answer within 2 s.
four() {
  # shellcheck disable=SC2016  # expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf %s "$1" >&3 && cat <&3' \
    "$1" "$2" 2>/dev/null || true
}

mode_of() { four "$1" srvr | sed -n 's/^Mode: //p'; }

# Running, and not a zombie: a server's exit waits for its new parent to reap it.
alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# PID listens on PORT: the answer comes from this node, not from a server that held the port
# before it (which makes the node exit, reported with its log). Assumed without ss(8).
listens() {
  command -v ss >/dev/null || return 0
  ss -Hltnp "sport = :$2" 2>/dev/null | grep -q "pid=$1,"
}

launch() {
  local node=$1/$2 n=$3 main=org.apache.zookeeper.server.quorum.QuorumPeerMain
  [ "$n" -gt 1 ] || main=org.apache.zookeeper.server.ZooKeeperServerMain
  # A session of setsid's own: no terminal signal reaches the server; setsid execs java here,
  # so $! is the server's pid.
  setsid java -Xmx256m -Dznode.container.checkIntervalMs=1000 \
    -Dlog4j.configuration="file:$node/log4j.properties" -Dzookeeper.jmx.log4j.disable=true \
    -cp "$(classpath)" "$main" "$node/zoo.cfg" </dev/null >>"$node/stdout.log" 2>&1 &
  echo $! >"$node/zookeeper.pid"
}

# The last lines of a node's log and output, less the lines of our own four-letter probes.
log_tail() {
  grep -hv 'Processing [a-z]* command from' "$1/zookeeper.log" 2>/dev/null | tail -n 20 >&2 || true
  tail -n 5 "$1/stdout.log" >&2 2>/dev/null || true
}

# wait_ready DIR N WHOLE I...: until each node I listens, answers ruok with imok and reports
# the mode it should (srvr): "standalone" when N is 1, else leader or follower, and with WHOLE
# 1, exactly one leader among them (start); a restarted node only needs to serve. 30 s at most.
wait_ready() {
  local dir=$1 n=$2 whole=$3 i port leaders pending pid
  shift 3
  local deadline=$((SECONDS + 30))
  while :; do
    pending=() leaders=0
    for i in "$@"; do
      pid=$(cat "$dir/$i/zookeeper.pid")
      if ! alive "$pid"; then
        echo "zookeeper.sh: node $i (pid $pid) exited during start-up; last lines of $dir/$i/zookeeper.log:" >&2
        log_tail "$dir/$i"
        exit 69
      fi
      port=$(client_port "$dir" "$i")
      if ! listens "$pid" "$port" || [ "$(four "$port" ruok)" != imok ]; then
        pending+=("$i")
        continue
      fi
      case "$n:$(mode_of "$port")" in
        1:standalone) ;;
        [2-9]:leader) leaders=$((leaders + 1)) ;;
        [2-9]:follower) ;;
        *) pending+=("$i") ;;
      esac
    done
    if [ ${#pending[@]} -eq 0 ] && { [ "$whole" = 0 ] || [ "$n" -eq 1 ] || [ "$leaders" -eq 1 ]; }; then
      return 0
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.1
  done
  echo "zookeeper.sh: not serving within 30 s (nodes not ready: ${pending[*]:-none}; leaders: $leaders)" >&2
  [ ${#pending[@]} -gt 0 ] || pending=("$@")
  for i in "${pending[@]}"; do
    echo "zookeeper.sh: last lines of $dir/$i/zookeeper.log:" >&2
    log_tail "$dir/$i"
  done
  exit 69
}

write_env() {
  local dir=$1 n=$2 ports=() servers=() i
  for i in $(seq "$n"); do
    ports+=("$(client_port "$dir" "$i")")
    servers+=("127.0.0.1:${ports[-1]}")
  done
  {
    cat <<ENV
DLOCK_ZK_URL=zookeeper://127.0.0.1:${ports[0]}
DLOCK_ZK_PORT=${ports[0]}
DLOCK_ZK_PORTS="${ports[*]}"
DLOCK_ZK_DIR=$dir
ENV
    if [ "$n" -gt 1 ]; then
      echo "DLOCK_ZK_ENSEMBLE_URL=zookeeper://$(IFS=,; echo "${servers[*]}")"
    fi
  } >"$dir/env"
  cat "$dir/env"
}

start() {
  local dir=$1 n=${2:-1} i port
  [[ "$n" =~ ^[1-9]$ ]] || usage
  install_if_missing
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  declare -A claimed=()
  # Every node's ports first: each node's config names all of them.
  for i in $(seq "$n"); do
    mkdir -p "$dir/$i"
    if [ -f "$dir/$i/ports" ]; then
      claimed[$(client_port "$dir" "$i")]=1
    else
      free_port "$((n > 1))"
      echo "$port $((port + 300)) $((port + 600))" >"$dir/$i/ports"
    fi
  done
  for i in $(seq "$n"); do write_config "$dir" "$i" "$n"; done
  for i in $(seq "$n"); do launch "$dir" "$i" "$n"; done
  echo "$n" >"$dir/instances"
  wait_ready "$dir" "$n" 1 $(seq "$n")
  write_env "$dir" "$n"
}

# Stops the nodes given, in parallel: SIGTERM, then SIGKILL to those still running after 15 s.
stop_nodes() {
  local dir=$1 i pid left
  shift
  for i in "$@"; do
    [ -f "$dir/$i/zookeeper.pid" ] || continue
    pid=$(cat "$dir/$i/zookeeper.pid")
    # SIGCONT too: a node stopped by `kill DIR I STOP` handles SIGTERM only once resumed.
    if kill "$pid" 2>/dev/null; then kill -CONT "$pid" 2>/dev/null || true; else rm -f "$dir/$i/zookeeper.pid"; fi
  done
  for _ in $(seq 150); do
    left=0
    for i in "$@"; do
      [ -f "$dir/$i/zookeeper.pid" ] || continue
      if alive "$(cat "$dir/$i/zookeeper.pid")"; then left=1; else rm -f "$dir/$i/zookeeper.pid"; fi
    done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  for i in "$@"; do
    [ -f "$dir/$i/zookeeper.pid" ] || continue
    pid=$(cat "$dir/$i/zookeeper.pid")
    echo "zookeeper.sh: node $i (pid $pid) ignored SIGTERM for 15 s; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$i/zookeeper.pid"
  done
}

stop() {
  local dir=$1
  [ -f "$dir/instances" ] || return 0
  stop_nodes "$dir" $(seq "$(cat "$dir/instances")")
}

node_of() {
  local dir=$1 i=$2
  if ! [[ "$i" =~ ^[1-9]$ ]] || [ ! -f "$dir/$i/zoo.cfg" ]; then
    echo "zookeeper.sh: no node $i under $dir" >&2
    exit 64
  fi
}

signal() {
  local dir=$1 i=$2 sig=${3#SIG} pid
  node_of "$dir" "$i"
  [ -f "$dir/$i/zookeeper.pid" ] || { echo "zookeeper.sh: node $i is not running" >&2; exit 1; }
  pid=$(cat "$dir/$i/zookeeper.pid")
  kill -s "$sig" "$pid" || exit 1
  case "$sig" in
    KILL | 9 | TERM | 15 | INT | 2)
      for _ in $(seq 150); do
        alive "$pid" || { rm -f "$dir/$i/zookeeper.pid"; return 0; }
        sleep 0.1
      done
      echo "zookeeper.sh: node $i (pid $pid) still runs 15 s after SIG$sig" >&2
      exit 1
      ;;
  esac
}

restart() {
  local dir=$1 i=$2 n
  node_of "$dir" "$i"
  n=$(cat "$dir/instances")
  stop_nodes "$dir" "$i"
  launch "$dir" "$i" "$n"
  wait_ready "$dir" "$n" 0 "$i"
}

leader() {
  local dir=$1 i
  [ -f "$dir/instances" ] || { echo "zookeeper.sh: no servers under $dir" >&2; exit 64; }
  for i in $(seq "$(cat "$dir/instances")"); do
    case "$(mode_of "$(client_port "$dir" "$i")")" in
      leader | standalone) echo "$i"; return 0 ;;
    esac
  done
  echo "zookeeper.sh: no node under $dir is leading" >&2
  exit 1
}

[ $# -ge 2 ] || usage
case "$1" in
  start) [ $# -le 3 ] || usage; start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  kill) [ $# -eq 4 ] || usage; signal "$2" "$3" "$4" ;;
  restart) [ $# -eq 3 ] || usage; restart "$2" "$3" ;;
  leader) leader "$2" ;;
  *) usage ;;
esac
