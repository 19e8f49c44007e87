#!/usr/bin/env bash
# What Redis Cluster mode costs Redis per lock cycle against one standalone Redis, and how the
# load spreads over the shards, in one run on this machine: a Redis Cluster of 3 primaries and
# no replicas (so that no replica acknowledgement, WAIT, weighs on either side: every Leasehold
# here runs `--min-replica-acks 0` and has no replica to wait for), one standalone
# redis-server and, for the diagnosis, a cluster of 1 primary holding every slot; all on
# loopback with Debian's redis-server and the same persistence settings (appendonly no,
# save ""). One Leasehold instance at a time on each (`--redis-cluster` / `--redis-url`,
# `--worker-threads 1` as in BENCHMARKS.md: Redis shares these cores), started on emptied
# Redis for each loop. The workload: the uncontended acquire + release loop at 16
# connections spread over 10,000 names (`u-0` .. `u-9999`, each connection cycling through
# its share), for the given seconds, against the standalone Redis and the 3-primary cluster,
# and two diagnostic loops: the 1-primary cluster (cluster mode with one Redis process taking
# every call) and the standalone Redis at 5 connections (about what each of the 3 primaries
# is asked at once). All four in rounds (2 by default), each in the reverse order of the one
# before (ABBA), so that a drift of this shared machine weighs on every mode alike; a figure
# is the rounds' together.
#
# Around each loop it reads every Redis's INFO (cpu, stats, commandstats, keyspace), its main
# thread's wake-ups (voluntary context switches, /proc), the Leasehold process's CPU time and
# the whole machine's; a loop during which other processes took more than 0.3 of a core is run
# again (at most 3 times; the least disturbed counts). It reports per cycle: Redis CPU (summed
# over the primaries), FCALL time and every command's calls and time (INFO commandstats),
# wake-ups, bytes to and from Redis, Leasehold CPU; cluster / standalone; how the 10,000 names
# spread over the primaries (their slots by CRC16, checked against CLUSTER KEYSLOT); keys, CPU
# and cycles per primary; and what that means on paper for 100k and 1M cycles/s. Writes
# benches/cluster.md (BENCHMARKS.md takes it in on the next benches/run.sh report) and
# bench-out/cluster.jsonl.
#
# Usage: benches/cluster.sh [seconds-per-loop] [rounds]   (default 20 and 2; about 3 minutes
#   after the build)
#   CARGO_TARGET_DIR is honoured. Stops everything it started on exit, Ctrl-C or error.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
rounds=${2:-2}
connections=16
low_connections=5
names=10000
out="bench-out"
mkdir -p "$out"
target=${CARGO_TARGET_DIR:-target}
.ci/ensure-packages redis-server redis-tools curl
nice -n 10 cargo build --release --locked -q
# The scenarios' binary of this checkout, as Cargo names it (not the newest file in deps/,
# which another checkout sharing the target directory may have written).
bench=$(nice -n 10 cargo bench --locked --bench scenarios --no-run --message-format=json -q \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "scenarios" and m.get("executable"):
        print(m["executable"])')
[ -x "$bench" ] || { echo "no scenarios binary" >&2; exit 1; }

work=$(mktemp -d -t leasehold-cluster-bench.XXXXXX)
pids=()
leasehold=""
cleanup() {
  trap - EXIT INT TERM
  for pid in $leasehold "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in $leasehold "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The Python half (ports, snapshots of the counters, slots, and the report): benches/cluster_tool.py,
# which writes benches/cluster.md with benches/cluster_md.py.
py() { python3 "$(dirname "$0")/cluster_tool.py" "$@"; }

read -r -a ports <<< "$(py free 6)"
cports=("${ports[@]:0:3}")   # the 3-primary cluster
c1port=${ports[3]}           # the 1-primary cluster
sport=${ports[4]}            # standalone
http=${ports[5]}             # Leasehold, one at a time

wait_for() { # what, tries (50 ms each), command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.05; done
  echo "timed out waiting for $what" >&2; exit 1
}
answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }
state_ok() { [[ $(redis-cli -p "$1" cluster info 2>/dev/null) == *cluster_state:ok* ]]; }
ready() { curl -fs -o /dev/null "http://127.0.0.1:$http/readyz"; }

start_redis() { # port, cluster (yes/no)
  local port=$1
  mkdir -p "$work/$port"
  {
    echo "port $port"; echo "bind 127.0.0.1"; echo "dir $work/$port"
    echo "appendonly no"; echo 'save ""'; echo "repl-diskless-sync-delay 0"
    if [ "$2" = yes ]; then
      echo "cluster-enabled yes"; echo "cluster-config-file nodes.conf"
      echo "cluster-announce-ip 127.0.0.1"
    fi
  } > "$work/$port/redis.conf"
  redis-server "$work/$port/redis.conf" > "$work/$port/log" 2>&1 &
  pids+=($!)
}
for port in "${cports[@]}" "$c1port"; do start_redis "$port" yes; done
start_redis "$sport" no
for port in "${cports[@]}" "$c1port" "$sport"; do wait_for "redis-server on $port" 200 answers "$port"; done
nodes=("${cports[@]/#/127.0.0.1:}")
seeds=$(IFS=,; echo "${nodes[*]}")
if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes > "$work/create.log" 2>&1; then
  echo "redis-cli --cluster create failed:" >&2; cat "$work/create.log" >&2; exit 1
fi
# redis-cli --cluster create wants 3 primaries at least: the 1-primary cluster by hand.
redis-cli -p "$c1port" cluster addslotsrange 0 16383 > /dev/null
for port in "${cports[@]}" "$c1port"; do wait_for "cluster_state:ok on $port" 400 state_ok "$port"; done

# One loop: empties the Redis, starts a Leasehold on it, runs the loop between two snapshots,
# stops the Leasehold; again when other processes disturbed it (see DISTURBED), at most 3
# times. Adds "mode=label of the attempt that counts" to `chosen`.
run_loop() { # round, mode, connections, redis flag, redis value, redis ports...
  local round=$1 mode=$2 conns=$3 flag=$4 value=$5; shift 5
  local best="" best_other="" attempt other
  for attempt in 1 2 3; do
    local label="$mode-r$round-$attempt"
    for port in "$@"; do redis-cli -p "$port" flushall > /dev/null; done
    RUST_LOG=warn LEASEHOLD_ALLOW_ANONYMOUS=true "$target/release/leasehold" serve \
      --listen "127.0.0.1:$http" "$flag" "$value" --data-dir "$work/leasehold-$label" \
      --min-replica-acks 0 --worker-threads 1 > "$out/cluster-leasehold-$mode.log" 2>&1 &
    leasehold=$!
    wait_for "Leasehold ($mode)" 400 ready
    echo "== round $round, $mode: uncontended, $conns connections over $names names, ${secs} s (attempt $attempt)" >&2
    py snap "$label-before" "$leasehold" "$@" >> "$work/snaps.jsonl"
    "$bench" --url "http://127.0.0.1:$http" --seconds "$secs" \
      uncontended --connections "$conns" --names "$names" > "$work/loop-$label.json"
    py snap "$label-after" "$leasehold" "$@" >> "$work/snaps.jsonl"
    if [ "$mode" = cluster ]; then
      # The cluster's shape, and its events backlog, while the last Leasehold still runs.
      sample=(u-0 u-1 u-42 u-4711 u-9999 "{leasehold/}:events:recent" "{leasehold/}:names")
      checked=$(py keyslots "${cports[0]}" "${sample[@]}")
      py topology "${cports[0]}" "$checked" > "$work/topology.json"
    fi
    kill "$leasehold"; wait "$leasehold" 2>/dev/null || true; leasehold=""
    if other=$(py other "$work" "$label"); then best=$label; break; fi
    echo "   disturbed: other processes took $other cores" >&2
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$other" "$best_other"; then
      best=$label; best_other=$other
    fi
  done
  chosen+=("$mode=$best")
}
mode_loop() { # round, mode
  case $2 in
    standalone) run_loop "$1" standalone "$connections" --redis-url "redis://127.0.0.1:$sport" "$sport" ;;
    cluster) run_loop "$1" cluster "$connections" --redis-cluster "$seeds" "${cports[@]}" ;;
    cluster1) run_loop "$1" cluster1 "$connections" --redis-cluster "127.0.0.1:$c1port" "$c1port" ;;
    standalone_low) run_loop "$1" standalone_low "$low_connections" --redis-url "redis://127.0.0.1:$sport" "$sport" ;;
  esac
}
# Each round in the reverse order of the one before (ABBA), so that a drift of the machine
# (other work, its host) weighs on every mode alike.
modes=(standalone cluster cluster1 standalone_low)
chosen=()
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order=("${modes[@]}"); else order=(); for m in "${modes[@]}"; do order=("$m" "${order[@]}"); done; fi
  for mode in "${order[@]}"; do mode_loop "$round" "$mode"; done
done

py report "$work" "$out/cluster.jsonl" benches/cluster.md "$secs" "$(IFS=,; echo "${chosen[*]}")"
cat benches/cluster.md
