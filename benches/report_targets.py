"""Issue 10's targets in the benchmark report (benches/report.py): each figure of this run
beside its figure before the work (benches/before.json)."""
from report_format import find, ms, num, yes


def targets_redis(w, ctx, before, machine):
    """Issue 10's targets for Redis's cost and the cycle rate: before (benches/before.json), after."""
    base_cpu = ctx.base_cpu
    base_us = ctx.base_us
    costs = ctx.costs
    floor_i = ctx.floor_i
    floor_note = ctx.floor_note
    ikinds = ctx.ikinds
    instr = ctx.instr
    loop_us_spread = ctx.loop_us_spread
    minimal = ctx.minimal
    rb_pairs = ctx.rb_pairs
    rb_us = ctx.rb_us
    reentrant = ctx.reentrant
    rep_base = getattr(ctx, "rep_base", None)
    rep_floor_us = getattr(ctx, "rep_floor_us", None)
    rep_us = getattr(ctx, "rep_us", None)
    replay = ctx.replay
    spread = ctx.spread
    unc = ctx.unc
    unc_rounds = ctx.unc_rounds
    wrk = ctx.wrk
    wrk_cps = ctx.wrk_cps
    wrk_rounds = ctx.wrk_rounds
    # ---- Targets --------------------------------------------------------------------------
    w("## Issue 10's targets: before → after\n")
    w("\"Before\" is from `benches/before.json` (the issue's text and the BENCHMARKS.md of "
      "2026-11-21); \"after\" is this run. Ratios are taken within this run only.\n")
    w("| target | before | after (this run) | met |")
    w("|---|---|---|---|")
    if reentrant and base_us:
        r = reentrant["script_us_per_cycle"] / base_us
        w(f"| Redis time per uncontended cycle ≤ 3× the minimal pair's (reentrant; FCALL µs from `INFO commandstats`) "
          f"| {before.get('redis_cycle', '–')} | {reentrant['script_us_per_cycle']:.1f} µs vs {base_us:.1f} µs = {r:.1f}× "
          f"(Redis CPU: {reentrant['redis_cpu_us_per_cycle']:.1f} vs {base_cpu:.1f} µs = {reentrant['redis_cpu_us_per_cycle'] / base_cpu:.1f}×) | {yes(r <= 3)} |")

    loaded = unc.get(16, {}).get("redis")
    if loaded:
        ours = loaded["script_us_per_cycle"]
        refs = [(name, v) for name, v in (("true pairs", minimal.get(16) and minimal[16]["redis_us_per_pair"]),
                                          ("redis-benchmark", rb_us(16))) if v]
        if refs:
            text = "; ".join(f"{name} {v:.1f} µs = {ours / v:.1f}×" for name, v in refs)
            w(f"| the same under the 16-connection loop, as the issue measured it (§3: the light client's "
              f"loop, FCALL µs per cycle; the minimal pair at 16 connections) | – | {ours:.1f} µs{loop_us_spread(16)} vs {text} "
              f"(Redis CPU {loaded['cpu_us_per_cycle']:.1f} µs per cycle) | {yes(all(ours / v <= 3 for _, v in refs))} |")
    if replay:
        r = rep_us / rep_base
        fl = floor_note(f"{rep_floor_us:.1f}", rep_floor_us / rep_base, " µs") if rep_floor_us else ""
        w(f"| the same with Redis busy (the server's FCALLs and the minimal pair, each replayed back to back) "
          f"| – | {rep_us:.1f} µs vs {rep_base:.1f} µs = {r:.1f}× (§2{fl}) | {yes(r <= 3)} |")
    if instr:
        r = instr["script_per_cycle"] / instr["minimal_script_per_pair"]
        w(f"| the same, in instructions (callgrind: the same count in every run, whatever else the cores do) "
          f"| – | {instr['script_per_cycle'] / 1000:.1f}k vs {instr['minimal_script_per_pair'] / 1000:.1f}k instructions = {r:.2f}× "
          f"(all of Redis: {instr['redis_per_cycle'] / 1000:.1f}k vs {instr['minimal_redis_per_pair'] / 1000:.1f}k = "
          f"{instr['redis_per_cycle'] / instr['minimal_redis_per_pair']:.2f}×; §2"
          + (floor_note(f"{floor_i / 1000:.1f}", floor_i / instr["minimal_script_per_pair"], "k") if floor_i else "")
          + f") | {yes(r <= 3)} |")
    if reentrant and len(costs) > 1:
        worst = max((k for k in costs if k != "reentrant"), key=lambda k: costs[k]["script_us_per_cycle"])
        r = costs[worst]["script_us_per_cycle"] / reentrant["script_us_per_cycle"]
        w(f"| every other kind within 1.5× of the reentrant cycle | {before.get('kinds', '–')} | worst: {worst}, "
          f"{costs[worst]['script_us_per_cycle']:.1f} µs = {r:.2f}× (all kinds in §2) | {yes(r <= 1.5)} |")
    if "reentrant" in ikinds and len(ikinds) > 1:
        base_i = ikinds["reentrant"]["script_per_cycle"]
        worst = max((k for k in ikinds if k != "reentrant"), key=lambda k: ikinds[k]["script_per_cycle"])
        r = ikinds[worst]["script_per_cycle"] / base_i
        w(f"| the same, in instructions (callgrind) | – | worst: {worst}, {ikinds[worst]['script_per_cycle'] / 1000:.1f}k "
          f"vs {base_i / 1000:.1f}k = {r:.2f}× (§2) | {yes(r <= 1.5)} |")
    if 16 in unc and rb_pairs(16):
        cps = unc[16]["cycles_per_s"]
        r = cps / rb_pairs(16)
        by_wrk = ""
        if 16 in wrk:
            wcps = wrk[16].get("cycles_per_s")
            by_wrk = (f"; wrk: {num(wcps)}{spread(wrk_rounds[16], wrk_cps, num)} = "
                      f"{wcps / rb_pairs(16):.2f}× (§3)")
        w(f"| cycles/s at 16 connections ≥ 0.3× the minimal pair's pairs/s (light client vs redis-benchmark) "
          f"| {before.get('cycles_16', '–')} | {num(cps)}{spread(unc_rounds[16], lambda r: r['cycles_per_s'], num)} vs "
          f"{num(rb_pairs(16))} = {r:.2f}×{by_wrk} | {yes(r >= 0.3)} |")
    if 64 in unc:
        p99 = unc[64]["acquire_ms"]["p99"]
        w(f"| acquire p99 at 64 connections < 5 ms | {before.get('acquire_p99_64', '–')} | {ms(p99)} ms"
          f"{spread(unc_rounds[64], lambda r: r['acquire_ms']['p99'], ms)} | {yes(p99 < 5)} |")


