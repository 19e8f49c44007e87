"""The Python half of benches/cluster.sh: free port pairs, snapshots of every node's counters
around a loop, CRC16 key slots, the cluster's topology, and the report (cluster.jsonl and,
with cluster_md.py, benches/cluster.md). Usage: cluster_tool.py free|snap|other|keyslots|topology|report ..."""
import datetime, json, math, os, socket, subprocess, sys, time

from cluster_md import write_md

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
