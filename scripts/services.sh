#!/usr/bin/env bash
# Starts, stops and reports the servers the integration tests need: Redis,
# ZooKeeper, Consul, MySQL (MariaDB when run from Debian packages), etcd and
# PostgreSQL, plus
# two more Redis set-ups for the Redis engine: a three-master Redis Cluster
# (redis-cluster) and five independent Redis servers for Redlock (redis-nodes).
#
# Usage: scripts/services.sh up|down|status|env [SERVICE ...]
#   SERVICE: redis zookeeper consul mysql etcd postgres redis-cluster redis-nodes
#            (default: all)
#
#   up      Start whatever is not already answering, wait until each server
#           answers a protocol-level check, then print the env (as `env`).
#           With a Docker engine (`docker info` works) the servers come from
#           docker-compose.yml; otherwise from Debian packages, installed with
#           apt-get when missing and started bound to loopback only, with
#           data, logs and pid files under $CERBERUS_RUN.
#   down    Stop only the servers this script started (by their pid files),
#           or `docker compose down` in Docker mode. A server that was already
#           running when `up` ran is never touched. Stopping redis-cluster
#           also deletes its nodes' cluster config, so the next `up` forms a
#           new cluster (a node that merely died rejoins its old one).
#   status  One line per service: up/down, its address(es), and why when down.
#   env     Print the export lines for the CERBERUS_* variables the tests read:
#           eval "$(scripts/services.sh env)"
#
#   `up` also installs Debian's chromium (apt-get) when no chromium is on
#   PATH, in either mode: the status page test drives it headless.
#
# Environment:
#   CERBERUS_REDIS_ADDR, CERBERUS_ZK_ADDR, CERBERUS_CONSUL_ADDR,
#   CERBERUS_MYSQL_DSN, CERBERUS_ETCD_ADDR, CERBERUS_POSTGRES_DSN (a URL:
#   postgres://user@host:port/db?...)
#                          addresses (defaults: the usual ports on 127.0.0.1);
#                          only loopback hosts are accepted.
#   CERBERUS_REDIS_CLUSTER_ADDRS  comma-separated cluster nodes, at least three
#                          masters, no replicas (127.0.0.1:7001,...:7002,...:7003)
#   CERBERUS_REDLOCK_ADDRS comma-separated independent Redis servers, at least
#                          three (127.0.0.1:6391 to 127.0.0.1:6395)
#   CERBERUS_RUN           run dir for data/logs/pids (/tmp/cerberus-services)
#   CERBERUS_WAIT          seconds to wait for each server to answer (60)
#   CERBERUS_SERVICES_MODE docker|local to force a mode (default: detect)
#   CERBERUS_CACHE         where scripts/build-consul.sh caches consul
#   CERBERUS_MYSQL_SOCKET  unix socket used (as root) to let root log in over
#                          TCP when a reused MySQL refuses it
# shellcheck disable=SC2016 # bash -c '...' snippets get "$1" "$2" as arguments
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run=${CERBERUS_RUN:-/tmp/cerberus-services}
run=$(realpath -m "$run")
wait_secs=${CERBERUS_WAIT:-60}
compose_project=cerberus

REDIS_ADDR=${CERBERUS_REDIS_ADDR:-127.0.0.1:6379}
ZK_ADDR=${CERBERUS_ZK_ADDR:-127.0.0.1:2181}
CONSUL_ADDR=${CERBERUS_CONSUL_ADDR:-127.0.0.1:8500}
MYSQL_DSN=${CERBERUS_MYSQL_DSN:-'root:@tcp(127.0.0.1:3306)/test?parseTime=true'}
ETCD_ADDR=${CERBERUS_ETCD_ADDR:-127.0.0.1:2379}
POSTGRES_DSN=${CERBERUS_POSTGRES_DSN:-'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'}
default_cluster_addrs=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
default_redlock_addrs=127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394,127.0.0.1:6395
REDIS_CLUSTER_ADDRS=${CERBERUS_REDIS_CLUSTER_ADDRS:-$default_cluster_addrs}
REDLOCK_ADDRS=${CERBERUS_REDLOCK_ADDRS:-$default_redlock_addrs}
REDIS_CLUSTER_ADDRS=${REDIS_CLUSTER_ADDRS// /}
REDLOCK_ADDRS=${REDLOCK_ADDRS// /}

all_services=(redis zookeeper consul mysql etcd postgres redis-cluster redis-nodes)

log() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- addresses

# The MySQL DSN's address: user:pass@tcp(host:port)/db?...
mysql_addr() {
  local a=${MYSQL_DSN#*@tcp(}
  [ "$a" != "$MYSQL_DSN" ] || die "CERBERUS_MYSQL_DSN must use tcp(host:port): $MYSQL_DSN"
  echo "${a%%)*}"
}
mysql_user() { local u=${MYSQL_DSN%%@*}; echo "${u%%:*}"; }
mysql_db() { local d=${MYSQL_DSN#*)/}; echo "${d%%\?*}"; }

# The PostgreSQL URL's parts: postgres://user[:pass]@host:port/db?...
postgres_rest() {
  local r=${POSTGRES_DSN#postgres://}
  r=${r#postgresql://}
  [ "$r" != "$POSTGRES_DSN" ] || die "CERBERUS_POSTGRES_DSN must be a postgres:// URL with a user, host and port"
  echo "$r"
}
postgres_addr() {
  local r a
  r=$(postgres_rest); a=${r#*@}; a=${a%%/*}; a=${a%%\?*}
  case $a in *:*) echo "$a" ;; *) echo "$a:5432" ;; esac
}
postgres_user() {
  local r u
  r=$(postgres_rest)
  case $r in *@*) u=${r%%@*}; echo "${u%%:*}" ;; *) echo postgres ;; esac
}
postgres_db() {
  local r d
  r=$(postgres_rest); r=${r#*@}
  case $r in */*) d=${r#*/}; d=${d%%\?*}; echo "${d:-postgres}" ;; *) echo postgres ;; esac
}

addr_of() {
  case $1 in
    redis) echo "$REDIS_ADDR" ;;
    zookeeper) echo "$ZK_ADDR" ;;
    consul) echo "$CONSUL_ADDR" ;;
    mysql) mysql_addr ;;
    etcd) echo "$ETCD_ADDR" ;;
    postgres) postgres_addr ;;
    redis-cluster) echo "$REDIS_CLUSTER_ADDRS" ;;
    redis-nodes) echo "$REDLOCK_ADDRS" ;;
    *) die "unknown service $1 (want one of: ${all_services[*]})" ;;
  esac
}