def targets_waiters(w, ctx, before, machine):
    """Issue 10's targets for parked waiters, handoff, FIFO order, idle CPU and connections."""
    rows = ctx.rows
    drain_spread = ctx.drain_spread
    h1 = ctx.h1
    h2 = ctx.h2
    parked = ctx.parked
    parked_rounds = ctx.parked_rounds
    def whole(p):
        # A run where not every waiter parked, or some failed, measures something else.
        return p["parked"] >= p["waiters"] and p["failures"] == 0

    def not_whole(p):
        return f"not measured: {p['parked']:,} of {p['waiters']:,} parked, {p['failures']:,} failed (§5)"

    for label, key, p, limit in (("HTTP/1.1", "h1_kb_per_waiter", h1, 16), ("h2c", "h2c_kb_per_waiter", h2, 5)):
        if p and whole(p):
            w(f"| a parked waiter ≤ {limit} KB of server memory over {label} | {before.get(key, '–')} | "
              f"{p['kb_per_waiter']:.1f} KB | {yes(p['kb_per_waiter'] <= limit)} |")
        elif p:
            w(f"| a parked waiter ≤ {limit} KB of server memory over {label} | {before.get(key, '–')} | {not_whole(p)} | – |")
    drains = [(n, p) for n, p in (("HTTP/1.1", h1), ("h2c", h2)) if p and p.get("drain_seconds") is not None]
    if drains:
        text = ", ".join(f"{p['drain_seconds']:.2f} s{drain_spread(p)} ({n})" if whole(p) else f"{n} {not_whole(p)}" for n, p in drains)
        ok = all(p["drain_seconds"] <= 1 for _, p in drains) and all(whole(p) for _, p in drains)
        w(f"| 10,000 parked waiters answered within 1 s of the release | {before.get('drain', '–')} | {text} | {yes(ok)} |")
    for n in (16, 64):
        f = find(rows, scenario="contended", kind="fair", clients=n, hold_ms=0)
        if f and f.get("handoff_ms"):
            h = f["handoff_ms"]
            w(f"| contended handoff p50 ≤ 0.4 ms, p99 ≤ 1 ms (fair, {n} clients) | "
              f"{before.get('handoff', '–') if n == 16 else ''} | {ms(h['p50'])} / {ms(h['p99'])} ms | {yes(h['p50'] <= 0.4 and h['p99'] <= 1)} |")
    fifo = [r for r in rows if r.get("scenario") == "contended" and r.get("kind") == "fair" and r.get("fifo_inversions")]
    if fifo:
        total = sum(r["fifo_inversions"]["count"] for r in fifo)
        seen = sum(r["fifo_inversions"]["events_seen"] for r in fifo)
        w(f"| 0 FIFO inversions (fair lock, every contended run) | {before.get('fifo_inversions', '–')} | {total} "
          f"({seen:,} events checked) | {yes(total == 0 and seen > 0)} |")
    if parked:
        # (Every round's, not only the shown one's.)
        every_round = [p for runs in parked_rounds.values() for p in runs]
        worst = max(p["idle_cpu_percent"] for p in every_round)
        w(f"| idle CPU < 2 % (10,000 parked waiters) | {before.get('idle_cpu', '–')} | {worst:.2f} % | {yes(worst < 2)} |")
        conns = [(p.get("redis") or {}).get("connections") for p in every_round]
        conns = [c for c in conns if c is not None]
        if conns:
            w(f"| ≤ 2 Redis connections per process | {before.get('redis_connections', '–')} | {max(conns)} | {yes(max(conns) <= 2)} |")
    w("")
