# Sourced by the clients' test.sh scripts. `start_redlock_nodes DIR` starts three redis-servers
# (RedLock's independent masters) on Unix sockets in DIR, adds their pids to the caller's
# `pids` array (its cleanup stops them), waits until each listens, and sets `redlock_nodes` to
# their URLs, comma-separated, for `leasehold serve --redlock-nodes`.
start_redlock_nodes() {
  local dir=$1 i n urls=()
  for i in 1 2 3; do
    redis-server --port 0 --unixsocket "$dir/redlock-$i.sock" --unixsocketperm 700 \
      --save '' --appendonly no --dir "$dir" > "$dir/redlock-$i.log" 2>&1 &
    pids+=($!)
    urls+=("redis+unix://$dir/redlock-$i.sock")
  done
  for i in 1 2 3; do
    for n in $(seq 1 100); do
      [ -S "$dir/redlock-$i.sock" ] && break
      sleep 0.05
    done
    [ -S "$dir/redlock-$i.sock" ] || { echo "redis-server $i did not start:" >&2; cat "$dir/redlock-$i.log" >&2; return 1; }
  done
  redlock_nodes=$(IFS=,; echo "${urls[*]}")
}