# The addresses of SERVICE, one a line (several for redis-cluster and
# redis-nodes, whose addr_of is a comma-separated list).
addrs_of() {
  local list
  list=$(addr_of "$1")
  tr ',' '\n' <<<"$list" | grep -v '^$' || true
}

# Services made of several servers, one per address.
multi() { [ "$1" = redis-cluster ] || [ "$1" = redis-nodes ]; }

# host and port of an address; localhost becomes 127.0.0.1, and anything
# that is not a loopback address is refused.
host_of() {
  local h=${1%:*}
  h=${h#[}; h=${h%]}
  case $h in
    localhost) echo 127.0.0.1 ;;
    127.* | ::1) echo "$h" ;;
    *) die "$1 is not a loopback address; only 127.0.0.0/8 or localhost may be used" ;;
  esac
}
port_of() { echo "${1##*:}"; }

# ---------------------------------------------------------------- checks

# The bash -c snippets below take their values as "$1" "$2": single quotes
# are meant (shellcheck SC2016 is disabled at the top for them).

# Sends $3 to host:port $1:$2 and prints what comes back within a second or two.
tcp_talk() {
  timeout 3 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "%b" "$3" >&3
    timeout 2 cat <&3 || true
  ' _ "$1" "$2" "$3" 2>/dev/null
}

port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

check_redis() {
  local out
  out=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "PING\r\n" >&3
    IFS= read -r -t 2 line <&3 && printf "%s" "$line"
  ' _ "$1" "$2" 2>/dev/null) || return 1
  [[ $out == +PONG* ]]
}

check_zookeeper() {
  local out
  out=$(tcp_talk "$1" "$2" srvr) || true
  [[ $out == *"Mode: "* ]] && return 0
  # srvr may not be whitelisted on a server we did not configure.
  out=$(tcp_talk "$1" "$2" ruok) || true
  [[ $out == imok* ]]
}

check_consul() {
  local out
  out=$(tcp_talk "$1" "$2" "GET /v1/status/leader HTTP/1.0\r\nHost: $1:$2\r\n\r\n") || return 1
  [[ $out == "HTTP/1."?" 200"* ]] || return 1
  # The body is a JSON string: "127.0.0.1:8300" once there is a leader, "" before.
  [[ ${out##*$'\r\n\r\n'} == '"'?*'"'* ]]
}

# etcd's client port serves /health: {"health":"true"} once the member
# has a leader.
check_etcd() {
  local out
  out=$(tcp_talk "$1" "$2" "GET /health HTTP/1.0\r\nHost: $1:$2\r\n\r\n") || return 1
  [[ $out == "HTTP/1."?" 200"* && $out == *'"health":"true"'* ]]
}

# The server answers a query over TCP as the DSN's user (in its maintenance
# database: the DSN's own may not exist yet).
check_postgres() {
  command -v psql >/dev/null || return 1
  PGCONNECT_TIMEOUT=2 timeout 5 psql -X -w -h "$1" -p "$2" -U "$(postgres_user)" -d postgres \
    -Atc 'SELECT 1' >/dev/null 2>&1
}

mysql_client() {
  command -v mariadb 2>/dev/null || command -v mysql 2>/dev/null || return 1
}

check_mysql() {
  local client
  client=$(mysql_client) || return 1
  timeout 5 "$client" --no-defaults --protocol=TCP -h "$1" -P "$2" -u "$(mysql_user)" \
    --connect-timeout=2 -N -B -e 'SELECT 1' >/dev/null 2>&1
}

# The reply of the Redis at $1:$2 to CLUSTER INFO (QUIT makes the server
# close the connection at once, so this does not wait for a timeout).
cluster_info() { tcp_talk "$1" "$2" 'CLUSTER INFO\r\nQUIT\r\n' | tr -d '\r'; }

# cluster_field INFO NAME: the value of NAME: in a CLUSTER INFO reply.
cluster_field() { sed -n "s/^$2://p" <<<"$1" | head -n 1; }

# Prints why the Redis at $1:$2 is not a node of a healthy cluster, or
# nothing when it answers PING and reports cluster_state:ok.
node_trouble() {
  local info
  check_redis "$1" "$2" || { echo "$1:$2 does not answer PING"; return; }
  info=$(cluster_info "$1" "$2") || true
  case $info in
    *cluster_state:ok*) ;;
    *"cluster support disabled"*) echo "$1:$2 is a Redis without cluster mode (cluster-enabled no)" ;;
    *cluster_state:*) echo "$1:$2 reports cluster_state:$(cluster_field "$info" cluster_state) ($(cluster_field "$info" cluster_known_nodes) known nodes, $(cluster_field "$info" cluster_slots_assigned) of 16384 slots assigned)" ;;
    *) echo "$1:$2 gives no CLUSTER INFO" ;;
  esac
}

