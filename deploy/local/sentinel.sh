#!/usr/bin/env bash
# High availability on one machine, in one command: a Redis master, two replicas, three
# Sentinels and two Leasehold instances, all on loopback, with Debian's redis-server
# (`redis-server sentinel.conf --sentinel` needs no other package). Prints the URLs and the
# admin token, and stops everything on Ctrl-C (or SIGTERM).
#
# Usage: deploy/local/sentinel.sh [--ready-file PATH]   (LEASEHOLD_ADMIN_TOKEN: the admin token to use)
#   Ports: Redis 7380-7382, Sentinels 27380-27382, Leasehold 8181 and 8182 (override with
#   LEASEHOLD_HA_BASE=<redis port>; the others follow it). --ready-file: write the URLs
#   there once everything answers (for scripts and tests). LEASEHOLD_HA_REPLICAS: how many
#   replicas (default 2; with 1, a failover leaves the new master without one, and grants
#   there stand on it alone, marked `degraded: no_replica`, until the old one is back).
# Try a failover: kill the master's redis-server (its pid is printed), watch
#   http://127.0.0.1:8181/redis follow it. Bring the killed node back with
#   `kill -USR1 <this script's pid>`: the script starts every data node that is not running
#   again, as a replica of the current master and as its own child (Ctrl-C still stops it).
set -euo pipefail
cd "$(dirname "$0")/../.."
ready_file=""
if [ "${1:-}" = "--ready-file" ]; then ready_file=$2; fi
base=${LEASEHOLD_HA_BASE:-7380}
replicas=${LEASEHOLD_HA_REPLICAS:-2}
sentinel_base=$((base + 20000))
http_base=$((base + 801))
.ci/ensure-packages redis-server redis-tools
bin=${LEASEHOLD_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -q
  bin=target/release/leasehold
fi
dir=$(mktemp -d -t leasehold-ha.XXXXXX)
pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  echo "stopped"
}
trap stop INT TERM EXIT

answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }
wait_for() { # what, tries(50 ms each), command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.05; done
  echo "timed out waiting for $what" >&2; exit 1
}

admin_token=${LEASEHOLD_ADMIN_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
# Starts the data node on port $1 as pid slot $2 (extra arguments go to redis-server).
start_node() {
  local port=$1 slot=$2; shift 2
  redis-server "$dir/$port/redis.conf" "$@" >> "$dir/$port/log" 2>&1 &
  pids[$slot]=$!
  wait_for "redis-server on $port" 200 answers "$port"
}
# SIGUSR1: every data node that is not running (killed to try a failover) starts again as a
# replica of the master the Sentinels name now.
restart_dead() {
  local master
  master=$(redis-cli -p "$sentinel_base" sentinel get-master-addr-by-name leasehold | sed -n 2p)
  for i in $(seq 0 "$replicas"); do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      start_node "$((base + i))" "$i" --replicaof 127.0.0.1 "$master"
      echo "started 127.0.0.1:$((base + i)) again (pid ${pids[$i]}), a replica of $master"
    fi
  done
}
for i in $(seq 0 "$replicas"); do
  port=$((base + i)); mkdir -p "$dir/$port"
  {
    echo "port $port"; echo "bind 127.0.0.1"; echo "dir $dir/$port"
    echo "appendonly yes"; echo "appendfsync always"; echo 'save ""'
    echo "repl-diskless-sync-delay 0"
    [ "$i" != 0 ] && echo "replicaof 127.0.0.1 $base"
    true
  } > "$dir/$port/redis.conf"
  start_node "$port" "$i"
done
for i in $(seq 1 "$replicas"); do
  wait_for "replica $((base + i)) to link" 300 \
    sh -c "redis-cli -p $((base + i)) info replication | grep -q master_link_status:up"
done
for i in 0 1 2; do
  port=$((sentinel_base + i)); mkdir -p "$dir/$port"
  cat > "$dir/$port/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
dir $dir/$port
sentinel monitor leasehold 127.0.0.1 $base 2
sentinel down-after-milliseconds leasehold 2000
sentinel failover-timeout leasehold 6000
sentinel parallel-syncs leasehold 1
CONF
  redis-server "$dir/$port/sentinel.conf" --sentinel > "$dir/$port/log" 2>&1 &
  pids+=($!)
  wait_for "Sentinel on $port" 200 answers "$port"
done
sentinels="127.0.0.1:$sentinel_base,127.0.0.1:$((sentinel_base + 1)),127.0.0.1:$((sentinel_base + 2))"
for i in 0 1; do
  port=$((http_base + i))
  LEASEHOLD_ALLOW_ANONYMOUS=true LEASEHOLD_ADMIN_TOKEN=$admin_token \
    "$bin" serve --listen "127.0.0.1:$port" \
    --redis-sentinel "$sentinels" --redis-master-name leasehold \
    --data-dir "$dir/leasehold-$i" > "$dir/leasehold-$i.log" 2>&1 &
  pids+=($!)
  wait_for "Leasehold on $port" 400 curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz"
done
urls="http://127.0.0.1:$http_base http://127.0.0.1:$((http_base + 1))"
cat <<EOF2
Leasehold (Sentinel mode, grants wait for a replica):
  $urls
  dashboard: http://127.0.0.1:$http_base/   Redis page: http://127.0.0.1:$http_base/redis
  admin token (dashboard sign-in, force release): $admin_token
Redis master 127.0.0.1:$base (pid ${pids[0]}), replicas on the $replicas ports after it;
Sentinels $sentinels (master name "leasehold").
Try:  curl -X POST http://127.0.0.1:$http_base/v1/locks/demo/leases
      kill -9 ${pids[0]}   # the master: watch /redis follow the failover
      kill -USR1 $$        # then bring the killed node back, as a replica
Logs and data: $dir.  Ctrl-C stops everything.
EOF2
[ -n "$ready_file" ] && echo "$urls" > "$ready_file"
trap restart_dead USR1
# `wait` returns early when a trapped signal arrives: wait again until every child is gone.
while true; do
  wait && break
  any=""
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && any=1; done
  [ -n "$any" ] || break
done
