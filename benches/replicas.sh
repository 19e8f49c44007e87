#!/usr/bin/env bash
# What replica acknowledgements cost, and how long a Sentinel failover leaves callers without
# a lock service, in one run on this machine: a master with two replicas and three Sentinels
# on loopback (deploy/local/sentinel.sh), two more Leasehold instances on it, one with
# --min-replica-acks 0 and one with 1; the uncontended loop at 16 connections against each
# (acquire p50/p99, cycles/s); then 5 failovers (kill -9 of the master), each timed from the
# kill to the first 201 of an acquire loop. Writes benches/replicas.md (BENCHMARKS.md takes
# it in on the next benches/run.sh report) and bench-out/replicas.jsonl.
#
# Usage: benches/replicas.sh [seconds-per-loop]   (default 10; ~3 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
out=bench-out
mkdir -p "$out"
.ci/ensure-packages redis-server redis-tools curl
nice -n 10 cargo build --release --locked -q
nice -n 10 cargo bench --locked --bench scenarios --no-run -q 2>/dev/null
bench=$(ls -t target/release/deps/scenarios-* | grep -v '\.d$' | head -1)
base=${LEASEHOLD_HA_BASE:-7480}
sentinel_base=$((base + 20000))
ready=$(mktemp)
LEASEHOLD_HA_BASE=$base LEASEHOLD_BIN=target/release/leasehold deploy/local/sentinel.sh --ready-file "$ready" > "$out/replicas-topology.log" 2>&1 &
topology=$!
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  kill "$topology" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -f "$ready"
}
trap cleanup EXIT INT TERM
for _ in $(seq 600); do [ -s "$ready" ] && break; sleep 0.1; done
[ -s "$ready" ] || { echo "the topology did not come up; see $out/replicas-topology.log" >&2; exit 1; }
sentinels="127.0.0.1:$sentinel_base,127.0.0.1:$((sentinel_base + 1)),127.0.0.1:$((sentinel_base + 2))"
data=$(mktemp -d)
declare -A url
for acks in 0 1; do
  port=$((base + 900 + acks))
  target/release/leasehold serve --listen "127.0.0.1:$port" --redis-sentinel "$sentinels" \
    --redis-master-name leasehold --min-replica-acks "$acks" --data-dir "$data/$acks" \
    > "$out/replicas-leasehold-$acks.log" 2>&1 &
  pids+=($!)
  url[$acks]="http://127.0.0.1:$port"
  for _ in $(seq 400); do curl -fsS -o /dev/null "${url[$acks]}/readyz" && break; sleep 0.05; done
done
: > "$out/replicas.jsonl"
for acks in 0 1; do
  echo "== acks $acks: uncontended, 16 connections, ${secs} s" >&2
  "$bench" --url "${url[$acks]}" --seconds "$secs" uncontended --connections 16 \
    | python3 -c "import json,sys; r=json.load(sys.stdin); r['acks']=$acks; print(json.dumps(r))" \
    >> "$out/replicas.jsonl"
done
master_port() {
  redis-cli -p "$sentinel_base" sentinel get-master-addr-by-name leasehold | sed -n 2p
}
echo "== 5 failovers: kill -9 of the master to the first 201" >&2
for round in 1 2 3 4 5; do
  port=$(master_port)
  pid=$(redis-cli -p "$port" info server | tr -d '\r' | sed -n 's/^process_id://p')
  started=$(date +%s%N)
  kill -9 "$pid"
  first=""
  for _ in $(seq 3000); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "${url[1]}/v1/locks/failover-$round/leases?wait_ms=0" || true)
    if [ "$code" = 201 ]; then first=$(date +%s%N); break; fi
    sleep 0.005
  done
  [ -n "$first" ] || { echo "no 201 within 15 s of the kill" >&2; exit 1; }
  ms=$(( (first - started) / 1000000 ))
  echo "{\"failover\": $round, \"unavailable_ms\": $ms}" >> "$out/replicas.jsonl"
  echo "   failover $round: $ms ms" >&2
  # The killed node back as a replica of the new master, and linked, before the next round.
  new=$(master_port)
  dir=$(ls -d /tmp/leasehold-ha.*/"$port" 2>/dev/null | head -1)
  redis-server "$dir/redis.conf" --replicaof 127.0.0.1 "$new" > /dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    redis-cli -p "$port" info replication 2>/dev/null | grep -q master_link_status:up && break
    sleep 0.05
  done
  sleep 3
done
python3 - "$out/replicas.jsonl" <<'PY' > benches/replicas.md
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loops = {r["acks"]: r for r in rows if "acks" in r}
fails = [r["unavailable_ms"] for r in rows if "failover" in r]
print("## Replica acknowledgements and failover (benches/replicas.sh)\n")
print("One run of `benches/replicas.sh`: a master with two replicas and three Sentinels on loopback, "
      "Leasehold in Sentinel mode; the uncontended loop at 16 connections (each connection its own lock), "
      "then 5 failovers by `kill -9` of the master, each timed from the kill to the first 201.\n")
print("| `--min-replica-acks` | cycles/s | acquire p50 | acquire p99 |")
print("|---|---|---|---|")
for acks in (0, 1):
    r = loops.get(acks)
    if r:
        a = r["acquire_ms"]
        print(f"| {acks} | {r['cycles_per_s']:,.0f} | {a['p50']:.2f} ms | {a['p99']:.2f} ms |")
if 0 in loops and 1 in loops:
    print(f"\nWith acks: {loops[1]['cycles_per_s'] / loops[0]['cycles_per_s']:.2f}× the cycles/s, "
          f"acquire p50 {loops[1]['acquire_ms']['p50'] / loops[0]['acquire_ms']['p50']:.2f}× (same run).\n")
if fails:
    print(f"Failover unavailability (kill -9 of the master to the first 201): median "
          f"**{statistics.median(fails):,.0f} ms** of {len(fails)} ({', '.join(str(f) for f in fails)} ms); "
          f"Sentinel's `down-after-milliseconds` here is 2000.")
PY
cat benches/replicas.md
