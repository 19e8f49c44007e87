#!/usr/bin/env bash
# The container image's binary, measured without Docker (no engine on the benchmark machine):
# the release binary's size before and after the Dockerfile's `objcopy --strip-all`, and how
# long the stripped one takes from exec to answering /healthz and /readyz, against a Redis of
# its own on a Unix socket (as on Kubernetes, where Redis runs elsewhere) and with the
# embedded redis-server (as `docker run` does), 7 starts each. Writes benches/image.md
# (BENCHMARKS.md takes it in on the next benches/run.sh report).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin leasehold
work=$(mktemp -d)
redis_pid=""
trap '[ -n "$redis_pid" ] && kill "$redis_pid"; rm -rf "$work"' EXIT
objcopy --strip-all target/release/leasehold "$work/leasehold"
redis-server --port 0 --unixsocket "$work/redis.sock" --save '' --appendonly no >/dev/null &
redis_pid=$!
python3 - "$work" "$(stat -c %s target/release/leasehold)" <<'PY' > benches/image.md
import os, statistics, subprocess, sys, tempfile, time, urllib.request
work, unstripped = sys.argv[1], int(sys.argv[2])
binary = os.path.join(work, "leasehold")
sock = os.path.join(work, "redis.sock")
while not os.path.exists(sock):
    time.sleep(0.01)

def up(path):
    try:
        return urllib.request.urlopen("http://127.0.0.1:18099" + path, timeout=0.5).status == 200
    except Exception:
        return False

def starts(extra):
    healthz, readyz = [], []
    for _ in range(7):
        data = tempfile.mkdtemp(dir=work)
        os.chmod(data, 0o700)
        t0 = time.monotonic()
        p = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:18099", "--data-dir", data]
                             + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not up("/healthz"):
            time.sleep(0.002)
        healthz.append((time.monotonic() - t0) * 1000)
        while not up("/readyz"):
            time.sleep(0.002)
        readyz.append((time.monotonic() - t0) * 1000)
        p.terminate()
        p.wait()
    return "%.0f ms (%.0f–%.0f) | %.0f ms (%.0f–%.0f)" % (
        statistics.median(healthz), min(healthz), max(healthz),
        statistics.median(readyz), min(readyz), max(readyz))

mb = lambda b: "%.1f MB" % (b / 1e6)
print("## The image (benches/image.sh)\n")
print("The Dockerfile's binary, measured without Docker (this machine has no engine, so the "
      "image itself could not be built or its size and start measured here): the release build "
      "keeps line tables for the benchmarks' profiles, and the image strips them "
      "(`objcopy --strip-all`). Start: from exec to the first 200 of each probe, median of 7 "
      "starts (range).\n")
print("| binary | size |\n|---|---|")
print(f"| release (line tables) | {mb(unstripped)} |")
print(f"| stripped, as in the image | {mb(os.path.getsize(binary))} |\n")
print("| Redis | `/healthz` 200 | `/readyz` 200 |\n|---|---|---|")
print(f"| its own, on a Unix socket (`--redis-url`, as on Kubernetes) | {starts(['--redis-url', 'redis+unix://' + sock])} |")
print(f"| embedded redis-server (as `docker run`) | {starts([])} |\n")
print("The runtime image adds Debian's bookworm-slim base and its `redis-server` package "
      "(with `redis-tools`, jemalloc and lzf: about 7 MB installed, by apt's Installed-Size) "
      "to the stripped binary.")
PY
cat benches/image.md
