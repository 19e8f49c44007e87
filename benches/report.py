"""Turns bench-out/results.jsonl (one benches/run.sh run) into BENCHMARKS.md: tables with the
machine, the date, the command, and every figure beside its ceiling or peer from the same run.

python3 benches/report.py bench-out/results.jsonl "benches/run.sh 10" > BENCHMARKS.md
"""
import json
import sys


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return rows


def find(rows, **match):
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def ms(v):
    return "–" if v is None else f"{v:.3f}"


def num(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    if a is None or b in (None, 0):
        return "–"
    return f"{a / b:.2f}×"


def pct_of(block, q):
    return None if not block else block.get(q)


def main():
    rows = load(sys.argv[1])
    command = sys.argv[2] if len(sys.argv) > 2 else "benches/run.sh"
    machine = next((r["machine"] for r in rows if "machine" in r), {})
    out = []
    w = out.append
    w("# Benchmarks\n")
    w(f"One run of `{command}` on {machine.get('date', '?')}: {machine.get('cpus', '?')} cores "
      f"({machine.get('cpu', '?')}), {machine.get('memory_gb', '?')} GiB, Linux {machine.get('kernel', '?')}; "
      f"{machine.get('redis', '')}; {machine.get('etcd', '')}; {machine.get('rustc', '')}. "
      "Load generators, Redis, etcd and the server share the same cores, on loopback; every "
      "figure below comes from this one run and is set beside its ceiling or peer from the same "
      "run. Reproduce with `benches/run.sh` (the README's benchmark command).\n")

    # Ceilings.
    ceil = {r["connections"]: r for r in rows if r.get("ceiling") == "redis-benchmark"}

    def pair_rate(c):
        r = ceil.get(c)
        if not r:
            return None
        return 1.0 / (1.0 / r["acquire"]["rps"] + 1.0 / r["release"]["rps"])

    w("## 1. Uncontended acquire + release\n")
    w("Each connection acquires and releases its own lock name in a loop (Rust client, one "
      "HTTP/1.1 keep-alive connection each). Ceiling: `redis-benchmark` running the same "
      "`acquire.lua` and `release.lua` against the same Redis with as many connections; a cycle "
      "costs one of each, so the ceiling is 1/(1/acquire + 1/release).\n")
    w("| connections | cycles/s | ceiling cycles/s | ratio | acquire p50 / p99 / p999 ms | release p50 / p99 / p999 ms | Redis acquire p99 ms |")
    w("|---|---|---|---|---|---|---|")
    for c in (1, 16, 64):
        r = find(rows, scenario="uncontended", connections=c)
        if not r:
            continue
        a, rl = r["acquire_ms"], r["release_ms"]
        w(f"| {c} | {num(r['cycles_per_s'])} | {num(pair_rate(c))} | {ratio(r['cycles_per_s'], pair_rate(c))} | "
          f"{ms(a['p50'])} / {ms(a['p99'])} / {ms(a['p999'])} | {ms(rl['p50'])} / {ms(rl['p99'])} / {ms(rl['p999'])} | "
          f"{ms(ceil.get(c, {}).get('acquire', {}).get('p99'))} |")
    wrk = find(rows, stack="wrk-acquire-release")
    hz = find(rows, stack="http-healthz")
    if wrk:
        cps = wrk["wrk"].get("cycles_per_s")
        w(f"\nWith `wrk` as the load generator (C, lighter than the Rust client on these shared cores), "
          f"64 connections: **{num(cps)} cycles/s** = {ratio(cps, pair_rate(64))} of the ceiling; "
          f"request latency (acquire and release mixed) p50 {ms(wrk['wrk']['p50_ms'])} ms, p99 {ms(wrk['wrk']['p99_ms'])} ms.")
    if hz:
        w(f" A bare HTTP round trip on the same server stack (`GET /healthz`, wrk, 64 connections): "
          f"{num(hz['wrk']['requests_per_s'])} requests/s, p99 {ms(hz['wrk']['p99_ms'])} ms.")
    w("")

    def peer_p50(peer, n, hold=5):
        r = find(rows, peer=peer, scenario="contended", clients=n, hold_ms=hold)
        return pct_of(r and r.get("handoff_ms"), "p50")

    py_p50, et_p50 = peer_p50("python-redis-lock", 16), peer_p50("etcd-lock", 16)
    w("## 2. Contended handoff\n")
    w("N clients compete for one lock with server-side waits (`wait_ms`); each releases as soon as "
      "it is granted, then stands back until another client holds the lock (at most 1 s) before "
      "asking again, the same for every system, so that every handoff is a real transfer to a "
      "waiting client. Handoff = from the 200 of a release to the 201 of the next "
      "holder, as the clients see it, counted only when the lock passes to another client; a "
      "client re-taking the lock it just released is a self-regrant (no handoff, and a sign of "
      "unfairness). FIFO inversions (fair lock) are counted from the server's own `queued` / "
      "`granted` events: a grant that skipped a live waiter queued before it.\n")
    w("### 2a. Throughput under contention (no critical section)\n")
    w("| system | kind | clients | grants/s | handoff p50 ms | handoff p99 ms | self-regrants | FIFO inversions |")
    w("|---|---|---|---|---|---|---|---|")
    for kind in ("reentrant", "fair"):
        for n in (2, 16, 64):
            r = find(rows, scenario="contended", kind=kind, clients=n, hold_ms=0)
            if not r:
                continue
            h = r.get("handoff_ms") or {}
            inv = r.get("fifo_inversions") or {}
            inv_s = str(inv.get("count")) if kind == "fair" else "n/a (not FIFO)"
            w(f"| Leasehold | {kind} | {n} | {num(r['grants_per_s'])} | {ms(h.get('p50'))} | {ms(h.get('p99'))} | {r.get('self_regrants', '–')} | {inv_s} |")
    peers = (("Python `redis` Lock", "python-redis-lock"), ("etcd lock", "etcd-lock"))
    for name, peer in peers:
        for n in (2, 16):
            r = find(rows, peer=peer, scenario="contended", clients=n, hold_ms=0)
            if r:
                h = r.get("handoff_ms") or {}
                w(f"| {name} | – | {n} | {num(r['grants_per_s'])} | {ms(h.get('p50'))} | {ms(h.get('p99'))} | {r.get('self_regrants', '–')} | – |")
    w("")
    w("With no critical section the Python Lock's figures are a race, not a handoff: a waiter "
      "that polls just after the release gets the lock at once, one that just missed it sleeps "
      "its full 0.1 s poll; the median falls on either side. 2b measures the handoff to a waiter "
      "that is really blocked.\n")
    w("### 2b. Handoff to a blocked waiter (5 ms critical section)\n")
    w("Each holder keeps the lock 5 ms, so at every release the other clients are already "
      "waiting (Leasehold: parked server-side; Python: in its polling loop; etcd: queued on its "
      "lock key). Python Lock: `acquire()` with its defaults (blocking, `sleep=0.1`); etcd: "
      "`/v3/lock/lock` through etcd's JSON gateway.\n")
    w("| system | clients | grants/s | handoff p50 ms | handoff p99 ms | Python p50 ÷ this | etcd p50 ÷ this |")
    w("|---|---|---|---|---|---|---|")
    for n in (2, 16):
        pp, ep = peer_p50("python-redis-lock", n), peer_p50("etcd-lock", n)
        entries = [(f"Leasehold {k}", find(rows, scenario="contended", kind=k, clients=n, hold_ms=5)) for k in ("reentrant", "fair")]
        entries += [(name, find(rows, peer=peer, scenario="contended", clients=n, hold_ms=5)) for name, peer in peers]
        for name, r in entries:
            if not r:
                continue
            h = r.get("handoff_ms") or {}
            rp = f"{pp / h['p50']:.1f}×" if pp and h.get("p50") else "–"
            re_ = f"{ep / h['p50']:.1f}×" if ep and h.get("p50") else "–"
            w(f"| {name} | {n} | {num(r['grants_per_s'])} | {ms(h.get('p50'))} | {ms(h.get('p99'))} | {rp} | {re_} |")
    for r in rows:
        if "note" in r:
            w(f"\nNote: {r['note']}: {r['detail']}")
    w("")

    w("## 3. Parked waiters\n")
    parked = [r for r in rows if r.get("scenario") == "parked"]
    p = min(parked, key=lambda r: r["rss_mb_parked"]) if parked else None
    if parked:
        w("10,000 concurrent waiting requests on 100 locks held by others, each on a fresh server; "
          "once all are parked the holders release and every waiter, once granted, releases at "
          "once. Over HTTP/1.1 each waiter has its own connection; over h2c (HTTP/2 without TLS, "
          "prior knowledge) the waiters are streams multiplexed over a few connections.\n")
        w("| measure | " + " | ".join(r["protocol"] + f" ({r['client_connections']:,} client connections)" for r in parked) + " | target |")
        w("|---|" + "---|" * len(parked) + "---|")
        def row(label, f, target):
            w(f"| {label} | " + " | ".join(f(r) for r in parked) + f" | {target} |")
        row("waiters parked (time to park)", lambda r: f"{r['parked']:,} ({r['parking_seconds']:.1f} s)", "10,000")
        row("server RSS idle / parked", lambda r: f"{r['rss_mb_before']:.1f} / {r['rss_mb_parked']:.1f} MB", "< 150 MB")
        row("per parked waiter", lambda r: f"{(r['rss_mb_parked'] - r['rss_mb_before']) * 1024 / max(r['parked'], 1):.1f} KB", "–")
        row("server CPU while they wait (5 s)", lambda r: f"{r['idle_cpu_percent']:.2f} %", "< 2 %")
        row("Redis connections of the server", lambda r: str((r.get('redis') or {}).get('connections', '–')), "≤ 2")
        row("subscriptions (patterns / channels)", lambda r: f"{(r.get('redis') or {}).get('pattern_subscriptions', '–')} / {(r.get('redis') or {}).get('channel_subscriptions', '–')}", "–")
        row("release all → every waiter answered", lambda r: f"{r['drain_seconds']:.2f} s" if r.get('drain_seconds') is not None else "–", "–")
        row("failed waiters", lambda r: str(r['failures']), "0")
    w("")

    w("## 4. Read-heavy read/write lock\n")
    w("64 readers and 2 writers on one lock, each acquiring and releasing in a loop.\n")
    w("| policy | reads/s | writer grants | writer wait p50 ms | writer wait p99 ms |")
    w("|---|---|---|---|---|")
    for policy in ("readers_first", "fifo"):
        r = find(rows, scenario="read_heavy", policy=policy)
        if r:
            ww = r.get("writer_wait_ms") or {}
            w(f"| {policy} | {num(r['reads_per_s'])} | {r['writes']} | {ms(ww.get('p50'))} | {ms(ww.get('p99'))} |")
    w("")

    w("## 5. Dashboard\n")
    d = find(rows, scenario="dashboard")
    if d and "render_ms" in d:
        rm = d["render_ms"]
        w(f"Overview page (`GET /`) with {d['locks']:,} live locks: p50 {ms(rm['p50'])} ms, p99 {ms(rm['p99'])} ms "
          f"({d['page_bytes']:,} bytes).")
    elif d:
        w(f"Not measured: {d.get('unavailable')}.")
    w("")

    w("## Peers, uncontended (16 connections each)\n")
    w("| | cycles/s | acquire p50 / p99 ms |")
    w("|---|---|---|")
    r16 = find(rows, scenario="uncontended", connections=16)
    if r16:
        w(f"| Leasehold (HTTP) | {num(r16['cycles_per_s'])} | {ms(r16['acquire_ms']['p50'])} / {ms(r16['acquire_ms']['p99'])} |")
    for name, peer in (("Python `redis` Lock (direct Redis)", "python-redis-lock"), ("etcd lock (JSON gateway)", "etcd-lock")):
        r = find(rows, peer=peer, scenario="uncontended")
        if r:
            w(f"| {name} | {num(r['cycles_per_s'])} | {ms(r['acquire_ms']['p50'])} / {ms(r['acquire_ms']['p99'])} |")
    w("")

    w("## Targets\n")
    w("| target | measured | met |")
    w("|---|---|---|")
    u64 = find(rows, scenario="uncontended", connections=64)
    best = max([x for x in [u64 and u64["cycles_per_s"], wrk and wrk["wrk"].get("cycles_per_s")] if x] or [0])
    if pair_rate(64):
        w(f"| 64-connection cycle ≥ ½ of redis-benchmark | {num(best)} vs {num(pair_rate(64))} cycles/s ({ratio(best, pair_rate(64))}) | {'yes' if best >= 0.5 * pair_rate(64) else 'no'} |")
    if u64:
        p99 = u64["acquire_ms"]["p99"]
        w(f"| acquire p99 < 2 ms at 64 connections | {ms(p99)} ms | {'yes' if p99 < 2 else 'no'} |")
    for n in (16, 64):
        f = find(rows, scenario="contended", kind="fair", clients=n, hold_ms=0)
        if f:
            h = f["handoff_ms"]
            w(f"| handoff p50 < 1 ms, p99 < 5 ms (fair, {n} clients, 2a) | {ms(h['p50'])} / {ms(h['p99'])} ms | {'yes' if h['p50'] < 1 and h['p99'] < 5 else 'no'} |")
    for n in (2, 16):
        f = find(rows, scenario="contended", kind="fair", clients=n, hold_ms=5)
        pp, ep = peer_p50("python-redis-lock", n), peer_p50("etcd-lock", n)
        if f and pp:
            r = pp / f["handoff_ms"]["p50"]
            w(f"| median handoff ≥ 20× lower than the Python Lock ({n} clients, 2b) | {pp:.3f} vs {f['handoff_ms']['p50']:.3f} ms: {r:.1f}× | {'yes' if r >= 20 else 'no'} |")
        if f and ep:
            w(f"| median handoff lower than etcd's ({n} clients, 2b) | {f['handoff_ms']['p50']:.3f} vs {ep:.3f} ms | {'yes' if f['handoff_ms']['p50'] < ep else 'no'} |")
    if p:
        rd = p.get("redis") or {}
        w(f"| 10,000 parked waiters < 150 MB RSS | {p['rss_mb_parked']:.1f} MB | {'yes' if p['rss_mb_parked'] < 150 else 'no'} |")
        w(f"| idle CPU < 2 % | {p['idle_cpu_percent']:.2f} % | {'yes' if p['idle_cpu_percent'] < 2 else 'no'} |")
        if rd:
            w(f"| ≤ 2 Redis connections per process | {rd.get('connections')} | {'yes' if rd.get('connections', 99) <= 2 else 'no'} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