# Prints why redis-cluster (or redis-nodes) is not ready, or nothing when
# every node answers (and, for the cluster, reports cluster_state:ok).
trouble() {
  local a host port why
  for a in $(addrs_of "$1"); do
    host=$(host_of "$a"); port=$(port_of "$a")
    if [ "$1" = redis-cluster ]; then
      why=$(node_trouble "$host" "$port")
    else
      why=
      check_redis "$host" "$port" || why="$a does not answer PING"
    fi
    [ -z "$why" ] || { echo "$why"; return; }
  done
}

# check SERVICE: does it answer a protocol-level check at its address(es)?
check() {
  local addr
  if multi "$1"; then
    [ -z "$(trouble "$1")" ]
    return
  fi
  addr=$(addr_of "$1")
  "check_$1" "$(host_of "$addr")" "$(port_of "$addr")"
}

# wait_until WHAT LOGFILE PIDFILE COMMAND...: poll COMMAND until it succeeds,
# the process named in PIDFILE (when there is one) dies, or $wait_secs run out.
wait_until() {
  local what=$1 logfile=$2 pidfile=$3 deadline=$((SECONDS + wait_secs)) pid
  shift 3
  until "$@"; do
    if [ -n "$pidfile" ] && [ -s "$pidfile" ]; then
      pid=$(tr -dc 0-9 <"$pidfile")
      if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        tail -n 20 "$logfile" >&2 2>/dev/null || true
        die "$what: the server exited; see $logfile"
      fi
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      die "$what: not done within ${wait_secs}s; see $logfile"
    fi
    sleep 0.5
  done
}

# wait_for SERVICE LOGFILE [PID]: poll check until it passes, the process
# dies, or $wait_secs run out.
wait_for() {
  local svc=$1 logfile=$2 pid=${3:-} deadline=$((SECONDS + wait_secs))
  until check "$svc"; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      die "$svc exited before answering at $(addr_of "$svc"); see $logfile"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      die "$svc did not answer at $(addr_of "$svc") within ${wait_secs}s; see $logfile"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- packages

apt_updated=
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo -n "$@"
  else die "need root to run: $*"
  fi
}

pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# apt_install PKG...: install the missing ones, without letting their
# maintainer scripts start the daemons (we start them ourselves, on loopback).
apt_install() {
  local missing=() p
  for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  command -v apt-get >/dev/null || die "${missing[*]} missing and no apt-get to install it"
  log "installing ${missing[*]} (apt-get)"
  local policy=/usr/sbin/policy-rc.d made_policy=
  if [ ! -e $policy ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
    made_policy=1
    # shellcheck disable=SC2064 # expand now: $policy is local
    trap "as_root rm -f $policy" EXIT
  fi
  local rc=0
  if [ -z "$apt_updated" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      -o DPkg::Lock::Timeout=300 </dev/null >&2 || rc=$?
    apt_updated=1
  fi
  if [ $rc = 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 "${missing[@]}" </dev/null >&2 || rc=$?
  fi
  if [ -n "$made_policy" ]; then
    as_root rm -f $policy
    trap - EXIT
  fi
  [ $rc = 0 ] || die "apt-get install ${missing[*]} failed (exit $rc)"
}

# ---------------------------------------------------------------- pid files

# A unit is a service (redis, zookeeper, ...) or one server of a
# multi-server service: redis-cluster/PORT, redis-nodes/PORT. Its files live
# in $run/UNIT.
pidfile_of() {
  case $1 in
    */*) echo "$run/$1/redis.pid" ;;
    *) echo "$run/$1/$1.pid" ;;
  esac
}

# Prints the pid recorded for UNIT if that process is alive and is still
# the server we started: its command line mentions our run dir, or (Redis,
# which rewrites its process title) its working directory is there.
our_pid() {
  local f pid
  f=$(pidfile_of "$1")
  [ -s "$f" ] || return 1
  pid=$(tr -dc 0-9 <"$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  if [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" != "$run/$1" ] &&
    ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$run/$1"; then
    return 1
  fi
  echo "$pid"
}

# ---------------------------------------------------------------- local starts

start_redis() {
  local host=$1 port=$2 dir=$run/redis
  apt_install redis-server
  mkdir -p "$dir"
  rm -f "$dir/redis.pid"
  redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" </dev/null 8>&-
  wait_for redis "$dir/redis.log"
}

# launch_redis UNIT HOST PORT [ARG...]: start one redis-server of a
# multi-server service in $run/UNIT and wait until it answers PING.
launch_redis() {
  local unit=$1 host=$2 port=$3 dir=$run/$1
  shift 3
  mkdir -p "$dir"
  rm -f "$dir/redis.pid"
  redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" "$@" </dev/null 8>&-
  wait_until "$unit: Redis at $host:$port answering PING" "$dir/redis.log" "$dir/redis.pid" \
    check_redis "$host" "$port"
}

# Five (or however many CERBERUS_REDLOCK_ADDRS names) independent servers:
# each one that answers is reused, the others are started.
up_redis_nodes() {
  local a host port unit pid
  for a in $(addrs_of redis-nodes); do
    host=$(host_of "$a"); port=$(port_of "$a"); unit=redis-nodes/$port
    if port_open "$host" "$port"; then
      wait_until "redis-nodes: the server on $a (not started by this script) answering PING" \
        "its logs" "" check_redis "$host" "$port"
      if pid=$(our_pid "$unit"); then
        log "redis-nodes: reusing the server already answering at $a (started earlier by this script, pid $pid)"
      else
        log "redis-nodes: reusing the server already answering at $a"
      fi
    else
      apt_install redis-server
      log "redis-nodes: starting at $a"
      launch_redis "$unit" "$host" "$port"
    fi
  done
}

# Every node of the cluster answers and reports cluster_state:ok.
cluster_ok() { [ -z "$(trouble redis-cluster)" ]; }

# A node that has never joined a cluster: it knows only itself and serves no slot.
node_fresh() {
  local info
  info=$(cluster_info "$1" "$2") || return 1
  [ "$(cluster_field "$info" cluster_known_nodes)" = 1 ] &&
    [ "$(cluster_field "$info" cluster_slots_assigned)" = 0 ]
}

# Gives the cluster up to $1 seconds to report cluster_state:ok everywhere.
cluster_ok_within() {
  local deadline=$((SECONDS + $1))
  until cluster_ok; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

# A Redis Cluster of the masters at CERBERUS_REDIS_CLUSTER_ADDRS, no replicas.
# Reused when every node answers and reports cluster_state:ok. Otherwise the
# nodes that do not answer are started (cluster mode, node config in
# $run/redis-cluster/PORT/nodes-PORT.conf) and, unless they rejoin a cluster
# they were part of, `redis-cli --cluster create` forms it. Nodes that answer
# but were not started here are never changed: if the cluster is not ok with
# them, this fails.
up_redis_cluster() {
  local addrs=() a host port unit pid missing=() foreign=() ours=() fresh=0 dir=$run/redis-cluster
  mapfile -t addrs < <(addrs_of redis-cluster)
  [ ${#addrs[@]} -ge 3 ] ||
    die "redis-cluster needs at least three masters; CERBERUS_REDIS_CLUSTER_ADDRS=$REDIS_CLUSTER_ADDRS"
  for a in "${addrs[@]}"; do
    host=$(host_of "$a"); port=$(port_of "$a"); unit=redis-cluster/$port
    if pid=$(our_pid "$unit"); then
      ours+=("$a (pid $pid)")
    elif port_open "$host" "$port"; then
      foreign+=("$a")
    else
      missing+=("$a")
    fi
  done
  if [ ${#missing[@]} -eq 0 ] && cluster_ok_within 3; then
    if [ ${#foreign[@]} -eq 0 ]; then
      log "redis-cluster: reusing the cluster already answering at $REDIS_CLUSTER_ADDRS (started earlier by this script: ${ours[*]})"
    else
      log "redis-cluster: reusing the cluster already answering at $REDIS_CLUSTER_ADDRS"
    fi
    return
  fi
  if [ ${#foreign[@]} -gt 0 ]; then
    # A cluster someone else runs may still be converging.
    if [ ${#missing[@]} -eq 0 ] && cluster_ok_within 10; then
      log "redis-cluster: reusing the cluster already answering at $REDIS_CLUSTER_ADDRS"
      return
    fi
    die "redis-cluster: ${foreign[*]} answer(s) but was not started by this script, and the cluster is not usable: $(trouble redis-cluster)${missing[*]:+ (nothing answers at ${missing[*]})}. Stop what runs there, or set CERBERUS_REDIS_CLUSTER_ADDRS to free loopback ports."
  fi

  apt_install redis-server redis-tools
  command -v redis-cli >/dev/null || die "redis-cli not found (package redis-tools)"
  for a in "${missing[@]}"; do
    host=$(host_of "$a"); port=$(port_of "$a"); unit=redis-cluster/$port
    log "redis-cluster: starting a node at $a"
    launch_redis "$unit" "$host" "$port" --cluster-enabled yes \
      --cluster-config-file "$run/$unit/nodes-$port.conf" --cluster-node-timeout 2000
  done

  # Every node is ours now. Fresh nodes form a new cluster; nodes restarted
  # from their nodes-PORT.conf rejoin the one they were part of. A mix of
  # fresh and old nodes, or old ones that do not get back to ok, are reset.
  for a in "${addrs[@]}"; do
    if node_fresh "$(host_of "$a")" "$(port_of "$a")"; then fresh=$((fresh + 1)); fi
  done
  if [ "$fresh" -lt ${#addrs[@]} ] && { [ "$fresh" -gt 0 ] || ! cluster_ok_within 15; }; then
    log "redis-cluster: our nodes do not form a healthy cluster ($(trouble redis-cluster)); resetting them"
    for a in "${addrs[@]}"; do
      host=$(host_of "$a"); port=$(port_of "$a")
      if ! timeout 10 redis-cli -h "$host" -p "$port" FLUSHALL >/dev/null ||
        ! timeout 10 redis-cli -h "$host" -p "$port" CLUSTER RESET HARD >/dev/null; then
        die "redis-cluster: could not reset the node at $a"
      fi
    done
    fresh=${#addrs[@]}
  fi
  if [ "$fresh" -eq ${#addrs[@]} ]; then
    local nodes=()
    for a in "${addrs[@]}"; do nodes+=("$(host_of "$a"):$(port_of "$a")"); done
    log "redis-cluster: redis-cli --cluster create ${nodes[*]} --cluster-replicas 0"
    mkdir -p "$dir"
    timeout "$wait_secs" redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
      </dev/null >"$dir/create.log" 2>&1 ||
      { tail -n 20 "$dir/create.log" >&2; die "redis-cluster: redis-cli --cluster create failed; see $dir/create.log"; }
  fi
  wait_until "redis-cluster: cluster_state:ok on every node" "$dir/create.log" "" cluster_ok
  log "redis-cluster: up at $REDIS_CLUSTER_ADDRS (logs in $dir)"
}

start_zookeeper() {
  local host=$1 port=$2 dir=$run/zookeeper java
  apt_install zookeeperd
  java=$(command -v java) || die "java not found (zookeeperd should have installed it)"
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<EOF
# Written by scripts/services.sh: standalone, loopback only.
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=$host
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
EOF
  setsid "$java" -Xmx512m -Dzookeeper.log.dir="$dir" -Dzookeeper.root.logger=INFO,CONSOLE \
    -Dzookeeper.admin.enableServer=false \
    -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    </dev/null >"$dir/zookeeper.log" 2>&1 8>&- &
  echo $! >"$dir/zookeeper.pid"
  wait_for zookeeper "$dir/zookeeper.log" $!
}

# A single etcd member (Debian's etcd-server), client and peer URLs on
# loopback only; the peer port is the client port + 1. The package's own
# service is never started (apt_install keeps services from starting).
start_etcd() {
  local host=$1 port=$2 dir=$run/etcd
  apt_install etcd-server
  command -v etcd >/dev/null || die "etcd not found (package etcd-server)"
  mkdir -p "$dir"
  local peer=http://$host:$((port + 1))
  setsid etcd --name cerberus --data-dir "$dir/data" \
    --listen-client-urls "http://$host:$port" --advertise-client-urls "http://$host:$port" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "cerberus=$peer" \
    </dev/null >"$dir/etcd.log" 2>&1 8>&- &
  echo $! >"$dir/etcd.pid"
  wait_for etcd "$dir/etcd.log" $!
}

consul_bin() {
  if command -v consul >/dev/null; then command -v consul; return; fi
  log "consul not on PATH; using scripts/build-consul.sh (cached; a first build takes ~10 min)"
  "$root/scripts/build-consul.sh"
}

start_consul() {
  local host=$1 port=$2 dir=$run/consul bin
  bin=$(consul_bin) || die "could not get a consul binary (scripts/build-consul.sh failed)"
  mkdir -p "$dir/data"
  # -client binds HTTP/DNS/gRPC, -bind binds the server RPC and serf ports:
  # both loopback. Dev mode keeps state in memory. Every test process
  # connects from 127.0.0.1, so the per-client connection limit (200 by
  # default, answered with 429) is raised for parallel test packages.
  setsid "$bin" agent -dev -client "$host" -bind "$host" -http-port "$port" \
    -data-dir "$dir/data" -pid-file "$dir/consul.pid" -log-file "$dir/consul.log" \
    -hcl 'disable_update_check = true' -hcl 'limits { http_max_conns_per_client = 1000 }' -log-level info \
    </dev/null >"$dir/stdout.log" 2>&1 8>&- &
  local pid=$!
  echo $pid >"$dir/consul.pid" # consul rewrites it with the same pid
  wait_for consul "$dir/stdout.log" $pid
}

# A PostgreSQL cluster of Debian's newest installed server (package
# postgresql), in $run/postgres/data, trust authentication on loopback only,
# run as the postgres user (the server refuses to run as root). The
# package's own cluster and service are never touched.
start_postgres() {
  local host=$1 port=$2 dir=$run/postgres bin run_as=()
  apt_install postgresql postgresql-client
  bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
  [ -n "$bin" ] && [ -x "$bin/initdb" ] || die "postgres: no initdb under /usr/lib/postgresql/*/bin"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "postgres: running as root but there is no postgres user to run the server"
    chown postgres "$dir"
    run_as=(runuser -u postgres --)
  fi
  if [ ! -s "$dir/data/PG_VERSION" ]; then
    log "initialising a PostgreSQL cluster in $dir/data"
    "${run_as[@]}" "$bin/initdb" -D "$dir/data" -U "$(postgres_user)" --auth=trust \
      >"$dir/initdb.log" 2>&1 || { tail -n 20 "$dir/initdb.log" >&2; die "initdb failed; see $dir/initdb.log"; }
  fi
  rm -f "$dir/postgres.pid"
  setsid "${run_as[@]}" "$bin/postgres" -D "$dir/data" -c listen_addresses="$host" -p "$port" \
    -c unix_socket_directories="$dir" -c max_connections=300 \
    </dev/null >"$dir/postgres.log" 2>&1 8>&- &
  local pid=$!
  echo $pid >"$dir/postgres.pid"
  wait_for postgres "$dir/postgres.log" $pid
  # The postmaster itself (its command line names the data dir), not runuser.
  head -n 1 "$dir/data/postmaster.pid" >"$dir/postgres.pid"
}

# Creates the DSN's database when it is missing.
postgres_create_db() {
  local addr db
  addr=$(postgres_addr); db=$(postgres_db)
  command -v psql >/dev/null || return 0
  [ "$(PGCONNECT_TIMEOUT=2 timeout 10 psql -X -w -h "$(host_of "$addr")" -p "$(port_of "$addr")" \
    -U "$(postgres_user)" -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'")" = 1 ] && return 0
  PGCONNECT_TIMEOUT=2 timeout 10 psql -X -w -q -h "$(host_of "$addr")" -p "$(port_of "$addr")" \
    -U "$(postgres_user)" -d postgres -c "CREATE DATABASE \"$db\"" >&2 ||
    die "could not create database $db at $addr"
}

start_mysql() {
  local host=$1 port=$2 dir=$run/mysql user
  apt_install mariadb-server mariadb-client
  mkdir -p "$dir/data"
  user=$(id -un)
  if [ "$user" = root ]; then
    # mariadbd refuses to run as root unless told; prefer the mysql user when
    # it can reach the run dir.
    if id mysql >/dev/null 2>&1 && chown -R mysql:mysql "$dir" &&
      runuser -u mysql -- test -w "$dir/data"; then
      user=mysql
    fi
  fi
  if [ ! -d "$dir/data/mysql" ]; then
    log "initialising a MariaDB data dir in $dir/data"
    # normal auth: root@localhost gets an empty password, no unix_socket.
    mariadb-install-db --no-defaults --user="$user" --datadir="$dir/data" \
      --auth-root-authentication-method=normal --skip-test-db \
      >"$dir/install.log" 2>&1 || { tail -n 20 "$dir/install.log" >&2; die "mariadb-install-db failed; see $dir/install.log"; }
  fi
  setsid mariadbd --no-defaults --user="$user" --datadir="$dir/data" \
    --bind-address="$host" --port="$port" --socket="$dir/mysqld.sock" \
    --pid-file="$dir/mysql.pid" --log-error="$dir/mysqld.log" --max-connections=500 \
    </dev/null >/dev/null 2>&1 8>&- &
  local pid=$!
  echo $pid >"$dir/mysql.pid" # mariadbd rewrites it with the same pid
  [ "$user" = "$(id -un)" ] || chown "$user" "$dir/mysql.pid"
  wait_for mysql "$dir/mysqld.log" $pid
}

# The server answers on its port but root over TCP fails: on a stock Debian
# install root@localhost authenticates by unix_socket only. Fix that through
# the socket (we are root), so root with an empty password works over TCP.
# Only a socket whose server reports our port is used ($CERBERUS_MYSQL_SOCKET,
# then the client's default socket).
fix_mysql_root() {
  local client port sock args
  client=$(mysql_client) || return 1
  [ "$(id -u)" = 0 ] || return 1
  port=$(port_of "$(mysql_addr)")
  for sock in "${CERBERUS_MYSQL_SOCKET:-}" default; do
    [ -n "$sock" ] || continue
    args=(-u root)
    [ "$sock" = default ] || args+=(--socket="$sock")
    [ "$(timeout 10 "$client" "${args[@]}" -N -B -e 'SELECT @@port' 2>/dev/null)" = "$port" ] || continue
    log "mysql: root cannot log in over TCP; allowing root with an empty password (via the unix socket)"
    timeout 10 "$client" "${args[@]}" -e "
      ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
      FLUSH PRIVILEGES;" >&2
    return
  done
  return 1
}

mysql_create_db() {
  local addr client db
  addr=$(mysql_addr); db=$(mysql_db)
  [ -n "$db" ] || return 0
  client=$(mysql_client) || return 0
  timeout 10 "$client" --no-defaults --protocol=TCP -h "$(host_of "$addr")" -P "$(port_of "$addr")" \
    -u "$(mysql_user)" -e "CREATE DATABASE IF NOT EXISTS \`$db\`" ||
    die "could not create database $db at $addr"
}

up_local() {
  local svc addr host port pid
  for svc in "$@"; do
    if multi "$svc"; then
      "up_${svc//-/_}"
      continue
    fi
    addr=$(addr_of "$svc"); host=$(host_of "$addr"); port=$(port_of "$addr")
    if port_open "$host" "$port"; then
      if [ "$svc" = postgres ] && ! command -v psql >/dev/null; then
        # The check itself needs the client.
        apt_install postgresql-client
      fi
      if [ "$svc" = mysql ] && ! check mysql; then
        # A MySQL client is needed for the check itself.
        mysql_client >/dev/null || apt_install mariadb-client
        check mysql || { fix_mysql_root && check mysql; } ||
          die "something answers on $addr but root cannot log in over TCP with an empty password (set CERBERUS_MYSQL_SOCKET to its unix socket to let this script fix that as root)"
      fi
      check "$svc" || wait_for "$svc" "the logs of the server on $addr (not started by this script)"
      if pid=$(our_pid "$svc"); then
        log "$svc: reusing the server already answering at $addr (started earlier by this script, pid $pid)"
      else
        log "$svc: reusing the server already answering at $addr"
      fi
    else
      log "$svc: starting at $addr"
      "start_$svc" "$host" "$port"
      log "$svc: up at $addr (logs in $run/$svc)"
    fi
    [ "$svc" != mysql ] || mysql_create_db
    [ "$svc" != postgres ] || postgres_create_db
  done
}

# ---------------------------------------------------------------- docker

docker_mode() {
  case ${CERBERUS_SERVICES_MODE:-} in
    docker) return 0 ;;
    local) return 1 ;;
  esac
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || return 1
  if ! docker compose version >/dev/null 2>&1; then
    log "a Docker engine answers but the compose plugin is missing; using local packages"
    return 1
  fi
}

compose() { docker compose -p "$compose_project" -f "$root/docker-compose.yml" "$@"; }

# The docker-compose.yml services that make up SERVICE. The cluster's
# one-shot redis-cluster-init is run separately (compose run), after its nodes.
compose_names_of() {
  case $1 in
    redis-cluster) echo redis-cluster-1 redis-cluster-2 redis-cluster-3 ;;
    redis-nodes) echo redis-node-1 redis-node-2 redis-node-3 redis-node-4 redis-node-5 ;;
    *) echo "$1" ;;
  esac
}

