#!/usr/bin/env bash
# The whole benchmark in one run on this machine: the honest ceiling (Redisson's minimal RLock
# acquire + release scripts, straight at Redis), what one Leasehold cycle costs Redis per lease
# kind, Leasehold end to end beside that ceiling, contended handoff with a FIFO check, parked
# waiters (memory, idle CPU, Redis connections, drain), and, in a full run, the read-heavy
# lock, the dashboard, the Python redis Lock and etcd's lock. Everything runs on loopback and
# is started and stopped here; results go to bench-out/results.jsonl, then BENCHMARKS.md
# (with benches/before.json: the figures before issue 10, beside each target).
#
# Usage: benches/run.sh [--quick] [seconds-per-timed-loop]
#   full (default 10 s loops): ~6 minutes on 2 cores. --quick (default 3 s loops, fewer
#   scenarios, no peers): ~2 minutes, for iterating; it writes bench-out/BENCHMARKS.quick.md
#   and leaves BENCHMARKS.md alone.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
if [ "${1:-}" = "--quick" ]; then quick=true; shift; fi
if $quick; then secs=${1:-3}; else secs=${1:-10}; fi
out=bench-out
mkdir -p "$out"
: > "$out/results.jsonl"
packages=(redis-server redis-tools wrk python3-venv valgrind)
$quick || packages+=(etcd-server etcd-client)
.ci/ensure-packages "${packages[@]}"
nice -n 10 cargo build --release --locked -q
nice -n 10 cargo bench --locked --bench scenarios --no-run -q 2>/dev/null
bench=$(ls -t target/release/deps/scenarios-* | grep -v '\.d$' | head -1)
# Python with redis-py (and requests, for the peers): the replay below and the Python peer.
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
rcli() { redis-cli -s "$sock" "$@"; }

redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null &
pids+=($!)
until rcli ping >/dev/null 2>&1; do sleep 0.05; done
redis_url="redis+unix://$sock"

# Redis shares these cores: the server leaves it one, as the book's Sizing page advises (--worker-threads).
cores=$(nproc)
threads=$(( cores > 1 ? cores - 1 : 1 ))
server_pid=""
start_server() { # start_server [worker threads]
  [ -z "$server_pid" ] || { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; }
  rcli FLUSHALL >/dev/null
  port=$(free_port)
  url="http://127.0.0.1:$port"
  RUST_LOG=warn target/release/leasehold serve --listen "127.0.0.1:$port" --redis-url "$redis_url" \
    --max-wait-ms 120000 --worker-threads "${1:-$threads}" &
  server_pid=$!
  pids+=("$server_pid")
  until curl -sf "$url/readyz" >/dev/null; do sleep 0.05; done
}

