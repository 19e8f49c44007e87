#!/usr/bin/env bash
# The Python client's tests, against real Leasehold servers (each with its embedded Redis)
# started here and stopped on every exit path. Idempotent on a clean clone: installs
# redis-server (and python3-venv where venv is missing) with the repository's
# .ci/ensure-packages, the package and its test dependencies into clients/python/.venv.
#
#   clients/python/test.sh [pytest args...]
#
# The server binary: $LEASEHOLD_BIN, else <repo>/target/debug/leasehold, else built with cargo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

pids=()
dirs=()
pytest_pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$pytest_pid" ]; then
    kill -TERM "$pytest_pid" 2>/dev/null || true
    wait "$pytest_pid" 2>/dev/null || true
  fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ ${#dirs[@]} -gt 0 ]; then rm -rf "${dirs[@]}"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- toolchain -----------------------------------------------------------------------------
"$root/.ci/ensure-packages" redis-server
# $PYTHON picks another interpreter (e.g. a Python 3.9, to run the tests on the oldest one
# supported); each gets its own venv.
python=${PYTHON:-python3}
"$python" -c 'import venv, ensurepip' 2>/dev/null || "$root/.ci/ensure-packages" python3-venv
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv="$here/.venv"
[ -z "${PYTHON:-}" ] || venv="$here/.venv-$version"
lint=1
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || lint=0  # mypy needs 3.10+
extras=test
[ "$lint" = 0 ] || extras=test,lint
want=$( (cat pyproject.toml; echo "$extras") | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
  echo "installing the package and its test dependencies into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q -e ".[$extras]"
  echo "$want" > "$venv/.installed"
fi
py="$venv/bin/python"

# The code must run on Python 3.9 (no syntax, library call or evaluated annotation newer than
# that: the machine's Python may be newer), is typed (mypy --strict) and lints clean.
if [ "$lint" = 1 ]; then
  "$venv/bin/vermin" -q --no-tips --violations --target=3.9- --eval-annotations --feature union-types \
    src/leasehold tests scripts || { echo "vermin: the code above needs a Python newer than 3.9" >&2; exit 1; }
  "$venv/bin/mypy" --strict --no-error-summary src/leasehold tests scripts
  "$venv/bin/ruff" check -q src tests scripts
  "$venv/bin/ruff" format -q --check src tests scripts
fi

bin=${LEASEHOLD_BIN:-$root/target/debug/leasehold}
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build --locked --bin leasehold)
fi

# --- servers -------------------------------------------------------------------------------
# start_server VAR ARGS...: starts `leasehold serve` on a free loopback port with a private
# data dir and a random admin token; sets VAR_url and VAR_token.
start_server() {
  local var=$1
  shift
  local dir
  dir=$(mktemp -d -t leasehold-py.XXXXXX)
  dirs+=("$dir")
  local token
  token=$("$py" -c 'import secrets; print(secrets.token_urlsafe(32))')
  LEASEHOLD_ADMIN_TOKEN="$token" RUST_LOG=info "$bin" serve --listen 127.0.0.1:0 \
    --data-dir "$dir/data" --log-format json "$@" 2> "$dir/log" &
  pids+=($!)
  local url
  url=$("$py" - "$dir/log" "$!" <<'EOF'
import json, os, sys, time, urllib.request
log, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 30
addr = None
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("leasehold exited at startup:\n" + open(log).read())
    for line in open(log):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        fields = {**record.get("fields", {}), **record}
        if "listening" in str(fields.get("message", "")) and fields.get("addr"):
            addr = fields["addr"]
    if addr:
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=2) as r:
                if r.status == 200:
                    print(f"http://{addr}")
                    sys.exit(0)
        except OSError:
            pass
    time.sleep(0.1)
sys.exit("leasehold did not become ready within 30 s:\n" + open(log).read())
EOF
  )
  printf -v "${var}_url" '%s' "$url"
  printf -v "${var}_token" '%s' "$token"
}

# The main server: short TTLs allowed, and a server-side wait cut to 2 s, so long waits take
# the client's re-ask and fair-ticket paths (the user never sees them).
start_server main --min-ttl-ms 300 --max-wait-ms 2000
# A server whose API keys the tests create (once one exists, every caller needs one), with the
# default limits but for 2 streams (lease watches among them) per key.
start_server keyed --min-ttl-ms 300 --max-streams-per-client 2
# A server whose "kind": "redlock" goes to three Redis masters of its own.
# shellcheck source=../redlock-nodes.sh
. "$here/../redlock-nodes.sh"
nodes_dir=$(mktemp -d -t leasehold-py-nodes.XXXXXX)
dirs+=("$nodes_dir")
start_redlock_nodes "$nodes_dir"
start_server redlock --min-ttl-ms 300 --redlock-nodes "$redlock_nodes"
echo "leasehold servers: $main_url (main), $keyed_url (keyed), $redlock_url (RedLock)" >&2

# --- tests ---------------------------------------------------------------------------------
export LEASEHOLD_TEST_URL="$main_url" LEASEHOLD_TEST_ADMIN_TOKEN="$main_token"
export LEASEHOLD_TEST_KEYED_URL="$keyed_url" LEASEHOLD_TEST_KEYED_ADMIN_TOKEN="$keyed_token"
export LEASEHOLD_TEST_REDLOCK_URL="$redlock_url" LEASEHOLD_TEST_REDLOCK_ADMIN_TOKEN="$redlock_token"
unset LEASEHOLD_API_KEY LEASEHOLD_SERVER
"$py" -m pytest "$@" &
pytest_pid=$!
set +e
wait "$pytest_pid"
rc=$?
set -e
pytest_pid=""
exit "$rc"