# Does any address of SERVICE accept connections?
any_port_open() {
  local a
  for a in $(addrs_of "$1"); do
    port_open "$(host_of "$a")" "$(port_of "$a")" && return 0
  done
  return 1
}

up_docker() {
  local svc addr todo=() names=() reused_mysql='' reused_postgres='' why
  for svc in "$@"; do
    addr=$(addr_of "$svc")
    [ "$addr" = "$(default_addr "$svc")" ] ||
      die "docker mode publishes the default ports only; unset the override for $svc ($addr)"
    # shellcheck disable=SC2046 # compose_names_of prints several names
    if multi "$svc" && any_port_open "$svc" && ! compose ps -q $(compose_names_of "$svc") 2>/dev/null | grep -q .; then
      check "$svc" || die "$svc: something not run by docker compose answers at part of $addr, and it is not usable: $(trouble "$svc"). Stop it first."
      log "$svc: reusing the servers already answering at $addr"
    elif ! multi "$svc" && port_open "$(host_of "$addr")" "$(port_of "$addr")" && ! compose ps -q "$svc" 2>/dev/null | grep -q .; then
      log "$svc: reusing the server already answering at $addr"
      [ "$svc" != mysql ] || reused_mysql=1
      [ "$svc" != postgres ] || reused_postgres=1
    else
      todo+=("$svc")
      read -ra names <<<"${names[*]} $(compose_names_of "$svc")"
    fi
  done
  if [ ${#todo[@]} -gt 0 ]; then
    log "docker compose up ${names[*]}"
    compose up -d --wait --wait-timeout "$((wait_secs * 3))" "${names[@]}" >&2
  fi
  for svc in "${todo[@]}"; do
    [ "$svc" = redis-cluster ] || continue
    # Forms the cluster unless it already is; waits for cluster_state:ok.
    log "docker compose run redis-cluster-init"
    compose run --rm --no-deps redis-cluster-init >&2 ||
      die "redis-cluster-init failed; see: docker compose -p $compose_project logs redis-cluster-1 redis-cluster-2 redis-cluster-3"
  done
  for svc in "$@"; do
    # MySQL was checked by its compose healthcheck (a host mariadb client may
    # not speak MySQL 8.4's default auth), and PostgreSQL by its own when the
    # host has no psql; the others are checked again here.
    if [ "$svc" = mysql ] || { [ "$svc" = postgres ] && ! command -v psql >/dev/null; }; then
      addr=$(addr_of "$svc")
      port_open "$(host_of "$addr")" "$(port_of "$addr")" && continue
    fi
    check "$svc" && continue
    why=
    ! multi "$svc" || why=" ($(trouble "$svc"))"
    die "$svc does not answer at $(addr_of "$svc") after docker compose up$why; see: docker compose -p $compose_project logs $(compose_names_of "$svc")"
  done
  [ -z "$reused_mysql" ] || mysql_create_db
  [ -z "$reused_postgres" ] || postgres_create_db
}

default_addr() {
  case $1 in
    redis) echo 127.0.0.1:6379 ;;
    zookeeper) echo 127.0.0.1:2181 ;;
    consul) echo 127.0.0.1:8500 ;;
    mysql) echo 127.0.0.1:3306 ;;
    etcd) echo 127.0.0.1:2379 ;;
    postgres) echo 127.0.0.1:5432 ;;
    redis-cluster) echo "$default_cluster_addrs" ;;
    redis-nodes) echo "$default_redlock_addrs" ;;
  esac
}