python3 -c 'import json,os,platform,subprocess,datetime,sys
cpu=[l.split(":",1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][:1]
mem=[l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")][0]
def version(cmd):
    try: return subprocess.run(cmd,capture_output=True,text=True).stdout.splitlines()[0].strip()
    except Exception: return "not installed"
print(json.dumps({"machine": {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "cpus": os.cpu_count(), "cpu": cpu[0] if cpu else "?", "memory_gb": round(int(mem)/1048576,1),
  "kernel": platform.release(), "redis": version(["redis-server","--version"]),
  "etcd": version(["etcd","--version"]), "rustc": version(["rustc","--version"]),
  "quick": sys.argv[1] == "true", "seconds": int(sys.argv[2]), "server_threads": int(sys.argv[3])}}))' "$quick" "$secs" "$threads" | record

# One redis-benchmark run with Redis's own account of it: requests/s and latency from
# redis-benchmark, script µs per call from INFO commandstats, Redis CPU per call from INFO cpu.
rb() { # rb <label> <connections> <requests> <redis-benchmark args...>
  local label=$1 c=$2 n=$3; shift 3
  local cpu0 stats
  rcli CONFIG RESETSTAT >/dev/null
  cpu0=$(rcli INFO cpu | tr -d '\r')
  redis-benchmark -s "$sock" -c "$c" -n "$n" --precision 3 "$@" > "$work/rb.out"
  stats=$(rcli INFO commandstats | tr -d '\r'; rcli INFO cpu | tr -d '\r')
  python3 - "$label" "$c" "$n" "$cpu0" "$stats" "$work/rb.out" <<'EOF'
import json, sys
label, c, n, cpu0, stats, path = sys.argv[1:]
def cpu(text):
    f = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
    return float(f["used_cpu_user"]) + float(f["used_cpu_sys"])
lines = open(path).read().replace("\r", "\n").splitlines()
rps = float([l for l in lines if "throughput summary" in l][0].split()[2])
i = [k for k, l in enumerate(lines) if "latency summary" in l][0]
v = lines[i + 2].split()
evalsha = [l for l in stats.splitlines() if l.startswith("cmdstat_evalsha:")][0]
f = dict(kv.split("=") for kv in evalsha.split(":", 1)[1].split(","))
calls = int(f["calls"])
print(json.dumps({"ceiling": "redisson-minimal", "op": label, "connections": int(c),
    "requests_per_s": rps, "p50_ms": float(v[3]), "p99_ms": float(v[5]),
    "redis_us_per_call": float(f["usec"]) / calls, "calls": calls,
    "redis_cpu_us_per_call": (cpu(stats) - cpu(cpu0)) * 1e6 / calls}))
EOF
}

echo "== ceiling: Redisson's RLock scripts under redis-benchmark (benches/redisson/)" >&2
acq=$(rcli SCRIPT LOAD "$(cat benches/redisson/lock_acquire.lua)")
rel=$(rcli SCRIPT LOAD "$(cat benches/redisson/lock_release.lua)")
holder=b9f3a0c2-5d1e-4c7a-9e2f-3a4b5c6d7e8f:1
for c in 1 16 64; do
  if $quick; then n=$((c * 500 + 10000)); else n=$((c * 2000 + 40000)); fi
  # Acquire: a fresh lock every call (its full path: EXISTS, HSET, PEXPIRE).
  rb acquire "$c" "$n" -r 100000000 EVALSHA "$acq" 1 "rb:__rand_int__" 30000 "$holder" | record
  rcli FLUSHALL >/dev/null
  # Release: one level of a lock held 10^9 times (HEXISTS, HINCRBY, PEXPIRE; the last
  # level's DEL + PUBLISH instead of PEXPIRE costs about the same). Scenario redis-minimal
  # below runs true pairs, the last level every time.
  rcli HSET rel "$holder" 1000000000 >/dev/null
  rb release "$c" "$n" EVALSHA "$rel" 2 rel "redisson_lock__channel:{rel}" 0 30000 "$holder" | record
  rcli FLUSHALL >/dev/null
done
echo "== ceiling: true acquire+release pairs of the same scripts (scenarios redis-minimal)" >&2
for c in 1 16 64; do "$bench" --redis-url "$redis_url" --url - --seconds "$secs" redis-minimal --connections "$c" | record; done
rcli FLUSHALL >/dev/null

echo "== Leasehold: Redis cost of one uncontended cycle per kind" >&2
start_server
if $quick; then cycles=300; else cycles=2000; fi
with_round() { python3 -c 'import json,sys; r=json.load(sys.stdin); r["round"]=int(sys.argv[1]); print(json.dumps(r))' "$1"; }
# Three rounds over the kinds, interleaved: a burst of noise from a neighbour on these shared
# cores lands on one round of a few kinds, and the report takes each kind's median round.
for round in 1 2 3; do
  for kind in reentrant exclusive fair read write semaphore; do
    "$bench" --url "$url" --redis-url "$redis_url" redis-cost --kind "$kind" --cycles "$cycles" \
      | with_round "$round" | record
  done
done

# The same cycle with Redis busy: the server's own FCALLs of one cycle, captured, replayed back to
# back beside the minimal pair replayed the same way (warm caches on both sides); see replay.py.
echo "== Leasehold's FCALLs and the minimal pair, replayed back to back" >&2
if $quick; then replay_names=200; else replay_names=500; fi
"$py" benches/replay.py "$sock" "$url" "$replay_names" 5 | record || note replay "failed"

# The same comparison in instructions: Redis under callgrind counts what it executes, which does
# not depend on what else these shared cores are doing (the µs above do). Cycles of every kind
# over HTTP, the minimal pair and the features floor, on one callgrind-run Redis; see
# instructions.py and floor.py.
echo "== instructions per cycle under callgrind (every kind; the minimal pair; the features floor)" >&2
if command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then
  cgsock=$work/cg.sock
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" redis-server --port 0 \
    --unixsocket "$cgsock" --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
  cgpid=$!
  pids+=("$cgpid")
  until redis-cli -s "$cgsock" ping >/dev/null 2>&1; do sleep 0.2; done
  cgport=$(free_port)
  RUST_LOG=warn target/release/leasehold serve --listen "127.0.0.1:$cgport" --redis-url "redis+unix://$cgsock" \
    --worker-threads "$threads" &
  cgserver=$!
  pids+=("$cgserver")
  until curl -sf "http://127.0.0.1:$cgport/readyz" >/dev/null; do sleep 0.2; done
  if $quick; then cgcycles=100; else cgcycles=300; fi
  cg_dump() { callgrind_control -d "$cgpid" >/dev/null; sleep 1; ls -t "$work"/cg.out.* | head -1; }
  # Every kind, the reentrant one (the target's) first; each on its own name, warmed first.
  kinds=()
  for kind in reentrant exclusive fair read write semaphore; do
    "$bench" --url "http://127.0.0.1:$cgport" --redis-url "redis+unix://$cgsock" redis-cost --kind "$kind" --cycles 20 >/dev/null
    callgrind_control -z "$cgpid" >/dev/null
    # (redis-cost runs one warm-up cycle of its own before the counted ones: cgcycles + 1 in all.)
    "$bench" --url "http://127.0.0.1:$cgport" --redis-url "redis+unix://$cgsock" redis-cost --kind "$kind" --cycles "$cgcycles" >/dev/null
    kinds+=("$kind=$(python3 benches/instructions.py "$(cg_dump)" fcallCommand)")
  done
  kill "$cgserver"; wait "$cgserver" 2>/dev/null || true
  callgrind_control -z "$cgpid" >/dev/null
  "$bench" --redis-url "redis+unix://$cgsock" --url - --seconds "$secs" redis-minimal --connections 1 >/dev/null
  minimal=$(python3 benches/instructions.py "$(cg_dump)" evalShaCommand)
  pairs=$(( $(redis-cli -s "$cgsock" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p') / 2 ))
  # The features floor (benches/floor/): as many cycles as each kind, one at a time, warmed first.
  "$py" benches/floor.py "$cgsock" 20
  callgrind_control -z "$cgpid" >/dev/null
  "$py" benches/floor.py "$cgsock" "$cgcycles"
  floor=$(python3 benches/instructions.py "$(cg_dump)" fcallCommand)
  python3 -c 'import json,sys
m, c, p, f = json.loads(sys.argv[1]), int(sys.argv[2]) + 1, int(sys.argv[3]), json.loads(sys.argv[4])
kinds = {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[5:])}
o = kinds["reentrant"]
print(json.dumps({"scenario": "instructions", "cycles": c, "pairs": p,
  "script_per_cycle": o["instructions"] / c, "redis_per_cycle": o["total"] / c,
  "minimal_script_per_pair": m["instructions"] / p, "minimal_redis_per_pair": m["total"] / p,
  "floor_cycles": c - 1, "floor_script_per_cycle": f["instructions"] / (c - 1),
  "floor_redis_per_cycle": f["total"] / (c - 1),
  "kinds": {k: {"script_per_cycle": v["instructions"] / c, "redis_per_cycle": v["total"] / c}
            for k, v in kinds.items()}}))' \
    "$minimal" "$cgcycles" "$pairs" "$floor" "${kinds[@]}" | record
  redis-cli -s "$cgsock" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
else
  note instructions "valgrind is not installed"
fi

echo "== Leasehold: uncontended cycles end to end" >&2
start_server
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
m=re.search(r"failures=(\d+)",t)
if m: extra["failures"]=int(m.group(1))
# The CPU wrk used, from the shell builtin `times` after it (its last line: children'"'"'s user and
# system time), per request.
m=re.search(r"(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$",t)
total=int(re.search(r"(\d+) requests in",t).group(1))
if m and total: extra["client_cpu_us_per_request"]=(60*int(m.group(1))+float(m.group(2))+60*int(m.group(3))+float(m.group(4)))*1e6/total
print(json.dumps(dict(requests_per_s=rps, p50_ms=p["50"], p99_ms=p["99"], **extra)))'; }
# wrk, then the CPU it used (see wrk_json).
wrk_timed() { { wrk "$@"; times; } | wrk_json; }
# Rounds, as for the Redis cost above: the report takes each figure's median round. Each round
# also runs the wrk loop on a server with one thread per core (tokio's default), Redis still
# beside it, to compare with this run's thread count (on one core there is nothing to compare).
if $quick; then rounds=1; else rounds=3; fi
for round in $(seq "$rounds"); do
  [ "$round" = 1 ] || start_server
  for c in 1 16 64; do
    w=$(wrk_timed -t"$c" -c"$c" -d"${secs}s" --latency -s benches/acquire_release.lua "$url" -- "r$round-c$c")
    echo "{\"stack\": \"wrk-acquire-release\", \"connections\": $c, \"round\": $round, \"wrk\": $w}" | record
  done
  for c in 1 16 64; do
    "$bench" --url "$url" --redis-url "$redis_url" --seconds "$secs" uncontended --connections "$c" | with_round "$round" | record
  done
  if [ "$cores" -gt "$threads" ]; then
    start_server "$cores"
    for c in 16 64; do
      w=$(wrk_timed -t"$c" -c"$c" -d"${secs}s" --latency -s benches/acquire_release.lua "$url" -- "r$round-c$c-all")
      echo "{\"stack\": \"wrk-acquire-release\", \"connections\": $c, \"server_threads\": $cores, \"round\": $round, \"wrk\": $w}" | record
    done
  fi
done
start_server
$quick || {
  w=$(wrk_timed -t2 -c64 -d"${secs}s" --latency "$url/healthz")
  echo "{\"stack\": \"http-healthz\", \"connections\": 64, \"wrk\": $w}" | record
}

echo "== Leasehold: contended handoff" >&2
if $quick; then contended_runs="fair:16:0 reentrant:16:0"; else
  contended_runs="reentrant:2:0 reentrant:16:0 reentrant:64:0 fair:2:0 fair:16:0 fair:64:0 reentrant:2:5 reentrant:16:5 fair:2:5 fair:16:5"
fi
for run in $contended_runs; do
  IFS=: read -r kind n hold <<< "$run"
  "$bench" --url "$url" --redis-url "$redis_url" --seconds "$secs" contended --clients "$n" --kind "$kind" --hold-ms "$hold" | record
done

# Rounds, the protocols in turn: the drain's time moved between 1.3 and 2.1 s from one run to
# the next on the same code (the same 2 FCALLs and 1 PUBLISH per handoff every time), so the
# report takes each protocol's median round.
if $quick; then idle=2; parked_rounds=1; else idle=5; parked_rounds=3; fi
for round in $(seq "$parked_rounds"); do
  for proto in "" "--http2"; do
    echo "== parked waiters ${proto:-http/1.1}, round $round (fresh server)" >&2
    start_server
    "$bench" --url "$url" --redis-url "$redis_url" parked --waiters 10000 --locks 100 \
      --idle-seconds "$idle" --server-pid "$server_pid" $proto | with_round "$round" | record \
      || note parked "failed ($proto, round $round)"
  done
done

if ! $quick; then
  echo "== read-heavy read/write lock, dashboard (fresh server)" >&2
  start_server
  for policy in readers_first fifo; do "$bench" --url "$url" --seconds "$secs" read-heavy --policy "$policy" | record; done
  start_server
  "$bench" --url "$url" dashboard --locks 10000 | record || note dashboard "failed"

  echo "== Python redis Lock" >&2
  rcli FLUSHALL >/dev/null
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
fi

if $quick; then
  python3 benches/report.py "$out/results.jsonl" "benches/run.sh --quick $secs" benches/before.json > "$out/BENCHMARKS.quick.md"
  cat "$out/BENCHMARKS.quick.md"
  echo "wrote $out/BENCHMARKS.quick.md" >&2
else
  python3 benches/report.py "$out/results.jsonl" "benches/run.sh $secs" benches/before.json > BENCHMARKS.md
  cat BENCHMARKS.md
  echo "wrote BENCHMARKS.md" >&2
fi
