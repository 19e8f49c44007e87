#!/usr/bin/env bash
# The cross-system lock benchmark (issue 58), one command: the same workloads against
# Leasehold, redis-py's Lock, node-redisson's RLock, etcd's lock and PostgreSQL advisory locks,
# each started here on loopback and stopped by PID on exit (Ctrl-C too):
#   1. uncontended cycles (acquire + release, each client its own lock) at 1, 16, 64 clients;
#   2. contended handoff: one lock, N clients blocking, each holding it 5 ms (release -> the
#      next holder's grant), with FIFO inversions as the clients see them and, where the
#      system can tell its own order, as the system does (Leasehold's events, etcd's
#      revisions, PostgreSQL's pg_locks);
#   3. failover to the next grant: a 3-member etcd, its leader killed (kill -9) each round.
# Consul is not in Debian's archive (its licence change took it out), so it does not run here.
# Installs what it needs once (Debian packages, a Python venv and node-redisson under
# target/peers/). Writes bench-out/peers.jsonl and benches/peers.md (BENCHMARKS.md takes the
# latter in on the next benches/run.sh report).
#
# Usage: benches/peers/run.sh [seconds-per-loop]   (default 3; about 4 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ left in benches/peers/
secs=${1:-3}
# Contended loops run twice as long: at 5 ms a hold they see about 100 grants a second, and a
# burst of other work on these shared cores would otherwise weigh on too few handoffs.
csecs=$((secs * 2))
here=benches/peers
out=bench-out
jsonl=$out/peers.jsonl
state=target/peers
mkdir -p "$out" "$state"
: > "$jsonl"

echo "== installing what the peers need (once)" >&2
.ci/ensure-packages redis-server redis-tools etcd-server etcd-client postgresql curl python3-venv
[ -x "$state/venv/bin/python" ] || python3 -m venv "$state/venv"
stamp=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$state/venv/.installed" 2>/dev/null)" != "$stamp" ]; then
  "$state/venv/bin/pip" install -q -r "$here/requirements.txt"
  echo "$stamp" > "$state/venv/.installed"
fi
py=$state/venv/bin/python
# node-redisson as the project's tests install it (pinned by their package-lock.json).
bash tests/api/redisson/node-redisson/install.sh "$PWD/$state/node" >/dev/null
nice -n 10 cargo build --release --locked -q
nice -n 10 cargo bench --locked --bench scenarios --no-run -q 2>/dev/null
bench=$(ls -t target/release/deps/scenarios-* | grep -v '\.d$' | head -1)