# ---------------------------------------------------------------- commands

cmd_env() {
  echo "export CERBERUS_REDIS_ADDR=$REDIS_ADDR"
  echo "export CERBERUS_ZK_ADDR=$ZK_ADDR"
  echo "export CERBERUS_CONSUL_ADDR=$CONSUL_ADDR"
  echo "export CERBERUS_MYSQL_DSN='$MYSQL_DSN'"
  echo "export CERBERUS_ETCD_ADDR=$ETCD_ADDR"
  echo "export CERBERUS_POSTGRES_DSN='$POSTGRES_DSN'"
  echo "export CERBERUS_REDIS_CLUSTER_ADDRS=$REDIS_CLUSTER_ADDRS"
  echo "export CERBERUS_REDLOCK_ADDRS=$REDLOCK_ADDRS"
  local b
  if b=$(browser_path); then echo "export CERBERUS_CHROMIUM=$b"; fi
}

# browser_path prints the chromium the status page test drives, if any.
browser_path() {
  if [ -n "${CERBERUS_CHROMIUM:-}" ] && [ -x "$CERBERUS_CHROMIUM" ]; then
    echo "$CERBERUS_CHROMIUM"
    return
  fi
  command -v chromium || command -v chromium-browser
}

# ensure_browser installs Debian's chromium when none is found.
ensure_browser() {
  if browser_path >/dev/null; then return; fi
  apt_install chromium
  browser_path >/dev/null || die "chromium installed but not found on PATH"
}

