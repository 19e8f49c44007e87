#!/usr/bin/env bash
# Failover to the next grant, per name: after `kill -9` of the Redis master (Sentinel mode)
# or of one Cluster primary, how long until each name it served is granted again, with one
# replica and with two (per primary), Leasehold at its defaults (`--min-replica-acks auto`).
# Each topology is deploy/local/sentinel.sh or deploy/local/cluster.sh (on loopback, Debian's
# redis-server; Sentinel's down-after 2000 ms, cluster-node-timeout 2000 ms), a release build;
# each round (benches/failover_probe.py) has 20 clients take and release 20 names of the
# victim over and over, kills it, and records per name the time from the kill to its next
# grant, and when the replica was promoted; then the script starts the killed node again (it
# rejoins as a replica) before the next round. Writes benches/failover.md (BENCHMARKS.md takes
# it in on the next benches/run.sh report) and bench-out/failover.jsonl.
#
# Usage: benches/failover.sh [rounds]   (default 3; about 5 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=bench-out
mkdir -p "$out"
.ci/ensure-packages redis-server redis-tools curl
nice -n 10 cargo build --release --locked -q
: > "$out/failover.jsonl"
ready=$(mktemp)
script_pid=""
cleanup() {
  [ -n "$script_pid" ] && kill "$script_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -f "$ready"
}
trap cleanup EXIT INT TERM

# Waits until every node of the topology answers and is a primary or a linked replica.
settled() { # first port, count
  for port in $(seq "$1" $(($1 + $2 - 1))); do
    info=$(redis-cli -p "$port" info replication 2>/dev/null) || return 1
    [[ $info == *role:master* || $info == *master_link_status:up* ]] || return 1
  done
}

run() { # mode, replicas, base port
  local mode=$1 replicas=$2 base=$3 nodes
  : > "$ready"
  if [ "$mode" = sentinel ]; then
    nodes=$((1 + replicas))
    LEASEHOLD_HA_BASE=$base LEASEHOLD_HA_REPLICAS=$replicas LEASEHOLD_BIN=target/release/leasehold \
      deploy/local/sentinel.sh --ready-file "$ready" > "$out/failover-$mode-$replicas.log" 2>&1 &
  else
    nodes=$((3 * (1 + replicas)))
    LEASEHOLD_CLUSTER_BASE=$base LEASEHOLD_CLUSTER_REPLICAS=$replicas \
      LEASEHOLD_BIN=target/release/leasehold \
      deploy/local/cluster.sh --ready-file "$ready" > "$out/failover-$mode-$replicas.log" 2>&1 &
  fi
  script_pid=$!
  for _ in $(seq 1200); do [ -s "$ready" ] && break; sleep 0.1; done
  [ -s "$ready" ] || { echo "$mode ($replicas) did not come up" >&2; exit 1; }
  url=$(cut -d' ' -f1 "$ready")
  for round in $(seq "$rounds"); do
    echo "== $mode, $replicas replica(s) per primary, round $round" >&2
    python3 benches/failover_probe.py --url "$url" --mode "$mode" --base "$base" \
      --sentinel $((base + 20000)) --replicas "$replicas" --round "$round" \
      | tee -a "$out/failover.jsonl" >&2
    # The killed node back (as a replica) and every node linked before the next round; then
    # a few seconds for the Sentinels or the cluster to see it so.
    kill -USR1 "$script_pid"
    for _ in $(seq 600); do settled "$base" "$nodes" && break; sleep 0.1; done
    sleep 5
  done
  kill "$script_pid"
  wait "$script_pid" 2>/dev/null || true
  script_pid=""
}

run sentinel 1 7480
run sentinel 2 7480
run cluster 1 7490
run cluster 2 7490

python3 - "$out/failover.jsonl" "$rounds" <<'PY' > benches/failover.md
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("## Failover to the next grant (benches/failover.sh)\n")
print(f"One run of `benches/failover.sh {sys.argv[2]}`: `kill -9` of the Redis master (Sentinel mode: "
      "deploy/local/sentinel.sh, `down-after-milliseconds` 2000) or of one Cluster primary "
      "(deploy/local/cluster.sh: 3 primaries, `cluster-node-timeout` 2000), with one and with two "
      "replicas per primary, Leasehold at its defaults (`--min-replica-acks auto`, release build); "
      "20 clients take and release 20 names the victim served, each name's next grant timed from "
      "the kill. Figures are over every name of every round.\n")
print("| mode | replicas per primary | rounds | promotion (median) | next grant per name: median | p90 | max | every name granted again | first grants marked | refusals meanwhile |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in ("sentinel", "cluster"):
    for replicas in (1, 2):
        rs = [r for r in rows if r["mode"] == mode and r["replicas"] == replicas]
        if not rs:
            continue
        grants = sorted(g for r in rs for g in r["next_grant_ms"] if g is not None)
        missing = sum(1 for r in rs for g in r["next_grant_ms"] if g is None)
        promoted = [r["promoted_ms"] for r in rs if r["promoted_ms"] is not None]
        marks = sorted({m for r in rs for m in r["first_degraded"]}) or ["none"]
        refusals = {}
        for r in rs:
            for k, n in r["refusals"].items():
                refusals[k] = refusals.get(k, 0) + n
        p90 = grants[int(0.9 * (len(grants) - 1))] if grants else 0
        print(f"| {mode} | {replicas} | {len(rs)} | {statistics.median(promoted):,.0f} ms | "
              f"{statistics.median(grants):,.0f} ms | {p90:,} ms | {max(grants):,} ms | "
              f"{'yes' if not missing else f'no: {missing} names never'} | {', '.join(marks)} | "
              f"{', '.join(f'{k.strip()} x{n}' for k, n in sorted(refusals.items()))} |")
PY
cat benches/failover.md
