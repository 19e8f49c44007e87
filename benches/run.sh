#!/usr/bin/env bash
# The whole benchmark comparison in one run on this machine: Leasehold's scenarios beside the
# Redis ceiling (redis-benchmark running the same Lua scripts), a bare HTTP round trip on the
# same server stack, the Python redis Lock and etcd's lock. Everything runs on loopback and is
# started and stopped here; results go to bench-out/results.jsonl and BENCHMARKS.md.
# Usage: benches/run.sh [seconds-per-timed-loop, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
out=bench-out
mkdir -p "$out"
: > "$out/results.jsonl"
.ci/ensure-packages redis-server redis-tools wrk etcd-server etcd-client python3-venv
cargo build --release --locked -q
cargo bench --locked --bench scenarios --no-run -q 2>/dev/null
bench=$(ls -t target/release/deps/scenarios-* | grep -v '\.d$' | head -1)
venv=target/bench-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import redis, requests' 2>/dev/null || "$venv/bin/pip" install -q redis requests
py="$venv/bin/python"

work=$(mktemp -d)
sock=$work/r.sock
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
record() { tee -a "$out/results.jsonl"; }
note() { python3 -c 'import json,sys; print(json.dumps({"note": sys.argv[1], "detail": sys.argv[2]}))' "$1" "$2" | record; }

redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null &
pids+=($!)
until redis-cli -s "$sock" ping >/dev/null 2>&1; do sleep 0.05; done
redis_url="redis+unix://$sock"

server_pid=""
start_server() {
  [ -z "$server_pid" ] || { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; }
  redis-cli -s "$sock" FLUSHALL >/dev/null
  port=$(free_port)
  url="http://127.0.0.1:$port"
  RUST_LOG=warn target/release/leasehold serve --listen "127.0.0.1:$port" --redis-url "$redis_url" \
    --max-wait-ms 120000 &
  server_pid=$!
  pids+=("$server_pid")
  until curl -sf "$url/readyz" >/dev/null; do sleep 0.05; done
}