# The units of SERVICE: itself, or one per address for redis-cluster and
# redis-nodes (redis-cluster/7001, ...).
units_of() {
  local a
  if multi "$1"; then
    for a in $(addrs_of "$1"); do echo "$1/$(port_of "$a")"; done
  else
    echo "$1"
  fi
}

cmd_status() {
  local svc addr state rc=0 why unit pid pids
  for svc in "$@"; do
    addr=$(addr_of "$svc")
    why=
    if multi "$svc"; then
      why=$(trouble "$svc")
      if [ -z "$why" ]; then state=up; else state=down; rc=1; fi
    elif check "$svc"; then state=up; else state=down; rc=1; fi
    pids=
    for unit in $(units_of "$svc"); do
      if pid=$(our_pid "$unit"); then pids+=${pids:+ }$pid; fi
    done
    printf '%-13s %-5s %s%s%s\n' "$svc" $state "$addr" \
      "${pids:+ (started by services.sh, pid $pids)}" "${why:+ ($why)}"
  done
  return $rc
}

# One up/down at a time per run dir. The servers are started with fd 8
# closed, so they do not hold the lock.
lock_run() {
  mkdir -p "$run"
  exec 8>"$run/.lock"
  if ! flock -n 8; then
    log "another services.sh up/down is running on $run; waiting for it"
    flock -w 1800 8 || die "gave up waiting for the lock $run/.lock"
  fi
}

