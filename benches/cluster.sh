#!/usr/bin/env bash
# What Redis Cluster mode costs Redis per lock cycle against one standalone Redis, and how the
# load spreads over the shards, in one run on this machine: a Redis Cluster of 3 primaries and
# no replicas (so that no replica acknowledgement, WAIT, weighs on either side: every Leasehold
# here runs `--min-replica-acks 0` and has no replica to wait for), one standalone
# redis-server and, for the diagnosis, a cluster of 1 primary holding every slot; all on
# loopback with Debian's redis-server and the same persistence settings (appendonly no,
# save ""). One Leasehold instance at a time on each (`--redis-cluster` / `--redis-url`,
# `--worker-threads 1` as in BENCHMARKS.md: Redis shares these cores), started on emptied
# Redis for each loop. The workload: the uncontended acquire + release loop at 16
# connections spread over 10,000 names (`u-0` .. `u-9999`, each connection cycling through
# its share), for the given seconds, against the standalone Redis and the 3-primary cluster,
# and two diagnostic loops: the 1-primary cluster (cluster mode with one Redis process taking
# every call) and the standalone Redis at 5 connections (about what each of the 3 primaries
# is asked at once). All four in rounds (2 by default), each in the reverse order of the one
# before (ABBA), so that a drift of this shared machine weighs on every mode alike; a figure
# is the rounds' together.
#
# Around each loop it reads every Redis's INFO (cpu, stats, commandstats, keyspace), its main
# thread's wake-ups (voluntary context switches, /proc), the Leasehold process's CPU time and
# the whole machine's; a loop during which other processes took more than 0.3 of a core is run
# again (at most 3 times; the least disturbed counts). It reports per cycle: Redis CPU (summed
# over the primaries), FCALL time and every command's calls and time (INFO commandstats),
# wake-ups, bytes to and from Redis, Leasehold CPU; cluster / standalone; how the 10,000 names
# spread over the primaries (their slots by CRC16, checked against CLUSTER KEYSLOT); keys, CPU
# and cycles per primary; and what that means on paper for 100k and 1M cycles/s. Writes
# benches/cluster.md (BENCHMARKS.md takes it in on the next benches/run.sh report) and
# bench-out/cluster.jsonl.
#
# Usage: benches/cluster.sh [seconds-per-loop] [rounds]   (default 20 and 2; about 3 minutes
#   after the build)
#   CARGO_TARGET_DIR is honoured. Stops everything it started on exit, Ctrl-C or error.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
rounds=${2:-2}
connections=16
low_connections=5
names=10000
out="bench-out"
mkdir -p "$out"
target=${CARGO_TARGET_DIR:-target}
.ci/ensure-packages redis-server redis-tools curl
nice -n 10 cargo build --release --locked -q
# The scenarios' binary of this checkout, as Cargo names it (not the newest file in deps/,
# which another checkout sharing the target directory may have written).
bench=$(nice -n 10 cargo bench --locked --bench scenarios --no-run --message-format=json -q \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "scenarios" and m.get("executable"):
        print(m["executable"])')
[ -x "$bench" ] || { echo "no scenarios binary" >&2; exit 1; }

work=$(mktemp -d -t leasehold-cluster-bench.XXXXXX)
pids=()
leasehold=""
cleanup() {
  trap - EXIT INT TERM
  for pid in $leasehold "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in $leasehold "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The Python half: ports, snapshots of the counters, slots, and the report.
cat > "$work/cluster.py" <<'PY'
import datetime, json, math, os, socket, subprocess, sys, time

HZ = os.sysconf("SC_CLK_TCK")
# A loop during which other processes took more than this many cores is run again.
DISTURBED = 0.3

def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout

def fields(text):
    out = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition(":")
        if sep:
            out[k] = v
    return out

def node(port):
    """One Redis's counters so far."""
    text = cli(port, "info", "server", "cpu", "stats", "commandstats", "keyspace")
    f = fields(text)
    cmds = {}
    for k, v in f.items():
        if k.startswith("cmdstat_"):
            kv = dict(x.split("=", 1) for x in v.split(","))
            cmds[k[len("cmdstat_"):]] = [int(kv["calls"]), int(kv["usec"])]
    keys = 0
    if "db0" in f:
        keys = int(dict(x.split("=", 1) for x in f["db0"].split(","))["keys"])
    pid = int(f["process_id"])
    status = fields(open(f"/proc/{pid}/status").read())
    return {"cpu_s": float(f["used_cpu_user"]) + float(f["used_cpu_sys"]), "cmds": cmds,
            "reads": int(f["total_reads_processed"]), "net_in": int(f["total_net_input_bytes"]),
            "net_out": int(f["total_net_output_bytes"]), "keys": keys,
            "wakeups": int(status["voluntary_ctxt_switches"])}

def proc_cpu(pid):
    rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / HZ

def machine_busy():
    """Seconds of CPU the whole machine spent so far, all cores (not idle, not iowait)."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / HZ

def snap(label, pid, ports):
    print(json.dumps({"snap": label, "t": time.time(), "leasehold_cpu_s": proc_cpu(pid),
                      "machine_busy_s": machine_busy(), "nodes": {p: node(p) for p in ports}}))

def delta(before, after):
    nodes = {}
    for port, a in after["nodes"].items():
        b = before["nodes"][port]
        cmds = {}
        for name, (calls, usec) in a["cmds"].items():
            c0, u0 = b["cmds"].get(name, [0, 0])
            if calls - c0:
                cmds[name] = [calls - c0, usec - u0]
        nodes[port] = {k: a[k] - b[k] for k in ("cpu_s", "reads", "net_in", "net_out", "wakeups")}
        nodes[port]["cmds"] = cmds
        nodes[port]["keys"] = a["keys"]
    return {"wall_s": after["t"] - before["t"], "nodes": nodes,
            "leasehold_cpu_s": after["leasehold_cpu_s"] - before["leasehold_cpu_s"],
            "machine_busy_s": after["machine_busy_s"] - before["machine_busy_s"]}

def load_attempt(work, label):
    snaps = {}
    for line in open(f"{work}/snaps.jsonl"):
        s = json.loads(line)
        snaps[s["snap"]] = s
    loop = json.load(open(f"{work}/loop-{label}.json"))
    d = delta(snaps[f"{label}-before"], snaps[f"{label}-after"])
    client_s = loop["client_cpu_us_per_request"] * 2 * loop["cycles"] / 1e6
    ours = sum(n["cpu_s"] for n in d["nodes"].values()) + d["leasehold_cpu_s"] + client_s
    d["other_cores"] = max(0.0, d["machine_busy_s"] - ours) / d["wall_s"]
    return loop, d

def pool(pairs):
    """The rounds of one mode as one loop: counts and times summed (so per-cycle figures are
    the rounds' together), latency percentiles averaged, keys as after the last round."""
    loops = [l for l, _ in pairs]
    cycles = sum(l["cycles"] for l in loops)
    seconds = sum(l["seconds"] for l in loops)
    mean = lambda f: sum(f(l) for l in loops) / len(loops)
    pct = lambda key: {q: mean(lambda l: l[key][q]) for q in ("p50", "p99", "p999")}
    loop = {"connections": loops[0]["connections"], "names": loops[0]["names"],
            "cycles": cycles, "seconds": seconds, "cycles_per_s": cycles / seconds,
            "acquire_ms": pct("acquire_ms"), "release_ms": pct("release_ms"),
            "client_cpu_us_per_request":
                sum(l["client_cpu_us_per_request"] * l["cycles"] for l in loops) / cycles,
            "cycles_by_name": [sum(x) for x in zip(*(l["cycles_by_name"] for l in loops))]}
    nodes, rounds = {}, []
    for l, d in pairs:
        for port, n in d["nodes"].items():
            p = nodes.setdefault(port, {"cpu_s": 0.0, "reads": 0, "net_in": 0, "net_out": 0,
                                        "wakeups": 0, "cmds": {}})
            for k in ("cpu_s", "reads", "net_in", "net_out", "wakeups"):
                p[k] += n[k]
            for name, (c, u) in n["cmds"].items():
                x = p["cmds"].setdefault(name, [0, 0])
                x[0] += c
                x[1] += u
            p["keys"] = n["keys"]
        rounds.append({"cycles_per_s": l["cycles_per_s"], "other_cores": d["other_cores"],
                       "redis_cpu_us_per_cycle":
                           sum(n["cpu_s"] for n in d["nodes"].values()) * 1e6 / l["cycles"],
                       "leasehold_cpu_us_per_cycle": d["leasehold_cpu_s"] * 1e6 / l["cycles"]})
    d = {"wall_s": sum(d["wall_s"] for _, d in pairs), "nodes": nodes,
         "leasehold_cpu_s": sum(d["leasehold_cpu_s"] for _, d in pairs),
         "other_cores": max(r["other_cores"] for r in rounds), "rounds": rounds}
    return loop, d

def crc16(data):
    """CRC16-XMODEM (poly 0x1021, init 0), Redis Cluster's key hash."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc

def keyslot(key):
    s = key.find("{")
    if s >= 0:
        e = key.find("}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key.encode()) % 16384

def primaries(port):
    """port -> [(first slot, last slot)], from CLUSTER NODES."""
    out = {}
    for line in cli(port, "cluster", "nodes").splitlines():
        f = line.split()
        if "master" not in f[2]:
            continue
        p = int(f[1].split("@")[0].rsplit(":", 1)[1])
        ranges = []
        for r in f[8:]:
            if not r.startswith("["):  # not a slot being imported or migrated
                a, _, b = r.partition("-")
                ranges.append((int(a), int(b or a)))
        out[p] = ranges
    return out

def owner_of(slot, prim):
    for p, ranges in prim.items():
        if any(a <= slot <= b for a, b in ranges):
            return p
    raise SystemExit(f"slot {slot} has no primary")

def summarize(mode, loop, d):
    cycles = loop["cycles"]
    nodes = d["nodes"].values()
    cmds = {}
    for n in nodes:
        for name, (calls, usec) in n["cmds"].items():
            c = cmds.setdefault(name, [0, 0])
            c[0] += calls
            c[1] += usec
    total = lambda k: sum(n[k] for n in nodes)
    fcall = sum(cmds.get(k, [0, 0])[1] for k in ("fcall", "fcall_ro"))
    calls = sum(c for c, _ in cmds.values())
    return {
        "mode": mode, "connections": loop["connections"], "names": loop["names"],
        "seconds": loop["seconds"], "cycles": cycles, "cycles_per_s": loop["cycles_per_s"],
        "acquire_ms": loop["acquire_ms"], "release_ms": loop["release_ms"],
        "client_cpu_us_per_request": loop["client_cpu_us_per_request"],
        "other_cores": d["other_cores"], "rounds": d["rounds"],
        "redis_cpu_us_per_cycle": total("cpu_s") * 1e6 / cycles,
        "fcall_us_per_cycle": fcall / cycles,
        "outside_fcall_us_per_cycle": (total("cpu_s") * 1e6 - fcall) / cycles,
        "wakeups_per_cycle": total("wakeups") / cycles,
        "calls_per_read": calls / max(total("reads"), 1),
        "redis_bytes_per_cycle": (total("net_in") + total("net_out")) / cycles,
        "leasehold_cpu_us_per_cycle": d["leasehold_cpu_s"] * 1e6 / cycles,
        "keys_after": total("keys"),
        "commands": {k: {"calls_per_cycle": c / cycles, "us_per_cycle": u / cycles, "calls": c}
                     for k, (c, u) in sorted(cmds.items())},
    }

def report(work, jsonl, md, secs, chosen):
    labels = {}
    for x in chosen.split(","):
        mode, label = x.split("=", 1)
        labels.setdefault(mode, []).append(label)
    runs = {m: pool([load_attempt(work, label) for label in ls]) for m, ls in labels.items()}
    rounds = len(labels["cluster"])
    summary = {m: summarize(m, loop, d) for m, (loop, d) in runs.items()}
    topo = json.load(open(f"{work}/topology.json"))
    s, c = summary["standalone"], summary["cluster"]
    keys = ("redis_cpu_us_per_cycle", "fcall_us_per_cycle", "outside_fcall_us_per_cycle",
            "wakeups_per_cycle", "redis_bytes_per_cycle", "leasehold_cpu_us_per_cycle")
    ratio = {k: c[k] / s[k] for k in keys}
    # The names over the 3 primaries, and each primary during the cluster loop.
    prim = {int(k): v for k, v in topo["primaries"].items()}
    own_port = owner_of(keyslot("{leasehold/}:events:recent"), prim)
    loop, d = runs["cluster"]
    by_name = loop["cycles_by_name"]
    per = {p: {"names": 0, "cycles": 0} for p in prim}
    for j, n in enumerate(by_name):
        p = owner_of(keyslot(f"u-{j}"), prim)
        per[p]["names"] += 1
        per[p]["cycles"] += n
    shards = []
    for p in sorted(prim):
        nd = d["nodes"][str(p)]
        shards.append({
            "shard": f"127.0.0.1:{p}", "slots": sum(b - a + 1 for a, b in prim[p]),
            "own_data": p == own_port, "names": per[p]["names"], "keys": nd["keys"],
            "cycles": per[p]["cycles"], "cycles_per_s": per[p]["cycles"] / loop["seconds"],
            "redis_cpu_s": nd["cpu_s"], "redis_cpu_share": nd["cpu_s"] / d["wall_s"],
            "redis_cpu_us_per_cycle": nd["cpu_s"] * 1e6 / max(per[p]["cycles"], 1),
            "wakeups_per_cycle": nd["wakeups"] / max(per[p]["cycles"], 1),
            "commands": {k: {"calls": cl, "usec": u} for k, (cl, u) in sorted(nd["cmds"].items())},
        })
    counts = [x["names"] for x in shards]
    cpus = [x["redis_cpu_s"] for x in shards]
    own = next(x for x in shards if x["own_data"])
    others = [x for x in shards if not x["own_data"]]
    hottest = max(shards, key=lambda x: x["redis_cpu_s"])
    spread = {"names": len(by_name), "names_per_primary": {x["shard"]: x["names"] for x in shards},
              "busiest_over_quietest": max(counts) / min(counts),
              "keys_per_primary": {x["shard"]: x["keys"] for x in shards},
              "hottest": hottest["shard"], "hottest_over_coolest_cpu": max(cpus) / min(cpus),
              "own_data_shard": own["shard"], "keyslot_checked": topo["keyslot_checked"]}
    # On paper. The {leasehold/} primary's extra, per cycle of the whole cluster: its CPU
    # beyond what its own names' cycles cost the other primaries per cycle (measured with each
    # primary lightly loaded, so high); a busy primary's cost per cycle: the 1-primary
    # cluster's (cluster mode, one Redis taking every call; it holds the {leasehold/} work too,
    # so this is high as well).
    lock_low = sum(x["redis_cpu_s"] for x in others) * 1e6 / max(sum(x["cycles"] for x in others), 1)
    extra = (own["redis_cpu_s"] * 1e6 - own["cycles"] * lock_low) / c["cycles"]
    busy = summary["cluster1"]["redis_cpu_us_per_cycle"]
    lock_busy = busy - extra
    paper = {"busy_primary_us_per_cycle": busy, "own_shard_extra_us_per_cycle": extra,
             "lock_us_per_cycle_busy": lock_busy, "lock_us_per_cycle_low": lock_low,
             "leasehold_cpu_us_per_cycle": c["leasehold_cpu_us_per_cycle"],
             "event_bytes_per_cycle": topo["event_bytes_per_cycle"],
             "events_sampled": topo["events_sampled"], "event_types": topo["event_types"],
             "redis_bytes_per_cycle": c["redis_bytes_per_cycle"]}
    for t in (100_000, 1_000_000):
        n = math.ceil(t * lock_busy / 1e6)
        fits = t * extra < 1e6
        if fits:
            while t * (lock_busy / n + extra) > 1e6:
                n += 1
        paper[f"primaries_for_{t}"] = n if fits else None
        paper[f"own_shard_cores_for_extra_at_{t}"] = t * extra / 1e6
        paper[f"leasehold_cores_at_{t}"] = t * c["leasehold_cpu_us_per_cycle"] / 1e6
        paper[f"broadcast_mb_per_s_per_primary_at_{t}"] = t * topo["event_bytes_per_cycle"] / 1e6
        # The publishing primary sends each batch to every other node over the cluster bus.
        paper[f"bus_out_mb_per_s_at_{t}"] = (n - 1) * t * topo["event_bytes_per_cycle"] / 1e6 if fits else None
        paper[f"redis_traffic_gbit_per_s_at_{t}"] = t * c["redis_bytes_per_cycle"] * 8 / 1e9
    paper["own_shard_ceiling_cycles_per_s"] = 1e6 / extra if extra > 0 else None
    with open(jsonl, "w") as f:
        for r in summary.values():
            f.write(json.dumps(r) + "\n")
        f.write(json.dumps({"cluster_over_standalone": ratio}) + "\n")
        f.write(json.dumps({"spread": spread}) + "\n")
        for x in shards:
            f.write(json.dumps(x) + "\n")
        f.write(json.dumps({"paper": paper}) + "\n")
    write_md(md, secs, rounds, summary, ratio, shards, spread, paper, topo, d["wall_s"])

def write_md(md, secs, rounds, summary, ratio, shards, spread, paper, topo, win):
    s, c, c1, lo = (summary[m] for m in ("standalone", "cluster", "cluster1", "standalone_low"))
    L = []
    w = L.append
    w("## Redis Cluster (benches/cluster.sh)\n")
    w(f"One run of `benches/cluster.sh {secs} {rounds}` on {topo['date']} ({topo['cpus']} cores, "
      f"{topo['redis']}): a Redis Cluster of 3 primaries and no replicas, so that no replica "
      "acknowledgement (WAIT) weighs on either side, and one standalone redis-server, all on "
      "loopback with the same persistence settings (`appendonly no`, `save \"\"`); one Leasehold "
      "instance on each in turn (`--redis-cluster` / `--redis-url`, `--min-replica-acks 0`, "
      "`--worker-threads 1`), on emptied Redis. The same loop against each: uncontended "
      f"acquire + release at {s['connections']} connections spread over {s['names']:,} names "
      f"(each connection cycling through its share), {secs} s, in {rounds} rounds (the modes in "
      "turn, each round in the reverse order of the one before, so that a drift of the machine "
      "weighs on every mode alike; a figure is the rounds' together). Redis CPU is `INFO cpu` (user + "
      "sys) over the loop, summed over the primaries; FCALL time is `INFO commandstats` (time "
      "inside the calls, the commands the functions call included); wake-ups are the Redis main "
      "threads' voluntary context switches; bytes are `total_net_input_bytes` + "
      "`total_net_output_bytes`; Leasehold CPU is the server process's. Redis, Leasehold and the "
      "load generator share the machine's cores. Two diagnostic loops follow: a cluster of 1 "
      "primary holding every slot, and the standalone Redis at "
      f"{lo['connections']} connections.\n")
    w(f"| | standalone | cluster, 3 primaries | cluster / standalone | cluster, 1 primary | standalone, {lo['connections']} connections |")
    w("|---|---|---|---|---|---|")
    def row(label, key, fmt, ratio_cell=True):
        cell = f"{ratio[key]:.2f}×" if ratio_cell and key in ratio else ""
        w(f"| {label} | {fmt(s[key])} | {fmt(c[key])} | {cell} | {fmt(c1[key])} | {fmt(lo[key])} |")
    row("cycles/s", "cycles_per_s", lambda v: f"{v:,.0f}", False)
    p = lambda r: f"{r['acquire_ms']['p50']:.2f} / {r['acquire_ms']['p99']:.2f} ms"
    w(f"| acquire p50 / p99 | {p(s)} | {p(c)} | | {p(c1)} | {p(lo)} |")
    row("**Redis CPU per cycle**", "redis_cpu_us_per_cycle", lambda v: f"**{v:.1f} µs**")
    each = lambda r: " / ".join(f"{x['redis_cpu_us_per_cycle']:.1f}" for x in r["rounds"]) + " µs"
    w(f"| Redis CPU per cycle, each round | {each(s)} | {each(c)} | | {each(c1)} | {each(lo)} |")
    row("FCALL time per cycle", "fcall_us_per_cycle", lambda v: f"{v:.1f} µs")
    row("Redis CPU outside FCALL per cycle", "outside_fcall_us_per_cycle", lambda v: f"{v:.1f} µs")
    row("Redis wake-ups per cycle", "wakeups_per_cycle", lambda v: f"{v:.2f}")
    row("commands per socket read", "calls_per_read", lambda v: f"{v:.1f}", False)
    row("bytes to and from Redis per cycle", "redis_bytes_per_cycle", lambda v: f"{v:,.0f}")
    row("Leasehold CPU per cycle", "leasehold_cpu_us_per_cycle", lambda v: f"{v:.1f} µs")
    row("other processes' CPU (the most in a round)", "other_cores", lambda v: f"{v:.2f} cores", False)
    w("")
    goal = "within" if ratio["redis_cpu_us_per_cycle"] <= 1.2 else "**above**"
    c1r = c1["redis_cpu_us_per_cycle"] / s["redis_cpu_us_per_cycle"]
    lor = lo["redis_cpu_us_per_cycle"] / s["redis_cpu_us_per_cycle"]
    text = (f"Redis CPU per cycle, cluster against standalone: **{ratio['redis_cpu_us_per_cycle']:.2f}×**, "
            f"{goal} the goal of 1.2×; FCALL time per cycle {ratio['fcall_us_per_cycle']:.2f}×. ")
    if ratio["redis_cpu_us_per_cycle"] > 1.2 and c1r <= 1.2 and lor >= 1.2:
        text += (
            "No command explains it (the table below: every call costs more, inside and around it, "
            "on every primary alike). What does: each of the 3 primaries served a third of the "
            f"calls, so fewer calls per wake-up ({c['calls_per_read']:.1f} commands per socket "
            f"read against {s['calls_per_read']:.1f}; {c['wakeups_per_cycle']:.2f} wake-ups per "
            f"cycle against {s['wakeups_per_cycle']:.2f}), and a Redis that sleeps between calls "
            "pays for it outside the calls (the wake-ups, a read and a write for fewer commands) "
            "and inside them too (FCALL time per call rose as well; most likely caches gone cold "
            "while the server and the load generator had the core). The diagnostic loops show it: the "
            "1-primary cluster (cluster mode throughout: `cluster-enabled`, Leasehold's cluster "
            "client, the `{leasehold/}` work, one Redis taking every call) costs "
            f"**{c1r:.2f}×** the standalone Redis per cycle, and the standalone Redis asked by "
            f"{lo['connections']} connections (about what each primary was asked at once; "
            f"{lo['wakeups_per_cycle']:.2f} wake-ups per cycle) **{lor:.2f}×** what it costs at "
            f"{s['connections']}. Cluster mode itself stays within the goal; the 3-primary ratio "
            "is the price of a light load spread thin, and shrinks as each primary gets busier, "
            "which is when a cluster is needed.\n")
    else:
        text += (f"The diagnostic loops: the 1-primary cluster costs {c1r:.2f}× the standalone Redis "
                 f"per cycle; the standalone Redis at {lo['connections']} connections {lor:.2f}× "
                 f"what it costs at {s['connections']}.\n")
    w(text)
    # Every command, per cycle, both sides.
    w("Commands per cycle, summed over the primaries (calls, and µs inside the command; a "
      "command a function calls counts both under its own name and in FCALL's time; Redisson's "
      "unlock message goes out from the release function with PUBLISH on a standalone Redis, "
      "with SPUBLISH in a cluster):\n")
    w("| command | standalone calls | µs | cluster calls | µs | difference µs |")
    w("|---|---|---|---|---|---|")
    names = sorted(set(s["commands"]) | set(c["commands"]),
                   key=lambda k: -(c["commands"].get(k, {}).get("us_per_cycle", 0)
                                   + s["commands"].get(k, {}).get("us_per_cycle", 0)))
    zero = {"calls_per_cycle": 0, "us_per_cycle": 0}
    for k in names:
        a, b = s["commands"].get(k, zero), c["commands"].get(k, zero)
        if a["us_per_cycle"] + b["us_per_cycle"] < 0.005:
            continue
        w(f"| {k.upper()} | {a['calls_per_cycle']:.4f} | {a['us_per_cycle']:.2f} | "
          f"{b['calls_per_cycle']:.4f} | {b['us_per_cycle']:.2f} | {b['us_per_cycle'] - a['us_per_cycle']:+.2f} |")
    w(f"| (Redis CPU outside FCALL) | | {s['outside_fcall_us_per_cycle']:.2f} | | "
      f"{c['outside_fcall_us_per_cycle']:.2f} | {c['outside_fcall_us_per_cycle'] - s['outside_fcall_us_per_cycle']:+.2f} |")
    w("")
    # The shards.
    w(f"The {spread['names']:,} names over the 3 primaries (slots by CRC16, checked against "
      f"`CLUSTER KEYSLOT` for {spread['keyslot_checked']} keys), and each primary during the "
      "cluster loop (keys: `INFO keyspace`, as `DBSIZE`, right after it):\n")
    w("| primary | slots | names | keys | cycles/s on its names | Redis CPU (share of a core) | Redis CPU per cycle on its names | wake-ups per cycle |")
    w("|---|---|---|---|---|---|---|---|")
    for x in shards:
        tag = " (`{leasehold/}`)" if x["own_data"] else ""
        w(f"| {x['shard']}{tag} | {x['slots']:,} | {x['names']:,} | {x['keys']:,} | "
          f"{x['cycles_per_s']:,.0f} | {100 * x['redis_cpu_share']:.1f}% | "
          f"{x['redis_cpu_us_per_cycle']:.1f} µs | {x['wakeups_per_cycle']:.2f} |")
    w("")
    w(f"Names: busiest primary over quietest **{spread['busiest_over_quietest']:.3f}** (goal ≤ 1.3). "
      f"Hottest primary {spread['hottest']}, {spread['hottest_over_coolest_cpu']:.2f}× the coolest's "
      f"Redis CPU. Standalone keys after its loop: {s['keys_after']:,}.\n")
    own = next(x for x in shards if x["own_data"])
    others = [x for x in shards if not x["own_data"]]
    w("What the `{leasehold/}` primary ran beside the others (per second of the cluster loop; "
      "the other two: their mean):\n")
    w("| command | `{leasehold/}` primary calls/s | µs/s | other primaries calls/s | µs/s |")
    w("|---|---|---|---|---|")
    ks = sorted(set(own["commands"]) | {k for x in others for k in x["commands"]},
                key=lambda k: -own["commands"].get(k, {"usec": 0})["usec"])
    polls = ("info", "ping", "cluster|slots", "cluster|nodes", "cluster|info", "cluster|myid")
    for k in ks:
        o = own["commands"].get(k, {"calls": 0, "usec": 0})
        mc = sum(x["commands"].get(k, {"calls": 0})["calls"] for x in others) / len(others)
        mu = sum(x["commands"].get(k, {"usec": 0})["usec"] for x in others) / len(others)
        if k not in polls and max(o["usec"], mu) < 10 * win and max(o["calls"], mc) < win:
            continue
        w(f"| {k.upper()} | {o['calls'] / win:,.1f} | {o['usec'] / win:,.0f} | {mc / win:,.1f} | {mu / win:,.0f} |")
    w("")
    poll_us = sum(x["commands"].get(k, {"usec": 0})["usec"] for x in shards for k in polls) / len(shards) / win
    extra = paper["own_shard_extra_us_per_cycle"]
    total_cpu = sum(x["redis_cpu_s"] for x in shards) * 1e6
    w(f"Cluster mode's own upkeep is small beside the spread: the topology reads (`CLUSTER SLOTS`) "
      f"and `INFO` polls took {poll_us:,.0f} µs per second on each primary. The `{{leasehold/}}` "
      f"primary's extra (the events backlog's XADD and the PUBLISH of each batch, which the "
      "cluster bus copies to every primary; the names index's ZADD and HDEL) came to "
      f"{extra:.1f} µs per cycle of the whole cluster, {100 * extra * c['cycles'] / total_cpu:.0f}% "
      "of its Redis CPU. In this loop every name entered the names index once; an instance "
      "writes a name at most once a minute, so names in constant use cost it less than here, "
      "names used once a ZADD each.\n")
    w("What would bring the cluster's cost per cycle down, beyond load itself: nothing in the "
      "lock calls (the 1-primary figure). For the `{leasehold/}` primary: the events published "
      "with SPUBLISH on a channel in its own slot (sharded pub/sub: the cluster bus then carries "
      "each batch to that shard's replicas only, not to every node); the names index's writes "
      "batched as the events are (each is a call of its own on that primary, where a standalone "
      "Redis takes it in the acquire's pipeline); and, past a few hundred thousand cycles/s, an "
      "events backlog and a names index per primary, at the price of event ids ordered per "
      "primary rather than across the cluster.\n")
    ceiling = paper["own_shard_ceiling_cycles_per_s"]
    w("On paper, with one Redis core per primary, fully used: a busy primary spends "
      f"**{paper['busy_primary_us_per_cycle']:.1f} µs** of CPU per cycle (the 1-primary "
      "cluster's figure, which holds the `{leasehold/}` work too), and the `{leasehold/}` "
      f"primary **{paper['own_shard_extra_us_per_cycle']:.1f} µs** more per cycle of the whole "
      "cluster (its CPU beyond what its names' cycles cost the other two; measured with each "
      "primary lightly loaded, so high), which more primaries do not spread"
      + (f": at that cost it alone fills that primary's core at about {ceiling:,.0f} cycles/s." if ceiling else ".")
      + f" Leasehold spent {paper['leasehold_cpu_us_per_cycle']:.1f} µs of CPU per cycle; a "
      f"cycle moved {paper['redis_bytes_per_cycle']:,.0f} bytes to and from Redis, and its "
      f"events {paper['event_bytes_per_cycle']:,.0f} bytes as published, which the `{{leasehold/}}` "
      "primary sends over the cluster bus to every other node (replicas too) with each "
      "PUBLISH.\n")
    w("| cycles/s | primaries | `{leasehold/}` extra | Leasehold cores | Redis traffic | events into each node | events out of the `{leasehold/}` primary (no replicas) |")
    w("|---|---|---|---|---|---|---|")
    for t in (100_000, 1_000_000):
        n = paper[f"primaries_for_{t}"]
        bus = paper[f"bus_out_mb_per_s_at_{t}"]
        w(f"| {t:,} | {n if n is not None else '**none**: the extra alone is more than a core'} | "
          f"{paper[f'own_shard_cores_for_extra_at_{t}']:.2f} cores | "
          f"{paper[f'leasehold_cores_at_{t}']:,.0f} | {paper[f'redis_traffic_gbit_per_s_at_{t}']:.1f} Gbit/s | "
          f"{paper[f'broadcast_mb_per_s_per_primary_at_{t}']:,.0f} MB/s | "
          + (f"{bus:,.0f} MB/s |" if bus is not None else "– |"))
    w("")
    open(md, "w").write("\n".join(L))

def free(n):
    """n loopback ports, each with port + 10000 free too, none another's bus port."""
    import random
    taken, held = set(), []
    while len(taken) < n:
        p = random.randint(20000, 30000)
        if {p, p + 10000, p - 10000} & taken:
            continue
        ok = True
        for q in (p, p + 10000):
            sk = socket.socket()
            try:
                sk.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            held.append(sk)
        if ok:
            taken.add(p)
    return sorted(taken)

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "free":
        print(" ".join(map(str, free(int(args[0])))))
    elif cmd == "snap":
        snap(args[0], int(args[1]), [int(p) for p in args[2:]])
    elif cmd == "other":
        # The cores other processes took during an attempt; exit 1 if it was disturbed.
        _, d = load_attempt(args[0], args[1])
        print(f"{d['other_cores']:.2f}")
        sys.exit(1 if d["other_cores"] > DISTURBED else 0)
    elif cmd == "keyslots":
        port, keys = int(args[0]), args[1:]
        for k in keys:
            got = int(cli(port, "cluster", "keyslot", k))
            if got != keyslot(k):
                raise SystemExit(f"CLUSTER KEYSLOT {k} = {got}, CRC16 here = {keyslot(k)}")
        print(len(keys))
    elif cmd == "topology":
        port, checked = int(args[0]), int(args[1])
        # The events backlog's bytes per event, from its newest batches; 2 events a cycle.
        raw = subprocess.run(["redis-cli", "-p", str(port), "-c", "--json", "xrevrange",
                              "{leasehold/}:events:recent", "+", "-", "count", "50"],
                             capture_output=True, text=True, check=True).stdout
        # As published: the stored batch with each event's id added (see locks::feed::journal).
        published, types = 0, {}
        for entry, kv in json.loads(raw):
            batch = dict(zip(kv[::2], kv[1::2]))["b"]
            published += len(batch.encode())
            for i, e in enumerate(json.loads(batch)):
                published += len(f'"event_id":"{entry}.{i}",')
                types[e.get("type")] = types.get(e.get("type"), 0) + 1
        events = sum(types.values())
        size = published / max(events, 1)
        version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
        print(json.dumps({"primaries": primaries(port), "keyslot_checked": checked,
            "event_bytes_per_cycle": 2 * size, "events_sampled": events, "event_types": types,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "redis": " ".join(version[:3])}))
    elif cmd == "report":
        report(args[0], args[1], args[2], int(args[3]), args[4])
PY
py() { python3 "$work/cluster.py" "$@"; }

read -r -a ports <<< "$(py free 6)"
cports=("${ports[@]:0:3}")   # the 3-primary cluster
c1port=${ports[3]}           # the 1-primary cluster
sport=${ports[4]}            # standalone
http=${ports[5]}             # Leasehold, one at a time

wait_for() { # what, tries (50 ms each), command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.05; done
  echo "timed out waiting for $what" >&2; exit 1
}
answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }
state_ok() { [[ $(redis-cli -p "$1" cluster info 2>/dev/null) == *cluster_state:ok* ]]; }
ready() { curl -fs -o /dev/null "http://127.0.0.1:$http/readyz"; }

start_redis() { # port, cluster (yes/no)
  local port=$1
  mkdir -p "$work/$port"
  {
    echo "port $port"; echo "bind 127.0.0.1"; echo "dir $work/$port"
    echo "appendonly no"; echo 'save ""'; echo "repl-diskless-sync-delay 0"
    if [ "$2" = yes ]; then
      echo "cluster-enabled yes"; echo "cluster-config-file nodes.conf"
      echo "cluster-announce-ip 127.0.0.1"
    fi
  } > "$work/$port/redis.conf"
  redis-server "$work/$port/redis.conf" > "$work/$port/log" 2>&1 &
  pids+=($!)
}
for port in "${cports[@]}" "$c1port"; do start_redis "$port" yes; done
start_redis "$sport" no
for port in "${cports[@]}" "$c1port" "$sport"; do wait_for "redis-server on $port" 200 answers "$port"; done
nodes=("${cports[@]/#/127.0.0.1:}")
seeds=$(IFS=,; echo "${nodes[*]}")
if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes > "$work/create.log" 2>&1; then
  echo "redis-cli --cluster create failed:" >&2; cat "$work/create.log" >&2; exit 1
fi
# redis-cli --cluster create wants 3 primaries at least: the 1-primary cluster by hand.
redis-cli -p "$c1port" cluster addslotsrange 0 16383 > /dev/null
for port in "${cports[@]}" "$c1port"; do wait_for "cluster_state:ok on $port" 400 state_ok "$port"; done

# One loop: empties the Redis, starts a Leasehold on it, runs the loop between two snapshots,
# stops the Leasehold; again when other processes disturbed it (see DISTURBED), at most 3
# times. Adds "mode=label of the attempt that counts" to `chosen`.
run_loop() { # round, mode, connections, redis flag, redis value, redis ports...
  local round=$1 mode=$2 conns=$3 flag=$4 value=$5; shift 5
  local best="" best_other="" attempt other
  for attempt in 1 2 3; do
    local label="$mode-r$round-$attempt"
    for port in "$@"; do redis-cli -p "$port" flushall > /dev/null; done
    RUST_LOG=warn LEASEHOLD_ALLOW_ANONYMOUS=true "$target/release/leasehold" serve \
      --listen "127.0.0.1:$http" "$flag" "$value" --data-dir "$work/leasehold-$label" \
      --min-replica-acks 0 --worker-threads 1 > "$out/cluster-leasehold-$mode.log" 2>&1 &
    leasehold=$!
    wait_for "Leasehold ($mode)" 400 ready
    echo "== round $round, $mode: uncontended, $conns connections over $names names, ${secs} s (attempt $attempt)" >&2
    py snap "$label-before" "$leasehold" "$@" >> "$work/snaps.jsonl"
    "$bench" --url "http://127.0.0.1:$http" --seconds "$secs" \
      uncontended --connections "$conns" --names "$names" > "$work/loop-$label.json"
    py snap "$label-after" "$leasehold" "$@" >> "$work/snaps.jsonl"
    if [ "$mode" = cluster ]; then
      # The cluster's shape, and its events backlog, while the last Leasehold still runs.
      sample=(u-0 u-1 u-42 u-4711 u-9999 "{leasehold/}:events:recent" "{leasehold/}:names")
      checked=$(py keyslots "${cports[0]}" "${sample[@]}")
      py topology "${cports[0]}" "$checked" > "$work/topology.json"
    fi
    kill "$leasehold"; wait "$leasehold" 2>/dev/null || true; leasehold=""
    if other=$(py other "$work" "$label"); then best=$label; break; fi
    echo "   disturbed: other processes took $other cores" >&2
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$other" "$best_other"; then
      best=$label; best_other=$other
    fi
  done
  chosen+=("$mode=$best")
}
mode_loop() { # round, mode
  case $2 in
    standalone) run_loop "$1" standalone "$connections" --redis-url "redis://127.0.0.1:$sport" "$sport" ;;
    cluster) run_loop "$1" cluster "$connections" --redis-cluster "$seeds" "${cports[@]}" ;;
    cluster1) run_loop "$1" cluster1 "$connections" --redis-cluster "127.0.0.1:$c1port" "$c1port" ;;
    standalone_low) run_loop "$1" standalone_low "$low_connections" --redis-url "redis://127.0.0.1:$sport" "$sport" ;;
  esac
}
# Each round in the reverse order of the one before (ABBA), so that a drift of the machine
# (other work, its host) weighs on every mode alike.
modes=(standalone cluster cluster1 standalone_low)
chosen=()
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order=("${modes[@]}"); else order=(); for m in "${modes[@]}"; do order=("$m" "${order[@]}"); done; fi
  for mode in "${order[@]}"; do mode_loop "$round" "$mode"; done
done

py report "$work" "$out/cluster.jsonl" benches/cluster.md "$secs" "$(IFS=,; echo "${chosen[*]}")"
cat benches/cluster.md