work=$(mktemp -d)
pgdir=$(mktemp -d)
pids=()
pg_pid=""
current=""  # the measurement running, if any (see measure)
# stop <pid> [signal]: asks it to stop, gives it 5 s, then kills it (an etcd member that lost
# its quorum does not always stop when asked).
stop() {
  local pid=$1
  kill "-${2:-TERM}" "$pid" 2>/dev/null || true
  for _ in $(seq 50); do
    case $(ps -o stat= -p "$pid" 2>/dev/null) in ""|Z*) break ;; esac
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget "$pid"
}
forget() { local keep=() p; for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; pids=("${keep[@]}"); }
cleanup() {
  local pid
  [ -z "$current" ] || stop "$current"
  for pid in "${pids[@]}"; do stop "$pid"; done
  # PostgreSQL's fast shutdown (SIGINT to the postmaster): its sessions are ours and done.
  [ -z "$pg_pid" ] || stop "$pg_pid" INT
  rm -rf "$work" "$pgdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
record() { tee -a "$jsonl" >&2; }
# measure <file> <command...>: one measurement into <file>, in the background and waited for:
# bash runs a trap only once a foreground command has ended, and not at all if that command
# handled the Ctrl-C itself (Python and Node do), where `wait` returns at once for the trap.
# Started in the background, the command does not see the Ctrl-C; cleanup stops it by PID.
measure() {
  local file=$1 status=0; shift
  "$@" > "$file" &
  current=$!
  wait "$current" || status=$?
  current=""
  return "$status"
}
# run <command...>: one measurement, recorded; a failure is recorded as a note, not the end.
run() {
  if measure "$work/result.json" "$@"; then record < "$work/result.json"; else note "failed: ${*##*/}"; fi
}
note() { "$py" -c 'import json,sys; print(json.dumps({"note": sys.argv[1]}))' "$1" | record; }
# wait_until <seconds> <command...>: polls every 0.1 s, fails after the bound.
wait_until() {
  local bound=$1; shift
  for _ in $(seq $((bound * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "gave up after ${bound} s: $*" >&2; return 1
}
# The machine as the run found it and left it: load average, the share of both cores busy in
# one second with nothing of this run's running, and the counters for the share over the run.
machine() {
  "$py" - "$1" "$secs" <<'EOF'
import json, os, platform, subprocess, sys, datetime, time
def jiffies():
    stat = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return [sum(stat), stat[3] + stat[4]]  # all, idle + iowait
# One second of the cores with none of this run's servers running: the other work's share.
a = jiffies(); time.sleep(1); b = jiffies()
print(json.dumps({"machine": sys.argv[1], "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "loadavg": open("/proc/loadavg").read().split()[:3], "cpu_jiffies": b,
  "busy_1s_percent": round(100 * (1 - (b[1] - a[1]) / max(b[0] - a[0], 1)), 1),
  "cpus": os.cpu_count(), "kernel": platform.release(), "seconds": float(sys.argv[2]),
  "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
  "memory_gb": round(int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / 1048576, 1)}))
EOF
}
versions() {
  local pg=/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -n | tail -1)/bin
  "$py" - "$pg" "$state/node/node_modules" <<'EOF'
import json, subprocess, sys
def first(*cmd, env=None):
    try: return subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env).stdout.strip().splitlines()[0]
    except Exception: return "not installed"
import os, redis, psycopg
node_env = dict(os.environ, NODE_PATH=sys.argv[2])
print(json.dumps({"versions": {
  "leasehold": first("target/release/leasehold", "--version") + " (" + first("git", "describe", "--always", "--dirty") + ")",
  "redis": first("redis-server", "--version"), "etcd": first("etcd", "--version"),
  "postgresql": first(sys.argv[1] + "/postgres", "--version"), "python": sys.version.split()[0],
  "redis-py": redis.__version__, "psycopg": psycopg.__version__, "node": first("node", "--version"),
  "node-redisson": first("node", "-p", "require('node-redisson/package.json').version", env=node_env),
  "rustc": first("rustc", "--version")}}))
EOF
}
machine start | record
versions | record
cores=$(nproc)
threads=$(( cores > 1 ? cores - 1 : 1 ))
loop() { # loop <driver.py> <args...>: the three uncontended loops, then contended at 16 and 64
  local driver=$1; shift
  for c in 1 16 64; do
    run "$py" "$here/$driver" "$@" --mode uncontended --clients "$c" --seconds "$secs"
  done
  for n in 16 64; do
    run "$py" "$here/$driver" "$@" --mode contended --clients "$n" --seconds "$csecs" --hold-ms 5
  done
}

# One Redis (Unix socket, no persistence: benches/run.sh's settings) under Leasehold, then
# under redis-py and node-redisson in turn: the Redisson-layout systems on the same Redis.
sock=$work/r.sock
redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null &
redis_pid=$!
pids+=("$redis_pid")
wait_until 10 redis-cli -s "$sock" ping
redis_url="redis+unix://$sock"

echo "== Leasehold ($threads worker thread(s); benches/run.sh's flags)" >&2
port=$(free_port)
url="http://127.0.0.1:$port"
RUST_LOG=warn target/release/leasehold serve --listen "127.0.0.1:$port" --redis-url "$redis_url" \
  --max-wait-ms 120000 --worker-threads "$threads" &
server_pid=$!
pids+=("$server_pid")
wait_until 30 curl -sf "$url/readyz"
lh_pids="$server_pid,$redis_pid"
light() { run "$py" "$here/leasehold_light.py" --bench "$bench" --url "$url" --redis-url "$redis_url" --server-pids "$lh_pids" "$@"; }
loop leasehold_http.py --url "$url" --kind reentrant --server-pids "$lh_pids"
for n in 16 64; do
  run "$py" "$here/leasehold_http.py" --url "$url" --kind fair --redis-socket "$sock" --server-pids "$lh_pids" \
    --mode contended --clients "$n" --seconds "$csecs" --hold-ms 5
done
for c in 1 16 64; do light --mode uncontended --clients "$c" --seconds "$secs"; done
for n in 16 64; do light --mode contended --clients "$n" --seconds "$csecs" --hold-ms 5 --kind fair; done
stop "$server_pid"

echo "== redis-py Lock" >&2
redis-cli -s "$sock" FLUSHALL >/dev/null
loop python_lock.py --socket "$sock" --server-pids "$redis_pid"
echo "== node-redisson RLock" >&2
redis-cli -s "$sock" FLUSHALL >/dev/null
loop node_redisson.py --socket "$sock" --node-modules "$state/node/node_modules" --server-pids "$redis_pid"
stop "$redis_pid"

echo "== PostgreSQL advisory locks" >&2
pgbin=/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -n | tail -1)/bin
as_pg=()
# PostgreSQL refuses to run as root: as root, its own user runs it.
if [ "$(id -u)" = 0 ]; then chown postgres "$pgdir"; as_pg=(runuser -u postgres --); fi
"${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -A trust -U postgres >/dev/null
pg_port=$(free_port)
"${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w -t 30 \
  -o "-k $pgdir -p $pg_port -c listen_addresses=''" start >/dev/null
pg_pid=$(head -1 "$pgdir/data/postmaster.pid")
loop pg_advisory.py --dsn "host=$pgdir port=$pg_port user=postgres dbname=postgres" --server-pids "$pg_pid"
stop "$pg_pid" INT
pg_pid=""

etcd_member() { # etcd_member <name> <client port> <peer port> <initial cluster>: its PID in $member
  etcd --name "$1" --data-dir "$work/etcd-$1" --listen-client-urls "http://127.0.0.1:$2" \
    --advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
    --initial-advertise-peer-urls "http://127.0.0.1:$3" --initial-cluster "$4" \
    --logger zap --log-level error >>"$work/etcd-$1.log" 2>&1 &
  member=$!
  pids+=("$member")
}
echo "== etcd lock (one member)" >&2
cport=$(free_port); pport=$(free_port)
etcd_member solo "$cport" "$pport" "solo=http://127.0.0.1:$pport"
solo_pid=$member
wait_until 30 curl -sf "http://127.0.0.1:$cport/health"
loop etcd_lock.py --endpoint "http://127.0.0.1:$cport" --server-pids "$solo_pid"
stop "$solo_pid"

echo "== etcd failover: 3 members, kill -9 of the leader, 3 rounds" >&2
cports=(); pports=(); mpids=(); cluster=""
for i in 0 1 2; do
  cports+=("$(free_port)"); pports+=("$(free_port)")
  cluster+="${cluster:+,}m$i=http://127.0.0.1:${pports[$i]}"
done
endpoints=$(printf 'http://127.0.0.1:%s,' "${cports[@]}"); endpoints=${endpoints%,}
start_member() { etcd_member "m$1" "${cports[$1]}" "${pports[$1]}" "$cluster"; mpids[$1]=$member; }
for i in 0 1 2; do start_member "$i"; done
for i in 0 1 2; do wait_until 30 curl -sf "http://127.0.0.1:${cports[$i]}/health"; done
for round in 1 2 3; do
  measure "$work/failover.json" "$py" "$here/etcd_failover.py" --endpoints "$endpoints" \
    --pids "$(IFS=,; echo "${mpids[*]}")" --round "$round" || { note "failed: etcd failover round $round"; break; }
  result=$(cat "$work/failover.json")
  echo "$result" | record
  killed=$(echo "$result" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["killed"])')
  wait "${mpids[$killed]}" 2>/dev/null || true
  forget "${mpids[$killed]}"
  # Started again on its data: it rejoins as a follower and catches up before the next kill.
  start_member "$killed"
  wait_until 30 curl -sf "http://127.0.0.1:${cports[$killed]}/health"
  sleep 2
done
for pid in "${mpids[@]}"; do stop "$pid"; done
machine end | record
"$py" "$here/report.py" "$jsonl" "benches/peers/run.sh $secs" benches/failover.md > benches/peers.md
cat benches/peers.md
echo "wrote benches/peers.md and $jsonl" >&2