cmd_up() {
  local t0=$SECONDS
  lock_run
  if docker_mode; then
    log "Docker engine found: using docker-compose.yml"
    up_docker "$@"
  else
    log "no Docker engine: using local packages (run dir $run)"
    up_local "$@"
  fi
  ensure_browser
  log "all up in $((SECONDS - t0))s"
  cmd_env
}

stop_pid() {
  local svc=$1 pid=$2 i sig=TERM
  # SIGTERM asks PostgreSQL for a smart shutdown, which waits for every
  # client to leave; SIGINT is its fast shutdown.
  [ "$svc" != postgres ] || sig=INT
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  log "$svc (pid $pid) did not stop in 30s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
  local svc pid
  lock_run
  if docker_mode; then
    if [ $# -eq ${#all_services[@]} ]; then compose down -v >&2
    else
      local names=()
      for svc in "$@"; do
        read -ra names <<<"${names[*]} $(compose_names_of "$svc")"
        [ "$svc" != redis-cluster ] || names+=(redis-cluster-init)
      done
      compose rm -f -s -v "${names[@]}" >&2
    fi
    return
  fi
  local unit
  for svc in "$@"; do
    for unit in $(units_of "$svc"); do
      if pid=$(our_pid "$unit"); then
        log "$unit: stopping pid $pid"
        stop_pid "$unit" "$pid"
        rm -f "$(pidfile_of "$unit")"
        # The next up forms a new cluster rather than rejoining this one.
        [ "$svc" != redis-cluster ] || rm -f "$run/$unit/nodes-${unit#*/}.conf"
      else
        log "$unit: not started by this script; leaving it alone"
      fi
    done
  done
}

main() {
  local cmd=${1:-}
  [ $# -gt 0 ] && shift
  local services=("$@")
  [ ${#services[@]} -gt 0 ] || services=("${all_services[@]}")
  local s a
  for s in "${services[@]}"; do
    addr_of "$s" >/dev/null
    for a in $(addrs_of "$s"); do
      a=$(host_of "$a")
    done
  done
  case $cmd in
    up) cmd_up "${services[@]}" ;;
    down) cmd_down "${services[@]}" ;;
    status) cmd_status "${services[@]}" ;;
    env) cmd_env ;;
    *) sed -n '2,/^# shellcheck/{/^# shellcheck/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
}

main "$@"
