#!/usr/bin/env bash
# What one uncontended acquire + release costs the server in CPU, beside what it costs Redis
# (issue 58's measure), and the floor it stands on. One Redis (Unix socket, no persistence, as
# benches/run.sh), Leasehold instances against it (`--worker-threads 1` each: Redis shares these
# 2 cores), the light client's loop (each connection its own lock name, the connections spread
# over the instances), the minimal Redisson pair straight at the same Redis. In rounds (a fresh
# server each, 1 s of warm-up not counted), each round in turn:
#   - one instance, 16 and 64 connections: cycles/s, acquire p50/p99, the server's CPU per cycle
#     (/proc/<pid>/stat) and Redis's (INFO cpu);
#   - the floor: two `GET /healthz` per cycle over the same stack (what two HTTP requests cost
#     the server with nothing else), and the minimal pair's two script calls, which report what
#     they cost their redis-rs client (what two Redis calls cost a Rust process);
#   - two instances at 16 connections (how the rate grows with instances on these cores).
# Then one instance under valgrind's callgrind for a 4-connection loop: its instructions and
# allocations per cycle (benches/allocations.py), which do not move with whatever else shares
# the cores. Writes bench-out/cpu.jsonl and benches/cpu.md (benches/cpu_report.py; BENCHMARKS.md
# takes it in on the next benches/run.sh report).
#
# Usage: benches/cpu.sh [--perf DIR] [seconds-per-loop] [rounds]   (default 10 s, 3 rounds:
#   about 9 minutes after the build). `--perf DIR` instead records one instance with `perf`
#   during the 16-connection loop of each round and writes DIR/server.folded (collapsed stacks),
#   DIR/server.svg, DIR/acquire.svg and DIR/release.svg (flame graphs: the whole cycle, and the
#   stacks under each handler) and DIR/where.txt (benches/where_time_goes.py); it needs inferno
#   (`cargo install --locked inferno`) and perf (Debian's linux-perf).
#   CARGO_TARGET_DIR is honoured; SERVER=<path> runs that server binary instead of building one;
#   SCENARIOS=<path> uses that scenarios binary instead of building one (the load client need
#   not be rebuilt when only the server changed). Stops everything it started on exit, Ctrl-C
#   or error.
set -euo pipefail
cd "$(dirname "$0")/.."
perf_dir=""
if [ "${1:-}" = "--perf" ]; then perf_dir=$2; shift 2; fi
secs=${1:-10}
rounds=${2:-3}
target=${CARGO_TARGET_DIR:-target}
packages=(redis-server redis-tools curl valgrind)
[ -z "$perf_dir" ] || packages+=(linux-perf)
.ci/ensure-packages "${packages[@]}"
[ -n "${SERVER:-}" ] || nice -n 10 cargo build --release --locked -q --bin leasehold
bench=${SCENARIOS:-$(nice -n 10 cargo bench --locked --bench scenarios --no-run --message-format=json -q \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "scenarios" and m.get("executable"):
        print(m["executable"])')}
[ -x "$bench" ] || { echo "no scenarios binary" >&2; exit 1; }
server_bin=${SERVER:-$target/release/leasehold}

work=$(mktemp -d -t leasehold-cpu-bench.XXXXXX)
pids=()
servers=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${servers[@]}" "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sock=$work/r.sock
rcli() { redis-cli -s "$sock" "$@"; }
redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null &
pids+=($!)
for _ in $(seq 200); do rcli ping >/dev/null 2>&1 && break; sleep 0.05; done
redis_url="redis+unix://$sock"

urls=()
start_servers() { # start_servers <instances>
  stop_servers
  rcli FLUSHALL >/dev/null
  urls=()
  for _ in $(seq "$1"); do
    local port
    port=$(free_port)
    RUST_LOG=warn "$server_bin" serve --listen "127.0.0.1:$port" --redis-url "$redis_url" \
      --worker-threads 1 &
    servers+=($!)
    urls+=("http://127.0.0.1:$port")
  done
  for url in "${urls[@]}"; do
    for _ in $(seq 200); do curl -sf "$url/readyz" >/dev/null && break; sleep 0.05; done
  done
}
stop_servers() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  servers=()
}
loop() { # loop <connections> <seconds> [extra scenario flags] -> one JSON line
  local first=${urls[0]} rest c=$1 s=$2
  shift 2
  rest=$(IFS=,; echo "${urls[*]:1}")
  "$bench" --url "$first" --redis-url "$redis_url" --seconds "$s" uncontended --connections "$c" \
    --server-pids "$(IFS=,; echo "${servers[*]}")" ${rest:+--also-urls "$rest"} "$@"
}
tag() { python3 -c 'import json,sys; r=json.load(sys.stdin); r["round"]=int(sys.argv[1]); print(json.dumps(r))' "$1"; }

mkdir -p bench-out
results=bench-out/cpu.jsonl
if [ -n "$perf_dir" ]; then
  command -v inferno-collapse-perf >/dev/null \
    || { echo "--perf needs inferno: cargo install --locked inferno" >&2; exit 1; }
  mkdir -p "$perf_dir"
  : > "$perf_dir/server.folded"
  for round in $(seq "$rounds"); do
    echo "== perf, round $round: 16 connections, $secs s" >&2
    start_servers 1
    loop 16 1 >/dev/null
    perf record -q -F 1999 --call-graph dwarf,32768 -o "$work/perf.data" -p "${servers[0]}" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
    loop 16 "$secs" >/dev/null
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    # Kernel frames marked `_[k]`, so that where_time_goes.py can tell them apart.
    perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf --all >> "$perf_dir/server.folded"
  done
  title="Leasehold: uncontended acquire + release, 16 connections"
  inferno-flamegraph --minwidth 2 --title "$title" < "$perf_dir/server.folded" > "$perf_dir/server.svg"
  grep -F 'leasehold::api::acquire::acquire' "$perf_dir/server.folded" \
    | inferno-flamegraph --minwidth 2 --title "$title: the acquire handler" > "$perf_dir/acquire.svg"
  grep -F 'leasehold::api::leases::release' "$perf_dir/server.folded" \
    | inferno-flamegraph --minwidth 2 --title "$title: the release handler" > "$perf_dir/release.svg"
  python3 benches/where_time_goes.py "$perf_dir/server.folded" | tee "$perf_dir/where.txt"
  exit 0
fi

: > "$results"
python3 -c 'import json,os,platform,subprocess,datetime
cpu=[l.split(":",1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][:1]
def version(cmd):
    try: return subprocess.run(cmd,capture_output=True,text=True).stdout.splitlines()[0].strip()
    except Exception: return "not installed"
print(json.dumps({"machine": {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "cpus": os.cpu_count(), "cpu": cpu[0] if cpu else "?", "kernel": platform.release(),
  "load": open("/proc/loadavg").read().split()[:3], "redis": version(["redis-server","--version"]),
  "rustc": version(["rustc","--version"])}}))' >> "$results"
for round in $(seq "$rounds"); do
  echo "== round $round: one instance, 16 and 64 connections, $secs s each" >&2
  start_servers 1
  loop 16 1 >/dev/null
  loop 16 "$secs" | tag "$round" >> "$results"
  loop 64 "$secs" | tag "$round" >> "$results"
  echo "== round $round: the floor, two GET /healthz per cycle, 16 connections" >&2
  loop 16 "$secs" --floor | tag "$round" >> "$results"
  echo "== round $round: two instances, 16 connections" >&2
  start_servers 2
  loop 16 1 >/dev/null
  loop 16 "$secs" | tag "$round" >> "$results"
  stop_servers
  rcli FLUSHALL >/dev/null
  echo "== round $round: the minimal pair, 16 connections" >&2
  "$bench" --redis-url "$redis_url" --url - --seconds "$secs" redis-minimal --connections 16 \
    | tag "$round" >> "$results"
done

echo "== callgrind: one instance, 4 connections, $secs s" >&2
port=$(free_port)
RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$server_bin" serve \
  --listen "127.0.0.1:$port" --redis-url "$redis_url" --worker-threads 1 >/dev/null 2>&1 &
servers+=($!)
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
"$bench" --url "http://127.0.0.1:$port" --seconds 2 uncontended --connections 4 >/dev/null
callgrind_control -z "${servers[0]}" >/dev/null
cycles=$("$bench" --url "http://127.0.0.1:$port" --seconds "$secs" uncontended --connections 4 \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["cycles"])')
callgrind_control -d "${servers[0]}" >/dev/null
sleep 2
python3 benches/allocations.py --json "$(ls -t "$work"/cg.out.* | head -1)" "$cycles" >> "$results"
stop_servers

python3 benches/cpu_report.py "$results" "benches/cpu.sh $secs $rounds" > benches/cpu.md
cat benches/cpu.md
