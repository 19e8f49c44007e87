"""benches/cluster.md from a benches/cluster.sh run's figures (cluster_tool.py's `report`):
the loops side by side, every command, the primaries, and the cluster on paper."""


def write_md(md, secs, rounds, summary, ratio, shards, spread, paper, topo, win):
    s, c, c1, lo = (summary[m] for m in ("standalone", "cluster", "cluster1", "standalone_low"))
    L = []
    w = L.append
    md_loops(w, secs, rounds, s, c, c1, lo, ratio, topo)
    md_commands(w, s, c)
    md_shards(w, s, shards, spread)
    md_own_shard(w, c, shards, paper, win)
    md_paper(w, paper)
    open(md, "w").write("\n".join(L))

def md_loops(w, secs, rounds, s, c, c1, lo, ratio, topo):
    """The loops side by side: the settings, the table of every mode, what the ratio means."""
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


def md_commands(w, s, c):
    """Every command per cycle, both sides."""
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


def md_shards(w, s, shards, spread):
    """The names over the primaries, and each primary during the cluster loop."""
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


def md_own_shard(w, c, shards, paper, win):
    """What the `{leasehold/}` primary ran beside the others, and its upkeep."""
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


def md_paper(w, paper):
    """On paper: the primaries, cores and traffic for 100k and 1M cycles/s."""
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