python3 -c 'import json,os,platform,subprocess,datetime
cpu=[l.split(":",1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][:1]
mem=[l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")][0]
print(json.dumps({"machine": {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
  "cpus": os.cpu_count(), "cpu": cpu[0] if cpu else "?", "memory_gb": round(int(mem)/1048576,1),
  "kernel": platform.release(),
  "redis": subprocess.run(["redis-server","--version"],capture_output=True,text=True).stdout.strip(),
  "etcd": subprocess.run(["etcd","--version"],capture_output=True,text=True).stdout.splitlines()[0],
  "rustc": subprocess.run(["rustc","--version"],capture_output=True,text=True).stdout.strip()}}))' | record

echo "== ceiling: redis-benchmark running acquire.lua and release.lua" >&2
script() { cat lua/prelude.lua; echo; cat "lua/$1"; }
keys="b:__rand_int__ {b:__rand_int__}:leasehold {b:__rand_int__} redisson_lock__channel:{b:__rand_int__} redisson_rwlock:{b:__rand_int__} redisson_lock_queue:{b:__rand_int__} redisson_lock_timeout:{b:__rand_int__}"
acq=$(redis-cli -s "$sock" SCRIPT LOAD "$(cat lua/prelude.lua; echo; cat lua/locklib.lua; echo; cat lua/acquire.lua)")
rel=$(redis-cli -s "$sock" SCRIPT LOAD "$(cat lua/prelude.lua; echo; cat lua/locklib.lua; echo; cat lua/release.lua)")
id=01900000-0000-7000-8000-000000000000
digest=$(printf 'lht_bench' | sha256sum | cut -d' ' -f1)
rb_summary() { tr '\r' '\n' | python3 -c '
import sys,json
lines=sys.stdin.read().splitlines()
rps=[l for l in lines if "throughput summary" in l][0].split()[2]
i=[n for n,l in enumerate(lines) if "latency summary" in l][0]
v=lines[i+2].split()
print(json.dumps({"rps": float(rps), "p50": float(v[3]), "p99": float(v[5])}))'; }
for c in 1 16 64; do
  n=$((c * 3000 + 20000))
  a=$(redis-benchmark -s "$sock" -c "$c" -n "$n" -r 100000000 --precision 3 \
      EVALSHA "$acq" 7 $keys 30000 new "$id" "$digest" "" "" b leasehold:events 60000 reentrant readers_first 0 0 | rb_summary)
  redis-cli -s "$sock" FLUSHALL >/dev/null
  redis-cli -s "$sock" EVALSHA "$acq" 7 rel "{rel}:leasehold" "{rel}" "redisson_lock__channel:{rel}" "redisson_rwlock:{rel}" \
    "redisson_lock_queue:{rel}" "redisson_lock_timeout:{rel}" 600000 new "$id" "$digest" "" "" rel leasehold:events 60000 reentrant readers_first 0 0 >/dev/null
  redis-cli -s "$sock" HSET rel "$id:1" 1000000000 >/dev/null
  r=$(redis-benchmark -s "$sock" -c "$c" -n "$n" --precision 3 \
      EVALSHA "$rel" 7 rel "{rel}:leasehold" "{rel}" "redisson_lock__channel:{rel}" "redisson_rwlock:{rel}" \
      "redisson_lock_queue:{rel}" "redisson_lock_timeout:{rel}" "$id" "$digest" one rel leasehold:events 60000 released "" | rb_summary)
  redis-cli -s "$sock" FLUSHALL >/dev/null
  python3 -c 'import json,sys; print(json.dumps({"ceiling": "redis-benchmark", "connections": int(sys.argv[1]), "acquire": json.loads(sys.argv[2]), "release": json.loads(sys.argv[3])}))' "$c" "$a" "$r" | record
done

echo "== leasehold scenarios" >&2
start_server
port_url=$url
wrk_json() { python3 -c '
import sys,json,re
t=sys.stdin.read()
unit={"us":1e-3,"ms":1.0,"s":1e3}
def ms(s):
    m=re.match(r"([\d.]+)(us|ms|s)",s); return float(m.group(1))*unit[m.group(2)]
rps=float(re.search(r"Requests/sec:\s+([\d.]+)",t).group(1))
p={q: ms(re.search(r"\s%s%%\s+(\S+)"%q,t).group(1)) for q in ["50","99"]}
extra={}
m=re.search(r"cycles_per_s=(\d+)",t)
if m: extra["cycles_per_s"]=float(m.group(1))
print(json.dumps(dict(requests_per_s=rps, p50_ms=p["50"], p99_ms=p["99"], **extra)))'; }
w=$(wrk -t2 -c64 -d"${secs}s" --latency "$url/healthz" | wrk_json)
echo "{\"stack\": \"http-healthz\", \"connections\": 64, \"wrk\": $w}" | record
w=$(wrk -t64 -c64 -d"${secs}s" --latency -s benches/acquire_release.lua "$url" | wrk_json)
echo "{\"stack\": \"wrk-acquire-release\", \"connections\": 64, \"wrk\": $w}" | record
for c in 1 16 64; do "$bench" --url "$url" --seconds "$secs" uncontended --connections "$c" | record; done
for kind in reentrant fair; do
  for n in 2 16 64; do "$bench" --url "$url" --redis-url "$redis_url" --seconds "$secs" contended --clients "$n" --kind "$kind" | record; done
done
for kind in reentrant fair; do
  for n in 2 16; do "$bench" --url "$url" --redis-url "$redis_url" --seconds "$secs" contended --clients "$n" --kind "$kind" --hold-ms 5 | record; done
done
for policy in readers_first fifo; do "$bench" --url "$url" --seconds "$secs" read-heavy --policy "$policy" | record; done

for proto in "" "--http2"; do
  echo "== parked waiters ${proto:-http/1.1} (fresh server)" >&2
  start_server
  "$bench" --url "$url" --redis-url "$redis_url" parked --waiters 10000 --locks 100 \
    --server-pid "$server_pid" $proto | record || note parked "failed ($proto)"
done

echo "== dashboard (fresh server)" >&2
start_server
"$bench" --url "$url" dashboard --locks 10000 | record || note dashboard "failed"

echo "== Python redis Lock" >&2
redis-cli -s "$sock" FLUSHALL >/dev/null
"$py" benches/peers/python_lock.py --socket "$sock" --mode uncontended --threads 16 --seconds "$secs" | record || note python-lock "uncontended failed"
for hold in 0 5; do
  for n in 2 16; do
    "$py" benches/peers/python_lock.py --socket "$sock" --mode contended --threads "$n" --seconds "$secs" --hold-ms "$hold" | record || note python-lock "contended failed"
  done
done

echo "== etcd lock" >&2
if command -v etcd >/dev/null; then
  p1=$(free_port); p2=$(free_port)
  etcd --name bench --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$p1" \
    --advertise-client-urls "http://127.0.0.1:$p1" --listen-peer-urls "http://127.0.0.1:$p2" \
    --initial-advertise-peer-urls "http://127.0.0.1:$p2" --initial-cluster "bench=http://127.0.0.1:$p2" \
    --logger zap --log-level error >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p1/health" >/dev/null && break; sleep 0.1; done
  "$py" benches/peers/etcd_lock.py --endpoint "http://127.0.0.1:$p1" --mode uncontended --threads 16 --seconds "$secs" | record || note etcd "uncontended failed"
  for hold in 0 5; do
    for n in 2 16; do
      "$py" benches/peers/etcd_lock.py --endpoint "http://127.0.0.1:$p1" --mode contended --threads "$n" --seconds "$secs" --hold-ms "$hold" | record || note etcd "contended failed"
    done
  done
else
  note etcd "etcd-server could not be installed"
fi

python3 benches/report.py "$out/results.jsonl" "benches/run.sh $secs" > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
