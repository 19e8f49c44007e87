# Shared by the .ci scripts that test the built server from outside (.ci/schemathesis,
# .ci/openapi-client): a pinned Python venv, and `leasehold serve` on a free port with its
# embedded redis-server in a temp data dir, stopped (and the dir removed) on exit.
# Source it from a script running in the repository root.

# ensure_venv DIR PACKAGE==VERSION...: creates DIR as a venv holding exactly these pins
# unless it does already (the pins are kept in DIR/pins).
ensure_venv() {
  local venv=$1
  shift
  local pins="$*"
  if [ -f "$venv/pins" ] && [ "$(cat "$venv/pins")" = "$pins" ]; then
    return
  fi
  echo "installing $pins into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$@"
  echo "$pins" > "$venv/pins"
}

# start_leasehold [SERVE ARGS...]: builds the binary and starts `leasehold serve` in the
# background; sets $base (http://127.0.0.1:PORT), $server (its pid) and $lh_data (its data
# dir, with admin-token), and an EXIT trap that stops it.
start_leasehold() {
  # Through the test target, so cargo reuses the test build (a plain `cargo build` resolves
  # features without the dev-dependencies and would rebuild the whole HTTP stack).
  cargo test --locked --no-run --test api -q
  lh_data=$(mktemp -d -t lh-ci.XXXXXX)
  local log="$lh_data/leasehold.log"
  server=""
  trap stop_leasehold EXIT
  RUST_LOG=info target/debug/leasehold serve --listen 127.0.0.1:0 --data-dir "$lh_data" \
    --log-format json "$@" 2> "$log" &
  server=$!
  local addr=""
  for _ in $(seq 1 300); do
    addr=$(grep -o '"addr":"[^"]*"' "$log" | head -1 | cut -d'"' -f4 || true)
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "leasehold did not start" >&2; cat "$log" >&2; exit 1; }
  base="http://$addr"
}

stop_leasehold() {
  if [ -n "${server:-}" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server"
    wait "$server" || true
  fi
  [ -n "${lh_data:-}" ] && rm -rf "$lh_data"
}
