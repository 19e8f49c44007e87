#!/usr/bin/env bash
# Redis Cluster on one machine, in one command: three primaries, three replicas and two
# Leasehold instances in Cluster mode, all on loopback, with Debian's redis-server and
# redis-cli (`redis-cli --cluster create` forms the cluster). Prints the URLs and which node
# serves which slots, and stops everything on Ctrl-C (or SIGTERM).
#
# Usage: deploy/local/cluster.sh [--ready-file PATH]   (LEASEHOLD_ADMIN_TOKEN: the admin token to use)
#   Ports: Redis 7390-7395, or -7398 with two replicas each (cluster bus +10000), Leasehold 8191
#   and 8192 (override with LEASEHOLD_CLUSTER_BASE=<first Redis port>; the others follow
#   it). --ready-file: write the
#   URLs there once everything answers (for scripts and tests). LEASEHOLD_BIN: the binary to
#   run (default: a release build of this checkout). LEASEHOLD_CLUSTER_REPLICAS: replicas per
#   primary (default 1; with 2, a failover leaves the shard a replica to acknowledge grants).
# Try a failover: take a lock, find the primary serving its slot (`redis-cli -p 7390 cluster
#   keyslot demo`, then the table printed below), kill -9 its pid and watch its replica take
#   over (about 3 s) while the lock stays held and its heartbeats and new locks on that shard
#   are served (marked `degraded: no_replica` until a replica is back). Bring the killed node
#   back with `kill -USR1 <this script's pid>`: the script starts every node that is not
#   running again (it rejoins as the new primary's replica), as its own child, so Ctrl-C
#   still stops it. The admin token (for force release on the dashboard) is printed below.
set -euo pipefail
cd "$(dirname "$0")/../.."
ready_file=""
if [ "${1:-}" = "--ready-file" ]; then ready_file=$2; fi
base=${LEASEHOLD_CLUSTER_BASE:-7390}
per_primary=${LEASEHOLD_CLUSTER_REPLICAS:-1}
count=$((3 * (1 + per_primary)))
last=$((count - 1))
http_base=$((base + 801))
.ci/ensure-packages redis-server redis-tools
bin=${LEASEHOLD_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -q
  bin=target/release/leasehold
fi
dir=$(mktemp -d -t leasehold-cluster.XXXXXX)
pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  echo "stopped"
}
trap stop INT TERM EXIT

wait_for() { # what, tries(50 ms each), command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.05; done
  echo "timed out waiting for $what" >&2; exit 1
}
# Runs command... while process pid lives; once it died, shows its log and stops the script
# (rather than waiting out the timeout).
alive() { # pid, log, command...
  local pid=$1 log=$2; shift 2
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "process $pid exited; its log ($log):" >&2; cat "$log" >&2; exit 1
  fi
  "$@"
}
answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }
state_ok() { [[ $(redis-cli -p "$1" cluster info 2>/dev/null) == *cluster_state:ok* ]]; }
# A primary, or a replica whose link to its primary is up.
linked() {
  local info; info=$(redis-cli -p "$1" info replication 2>/dev/null)
  [[ $info == *role:master* || $info == *master_link_status:up* ]]
}

admin_token=${LEASEHOLD_ADMIN_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
# Starts the node on port $1 (with its config, so a restarted node keeps its identity in
# nodes.conf and its data in its AOF), as pid slot $2.
start_node() {
  redis-server "$dir/$1/redis.conf" >> "$dir/$1/log" 2>&1 &
  pids[$2]=$!
  wait_for "redis-server on $1" 200 alive "$!" "$dir/$1/log" answers "$1"
}
# SIGUSR1: start every node that is not running (killed to try a failover) again.
restart_dead() {
  for i in $(seq 0 "$last"); do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      start_node "$((base + i))" "$i"
      echo "started 127.0.0.1:$((base + i)) again (pid ${pids[$i]})"
    fi
  done
}
nodes=()
for i in $(seq 0 "$last"); do
  port=$((base + i)); mkdir -p "$dir/$port"
  # appendonly + appendfsync always, as in sentinel.sh: a node writes every change to its
  # AOF before answering, so one restarted by hand keeps every lock it granted, and
  # Leasehold's startup check says so instead of warning. cluster-node-timeout 2000: a
  # primary is failed over about 3 s after it stops answering, slow enough that a busy
  # moment on a laptop does not trigger one.
  {
    echo "port $port"; echo "bind 127.0.0.1"; echo "dir $dir/$port"
    echo "cluster-enabled yes"; echo "cluster-config-file nodes.conf"
    echo "cluster-node-timeout 2000"
    echo "appendonly yes"; echo "appendfsync always"; echo 'save ""'
    echo "repl-diskless-sync-delay 0"
  } > "$dir/$port/redis.conf"
  start_node "$port" "$i"
  nodes+=("127.0.0.1:$port")
done
# redis-cli picks which node replicates which (not by port): read it back below.
if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$per_primary" --cluster-yes \
    > "$dir/create.log" 2>&1; then
  echo "redis-cli --cluster create failed:" >&2; cat "$dir/create.log" >&2; exit 1
fi
for i in $(seq 0 "$last"); do
  wait_for "cluster_state:ok on $((base + i))" 400 state_ok "$((base + i))"
  wait_for "$((base + i)) to be a primary or a linked replica" 400 linked "$((base + i))"
done
seeds=$(IFS=,; echo "${nodes[*]}")
for i in 0 1; do
  port=$((http_base + i))
  LEASEHOLD_ALLOW_ANONYMOUS=true LEASEHOLD_ADMIN_TOKEN=$admin_token \
    "$bin" serve --listen "127.0.0.1:$port" \
    --redis-cluster "$seeds" \
    --data-dir "$dir/leasehold-$i" > "$dir/leasehold-$i.log" 2>&1 &
  pids+=($!)
  wait_for "Leasehold on $port" 400 alive "$!" "$dir/leasehold-$i.log" \
    curl -fs -o /dev/null "http://127.0.0.1:$port/readyz"
done
# "addr primary slots..." or "addr replica of addr", from the cluster's own table.
table=$(redis-cli -p "$base" cluster nodes | awk '
  { a = $2; sub(/@.*/, "", a); addr[$1] = a; line[NR] = $0 }
  END {
    for (i = 1; i <= NR; i++) {
      n = split(line[i], f, " "); a = f[2]; sub(/@.*/, "", a)
      if (f[3] ~ /master/) { s = ""; for (j = 9; j <= n; j++) s = s " " f[j]; print a, "primary, slots" s }
      else print a, "replica of", addr[f[4]]
    }
  }' | sort)
urls="http://127.0.0.1:$http_base http://127.0.0.1:$((http_base + 1))"
echo "Leasehold (Cluster mode):"
echo "  $urls"
echo "  dashboard: http://127.0.0.1:$http_base/   Redis page: http://127.0.0.1:$http_base/redis"
echo "  admin token (dashboard sign-in, force release): $admin_token"
echo "Redis Cluster (bus ports +10000):"
while read -r addr rest; do
  echo "  $addr (pid ${pids[$((${addr##*:} - base))]}) $rest"
done <<< "$table"
cat <<EOF2
Try:  curl -X POST http://127.0.0.1:$http_base/v1/locks/demo/leases
      redis-cli -p $base cluster keyslot demo   # then kill -9 the pid of the primary serving it
      kill -USR1 $$                             # then bring the killed node back
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
