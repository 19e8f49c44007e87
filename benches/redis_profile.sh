#!/usr/bin/env bash
# Where a cycle's Redis time goes, function by function: Redis runs under callgrind with its
# symbols for a few hundred cycles of the features floor (benches/floor/), of each lease kind
# named (over HTTP, through a release build of the server) and of Redisson's minimal pair, and
# benches/redis_profile.py sets their instructions per cycle side by side, grouped (the commands
# themselves, turning a command's reply into Lua values, Lua strings, the Lua VM, GC, ...).
# Debian's redis-server is stripped: the Lua engine inside it shows as bare addresses. So the
# same version is built once from Debian's source (its patches applied), with symbols, into
# target/redis-symbols/ (needs apt's deb.debian.org and gcc; it installs make, patch and
# libjemalloc-dev); or set REDIS_SERVER to a redis-server of your own. Instruction counts do
# not move with the load on the machine.
#
# Usage: benches/redis_profile.sh [kind ...]   (default: reentrant; kinds as in run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(reentrant)
cycles=300
.ci/ensure-packages redis-server redis-tools valgrind python3-venv

server=${REDIS_SERVER:-}
if [ -z "$server" ]; then
  dest=target/redis-symbols
  server=$dest/redis-server
  if [ ! -x "$server" ]; then
    .ci/ensure-packages libjemalloc-dev make patch
    version=$(dpkg-query -W -f='${Version}' redis-server)
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    # apt's own lists stay as they are: the source index goes to a list of this run's.
    printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' "$codename" "$codename-updates" > "$src/sources.list"
    printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security %s-security main\n' "$codename" >> "$src/sources.list"
    mkdir -p "$src/lists/partial"
    apt=(-o Dir::Etc::sourcelist="$src/sources.list" -o Dir::Etc::sourceparts=/nonexistent -o Dir::State::Lists="$src/lists")
    apt-get "${apt[@]}" update -qq
    (cd "$src" && apt-get "${apt[@]}" source --download-only -qq "redis=$version")
    upstream=${version#*:}
    upstream=${upstream%%-*}
    tar -xzf "$src"/redis_"$upstream".orig.tar.gz -C "$src"
    tar -xJf "$src"/redis_*.debian.tar.xz -C "$src/redis-$upstream"
    (cd "$src/redis-$upstream" && grep -v '^#' debian/patches/series | while read -r p; do
       [ -z "$p" ] || patch -p1 -s < "debian/patches/$p"; done)
    # As Debian builds it (debian/rules): its jemalloc, not the bundled one.
    nice make -C "$src/redis-$upstream" -j"$(nproc)" USE_SYSTEM_JEMALLOC=yes USE_JEMALLOC=yes \
      >"$src/build.log" 2>&1 \
      || { tail -20 "$src/build.log"; exit 1; }
    mkdir -p "$dest"
    cp "$src/redis-$upstream/src/redis-server" "$server"
    rm -rf "$src"
    echo "built $server (Redis $upstream with Debian's patches, with symbols)" >&2
  fi
fi

nice -n 10 cargo build --release --locked -q
nice -n 10 cargo bench --locked --bench scenarios --no-run -q 2>/dev/null
bench=$(ls -t target/release/deps/scenarios-* | grep -v '\.d$' | head -1)
venv=target/bench-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import redis' 2>/dev/null || "$venv/bin/pip" install -q redis
py="$venv/bin/python"

work=$(mktemp -d)
out=bench-out/redis-profile
mkdir -p "$out"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
sock=$work/cg.sock
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$server" --port 0 \
  --unixsocket "$sock" --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
cg=$!
pids+=("$cg")
until redis-cli -s "$sock" ping >/dev/null 2>&1; do sleep 0.2; done
# One dump per measured stretch: zero the counters, run it, dump, keep the dump.
measure() { # measure <name> <command...>
  local name=$1; shift
  callgrind_control -z "$cg" >/dev/null
  "$@" >/dev/null
  callgrind_control -d "$cg" >/dev/null
  sleep 1
  mv "$(ls -t "$work"/cg.out.* | head -1)" "$out/$name.callgrind"
}

"$py" benches/floor.py "$sock" 20
measure floor "$py" benches/floor.py "$sock" "$cycles"
args=("floor=$out/floor.callgrind:$cycles")

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn target/release/leasehold serve --listen "127.0.0.1:$port" --redis-url "redis+unix://$sock" \
  --worker-threads 1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
for kind in "${kinds[@]}"; do
  "$bench" --url "http://127.0.0.1:$port" --redis-url "redis+unix://$sock" redis-cost --kind "$kind" --cycles 20 >/dev/null
  # (redis-cost runs one warm-up cycle of its own before the counted ones.)
  measure "$kind" "$bench" --url "http://127.0.0.1:$port" --redis-url "redis+unix://$sock" redis-cost --kind "$kind" --cycles "$cycles"
  args+=("$kind=$out/$kind.callgrind:$((cycles + 1))")
done
kill "${pids[-1]}"

redis-cli -s "$sock" CONFIG RESETSTAT >/dev/null
measure minimal "$bench" --redis-url "redis+unix://$sock" --url - --seconds 5 redis-minimal --connections 1
pairs=$(( $(redis-cli -s "$sock" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p') / 2 ))
args+=("minimal pair=$out/minimal.callgrind:$pairs")

python3 benches/redis_profile.py "${args[@]}" | tee "$out/profile.md"
echo "dumps and table in $out/ (callgrind_annotate <dump> for everything)" >&2
