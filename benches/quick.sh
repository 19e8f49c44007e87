#!/usr/bin/env bash
# Quick comparison on this machine, in one run: Leasehold acquire+release cycles over HTTP (wrk,
# one lock name per connection) beside redis-benchmark running the same two Lua scripts straight
# against the same Redis (the ceiling no HTTP service can beat). Loopback only; bounded in time.
# Usage: benches/quick.sh [connections] [seconds]     (issue 6 brings the full benchmark tool)
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-64}
secs=${2:-10}
.ci/ensure-packages redis-server redis-tools wrk
cargo build --release --locked -q
work=$(mktemp -d)
sock=$work/r.sock
cleanup() { kill "${server_pid:-}" "${redis_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null &
redis_pid=$!
until redis-cli -s "$sock" ping >/dev/null 2>&1; do sleep 0.05; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn target/release/leasehold serve --listen 127.0.0.1:$port --redis-url "redis+unix://$sock" &
server_pid=$!
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done

script() { cat lua/prelude.lua; echo; cat "lua/$1"; }
summary() { tr '\r' '\n' | grep -A3 '^  throughput summary' | grep -v '^--'; }
acq=$(redis-cli -s "$sock" SCRIPT LOAD "$(script acquire.lua)")
rel=$(redis-cli -s "$sock" SCRIPT LOAD "$(script release.lua)")
id=01900000-0000-7000-8000-000000000000
digest=$(printf 'lht_bench' | sha256sum | cut -d' ' -f1)

echo "== machine: $(nproc) cores, $(uname -srm); redis $(redis-server --version | grep -o 'v=[0-9.]*')"
echo "== leasehold over HTTP (wrk, $conns connections, ${secs}s, acquire+release per cycle)"
wrk -t"$conns" -c"$conns" -d"${secs}s" --latency -s benches/acquire_release.lua "http://127.0.0.1:$port" \
  | grep -E "Latency|50%|90%|99%|Requests/sec|cycles="

n=$((conns * 4000))
echo "== redis-benchmark: acquire.lua on fresh locks ($conns clients, $n calls)"
redis-benchmark -s "$sock" -c "$conns" -n "$n" -r 100000000 --precision 3 \
  EVALSHA "$acq" 4 "b:__rand_int__" "{b:__rand_int__}:leasehold" "{b:__rand_int__}:leasehold:lease:" \
  "{b:__rand_int__}:leasehold:token:$digest" 30000 new "$id" "$digest" "" "" b leasehold:events 60000 \
  | summary
# Release one level of a lease held with a huge reentry count: the script's full path each call.
redis-cli -s "$sock" EVALSHA "$acq" 4 rel "{rel}:leasehold" "{rel}:leasehold:lease:" \
  "{rel}:leasehold:token:$digest" 600000 new "$id" "$digest" "" "" rel leasehold:events 60000 >/dev/null
redis-cli -s "$sock" HSET rel "$id:1" 1000000000 >/dev/null
echo "== redis-benchmark: release.lua, one level of a held lease ($conns clients, $n calls)"
redis-benchmark -s "$sock" -c "$conns" -n "$n" --precision 3 \
  EVALSHA "$rel" 4 rel "{rel}:leasehold:lease:$id" "{rel}:leasehold:token:$digest" "redisson_lock__channel:{rel}" \
  "$id" "$digest" one rel leasehold:events 60000 released | summary
