#!/usr/bin/env bash
# Tests the TypeScript client against real Leasehold servers (each with its embedded
# redis-server) that this script starts and stops on every exit path: installs what is missing
# (Node >= 18 and npm, redis-server; the dev dependencies with `npm ci`), compiles the package
# and the tests with tsc, and runs them with node's own test runner.
#
# The server binary: $LEASEHOLD_BIN, else <repo>/target/debug/leasehold, built when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

node_ok() {
  command -v node >/dev/null && command -v npm >/dev/null &&
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'
}
node_ok || "$root/.ci/ensure-packages" nodejs npm
node_ok || { echo "test.sh: Node >= 18 with npm is needed" >&2; exit 1; }
"$root/.ci/ensure-packages" redis-server

bin=${LEASEHOLD_BIN:-$root/target/debug/leasehold}
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build --locked --bin leasehold)
fi

npm ci --no-audit --no-fund --loglevel=error
rm -rf dist build
node_modules/.bin/tsc -p tsconfig.json
node_modules/.bin/tsc -p tsconfig.test.json

work=$(mktemp -d -t leasehold-ts.XXXXXX)
pids=()
runner=""
cleanup() {
  local pid
  if [ -n "$runner" ]; then kill -TERM -- "-$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME [SERVE ARGS...]: starts `leasehold serve` on a free port with its own data
# dir and admin token; sets $url and $token.
start_server() {
  local dir="$work/$1"
  shift
  mkdir -m 700 "$dir"
  token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf '%s\n' "$token" > "$dir/admin-token")
  RUST_LOG=info "$bin" serve --listen 127.0.0.1:0 --data-dir "$dir" --admin-token-file "$dir/admin-token" \
    --log-format json "$@" 2> "$dir/log" &
  pids+=($!)
  local pid=$! addr="" i
  for i in $(seq 1 300); do
    addr=$(grep -o '"addr":"[^"]*"' "$dir/log" | head -1 | cut -d'"' -f4 || true)
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "test.sh: leasehold did not start" >&2; cat "$dir/log" >&2; exit 1; }
  url="http://$addr"
  node -e '
    const end = Date.now() + 30000;
    (async () => {
      for (;;) {
        try { if ((await fetch(process.argv[1] + "/readyz")).status === 200) return; } catch {}
        if (Date.now() > end) { console.error("test.sh: /readyz never answered 200"); process.exit(1); }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();' "$url"
}

max_wait_ms=1500
start_server main --max-wait-ms "$max_wait_ms"
export LEASEHOLD_TEST_URL=$url LEASEHOLD_TEST_ADMIN_TOKEN=$token LEASEHOLD_TEST_MAX_WAIT_MS=$max_wait_ms
start_server keys
export LEASEHOLD_TEST_KEYS_URL=$url LEASEHOLD_TEST_KEYS_ADMIN_TOKEN=$token
# A server whose "kind": "redlock" goes to three Redis masters of its own.
# shellcheck source=../redlock-nodes.sh
. "$here/../redlock-nodes.sh"
mkdir -m 700 "$work/nodes"
start_redlock_nodes "$work/nodes"
start_server redlock --redlock-nodes "$redlock_nodes"
export LEASEHOLD_TEST_REDLOCK_URL=$url LEASEHOLD_TEST_REDLOCK_ADMIN_TOKEN=$token
# The tests' temporary files (packed packages, browser profiles) go where cleanup removes them.
mkdir "$work/tmp"
export TMPDIR=$work/tmp

# Bounded: a test that hangs fails (--test-timeout), and a process that a failed test left
# holding a lease (leases keep renewing until released) is ended (--test-force-exit).
flags=(--test-reporter=spec)
for flag in --test-timeout=60000 --test-force-exit; do
  node --help | grep -q -- "${flag%%=*}" && flags+=("$flag")
done
export LEASEHOLD_TEST_REPORT=$work/report
: > "$LEASEHOLD_TEST_REPORT"
# In its own process group, so that an interrupted run takes the test processes down too.
setsid node --test "${flags[@]}" build/test/*.test.js &
runner=$!
status=0
wait "$runner" || status=$?
runner=""
if [ -s "$LEASEHOLD_TEST_REPORT" ]; then
  echo
  cat "$LEASEHOLD_TEST_REPORT"
fi
exit "$status"
