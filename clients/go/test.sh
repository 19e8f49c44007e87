#!/usr/bin/env bash
# Tests the Go client against real Leasehold servers (each with its Redis; one with three RedLock
# nodes) started here, stopped on every way out.
# Usage: clients/go/test.sh [go test flags, e.g. -run Fair]
# The server binary: $LEASEHOLD_BIN, else <repo>/target/debug/leasehold (built if missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# Toolchain: Debian's golang-go (1.19 on bookworm, the oldest Go this module supports),
# redis-server for the server's embedded Redis, curl for the readiness check.
need=()
command -v go > /dev/null || need+=(golang-go)
command -v redis-server > /dev/null || need+=(redis-server)
command -v curl > /dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  "$root/.ci/ensure-packages" "${need[@]}"
fi
# Go's build cache is the user's default (~/.cache/go-build: kept between runs and clones);
# without a home, this folder's .cache (git-ignored). Standard library only, so no network:
# the module proxy is off.
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
  export GOCACHE="$here/.cache/go-build" GOPATH="$here/.cache/gopath"
fi
export GOPROXY=off GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
go version

bin=${LEASEHOLD_BIN:-$root/target/debug/leasehold}
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build --locked --bin leasehold)
fi

tmp=$(mktemp -d -t leasehold-go.XXXXXX)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
# start_server NAME [SERVE ARGS...]: starts `leasehold serve` on a free port with its own data
# dir, the admin token and the tests' short limits; sets $url once it is ready.
start_server() {
  local name=$1 addr="" i
  shift
  # Short limits the tests rely on: TTLs down to 500 ms; waits cut to 1.5 s per request (so
  # the client's own continuation of longer waits and fair-ticket polling are exercised);
  # anonymous callers let in even once the API-key test has made a key.
  "$bin" serve --listen 127.0.0.1:0 --data-dir "$tmp/$name" --admin-token "$admin" \
    --min-ttl-ms 500 --max-wait-ms 1500 --allow-anonymous --log-format json "$@" \
    > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  local pid=$!
  for i in $(seq 1 300); do
    addr=$(grep -o '"addr":"[^"]*"' "$tmp/$name.log" | head -1 | cut -d'"' -f4 || true)
    [ -n "$addr" ] && break
    kill -0 "$pid" 2> /dev/null || { cat "$tmp/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "leasehold did not start" >&2; cat "$tmp/$name.log" >&2; exit 1; }
  url="http://$addr"
  for i in $(seq 1 100); do
    curl -sf "$url/readyz" > /dev/null && break
    sleep 0.1
  done
  curl -sf "$url/readyz" > /dev/null || { echo "leasehold is not ready" >&2; cat "$tmp/$name.log" >&2; exit 1; }
}

start_server main
main_url=$url
echo "leasehold server at $url ($("$bin" --version 2> /dev/null || echo "$bin"))"
# A second server whose "kind": "redlock" goes to three Redis masters of its own.
# shellcheck source=../redlock-nodes.sh
. "$here/../redlock-nodes.sh"
start_redlock_nodes "$tmp"
start_server redlock --redlock-nodes "$redlock_nodes"
redlock_url=$url
echo "leasehold server with RedLock nodes at $redlock_url"

cd "$here"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
# The race detector needs cgo (a C compiler); without one the tests run without it.
race=()
command -v gcc > /dev/null && race=(-race)
status=0
LEASEHOLD_TEST_URL="$main_url" LEASEHOLD_TEST_REDLOCK_URL="$redlock_url" LEASEHOLD_TEST_ADMIN_TOKEN="$admin" \
  go test ${race[@]+"${race[@]}"} -count=1 -timeout 5m -v "$@" ./... > "$tmp/test.log" 2>&1 || status=$?
grep -v -e '^=== RUN' -e '^=== PAUSE' -e '^=== CONT' "$tmp/test.log" || true
if [ "$status" -ne 0 ]; then
  echo "go test failed (exit $status); the server's log:" >&2
  tail -n 50 "$tmp/main.log" >&2
  exit "$status"
fi
echo "--- summary"
grep -h -o -e 'LOSS LATENCY.*' "$tmp/test.log" || true
echo "clients/go: all tests passed"
