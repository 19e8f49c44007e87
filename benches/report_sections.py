"""The numbered sections of the benchmark report (benches/report.py), §1 to §7 and the peers:
each a function of the rows' shared figures (`prepare`) that writes its tables."""
from report_format import find, ms, num, pct_of, ratio


def ceiling(w, ctx, before, machine):
    """§1: Redisson's minimal RLock pair, the ceiling the ratios are taken against."""
    minimal = ctx.minimal
    rb = ctx.rb
    rb_pairs = ctx.rb_pairs
    rb_us = ctx.rb_us
    # ---- 1. Ceiling ---------------------------------------------------------------------------
    w("## 1. The ceiling: Redisson's minimal RLock pair\n")
    w("Redisson's own RLock acquire and release scripts (`benches/redisson/`, verbatim), straight "
      "at the same Redis: what any lock on Redisson's layout costs at least. `redis-benchmark` "
      "runs the acquire on a fresh lock each call (EXISTS, HSET, PEXPIRE) and the release on one "
      "level of a lock held 10⁹ times (HEXISTS, HINCRBY, PEXPIRE; the last level's DEL + "
      "PUBLISH instead of the PEXPIRE costs about the same); pairs/s = 1/(1/acquire + 1/release). "
      "Script µs per call from `INFO commandstats`, Redis CPU per call from `INFO cpu`.\n")
    w("| connections | acquire/s | release/s | pairs/s | acquire p99 ms | script µs per pair | Redis CPU µs per pair |")
    w("|---|---|---|---|---|---|---|")
    for c in (1, 16, 64):
        a, r = rb.get(("acquire", c)), rb.get(("release", c))
        if a and r:
            w(f"| {c} | {num(a['requests_per_s'])} | {num(r['requests_per_s'])} | {num(rb_pairs(c))} | {ms(a['p99_ms'])} | "
              f"{rb_us(c):.1f} | {rb_us(c, 'redis_cpu_us_per_call'):.1f} |")
    if minimal:
        w("\nTrue pairs (`scenarios redis-minimal`: a Rust client, one lock per connection, acquire "
          "then release, the last level every time):\n")
        w("| connections | pairs/s | script µs per pair | Redis CPU µs per pair | acquire p50 / p99 ms |")
        w("|---|---|---|---|---|")
        for c in sorted(minimal):
            m = minimal[c]
            a = m["acquire_ms"] or {}
            cpu = m.get("redis_cpu_us_per_pair")
            w(f"| {c} | {num(m['pairs_per_s'])} | {m['redis_us_per_pair']:.1f} | {'–' if cpu is None else f'{cpu:.1f}'} | "
              f"{ms(a.get('p50'))} / {ms(a.get('p99'))} |")
    w("")


def redis_cost(w, ctx, before, machine):
    """§2: what one cycle of each kind costs Redis (µs, replayed, instructions, the floor)."""
    base_cpu = ctx.base_cpu
    base_us = ctx.base_us
    cost_rounds = ctx.cost_rounds
    costs = ctx.costs
    floor_i = ctx.floor_i
    ikinds = ctx.ikinds
    instr = ctx.instr
    reentrant = ctx.reentrant
    rep_base = getattr(ctx, "rep_base", None)
    rep_floor = getattr(ctx, "rep_floor", None)
    rep_floor_us = getattr(ctx, "rep_floor_us", None)
    rep_min = getattr(ctx, "rep_min", None)
    rep_ours = getattr(ctx, "rep_ours", None)
    rep_us = getattr(ctx, "rep_us", None)
    replay = ctx.replay
    # ---- 2. Redis cost per kind -----------------------------------------------------------------
    if costs:
        w("## 2. What one Leasehold cycle costs Redis, per kind\n")
        n = next(iter(costs.values()))["cycles"]
        rounds = max(len(v) for v in cost_rounds.values())
        w(f"{n:,} uncontended cycles (acquire + release over HTTP, one at a time) per kind on a "
          "fresh lock name" + (f", in {rounds} rounds that take the kinds in turn; each kind's median "
          "round is shown, with the range of its rounds" if rounds > 1 else "") + ". Script µs = the FCALL time in `INFO commandstats` (it includes the "
          "commands a function calls, which commandstats also lists under their own names, so "
          "they are not added again); Redis CPU = `used_cpu_user + used_cpu_sys` over the run, "
          "everything Redis did for those cycles (the events' PUBLISH from the server too). "
          "Baseline: the minimal pair one at a time (`redis-minimal`, 1 connection: "
          f"{'–' if base_us is None else f'{base_us:.1f}'} µs script, "
          f"{'–' if base_cpu is None else f'{base_cpu:.1f}'} µs CPU per pair).\n")
        w("| kind | script µs per cycle | rounds | × minimal pair | × reentrant | Redis CPU µs per cycle | × minimal pair | commands per cycle (calls, nested ones included) |")
        w("|---|---|---|---|---|---|---|---|")
        for kind in ("reentrant", "exclusive", "fair", "read", "write", "semaphore"):
            c = costs.get(kind)
            if not c:
                continue
            us, cpu = c["script_us_per_cycle"], c["redis_cpu_us_per_cycle"]
            cmds = sorted(c["commands"].items(), key=lambda kv: -kv[1]["calls_per_cycle"])
            cmd_text = ", ".join(f"{k} {v['calls_per_cycle']:.1f}" for k, v in cmds if v["calls_per_cycle"] >= 0.05)
            round_us = [r["script_us_per_cycle"] for r in cost_rounds[kind]]
            spread_text = f"{round_us[0]:.1f}–{round_us[-1]:.1f}" if len(round_us) > 1 else "–"
            w(f"| {kind} | {us:.1f} | {spread_text} | {ratio(us, base_us)} | {ratio(us, reentrant and reentrant['script_us_per_cycle'])} | "
              f"{cpu:.1f} | {ratio(cpu, base_cpu)} | {cmd_text} |")
        w("")
    if replay:
        w("**With Redis busy.** One at a time over HTTP (above), Redis waits for the server between "
          "calls, and the server's work on these cores leaves Redis's caches cold: the µs above are "
          "partly that. Here the server's own acquire and release FCALLs of one cycle (captured with "
          "MONITOR) are replayed back to back, pipelined, on "
          f"{replay['names']:,} fresh lock names per round, beside Redisson's minimal pair replayed "
          f"the same way (`benches/replay.py`), in {replay['rounds']} rounds that take the "
          f"{'three' if rep_floor_us else 'two'} in turn: "
          f"script µs per cycle {rep_us:.1f} ({rep_ours[0]:.1f}–{rep_ours[-1]:.1f}) vs "
          f"{rep_base:.1f} ({rep_min[0]:.1f}–{rep_min[-1]:.1f}) per minimal pair = "
          f"{rep_us / rep_base:.2f}× (medians of the rounds, their range in brackets)."
          + (f" The features floor (below), replayed in the same rounds: {rep_floor_us:.1f} "
             f"({rep_floor[0]:.1f}–{rep_floor[-1]:.1f}) µs per cycle = {rep_floor_us / rep_base:.2f}× the "
             f"minimal pair; Leasehold's cycle is {rep_us / rep_floor_us:.2f}× the floor."
             if rep_floor_us else "") + "\n")
    if instr:
        w("**In instructions.** The µs above move with whatever else these shared cores are doing "
          "(two runs of the same Lua on 2026-11-23 measured 114.2 and 162.0 µs per reentrant cycle). "
          "Instructions do not: Redis ran under callgrind (`valgrind --tool=callgrind`) for "
          f"{instr['cycles']:,} cycles of each kind over HTTP through a server of this build, then for "
          f"{instr['pairs']:,} minimal pairs (`redis-minimal`, 1 connection), counted apart "
          "(`benches/instructions.py`). Script = every FCALL (or EVALSHA) with everything it calls "
          "(the server's sweeper makes a few FCALLs a second of its own; they are counted too); all "
          "of Redis = the whole process over the same span (also the server's own event PUBLISH "
          "and XADD, networking, Redis's timers).\n")
        min_s, min_r = instr["minimal_script_per_pair"], instr["minimal_redis_per_pair"]
        base_i = ikinds["reentrant"]["script_per_cycle"]
        w("| | script instructions per cycle | × minimal pair | × reentrant | all Redis instructions per cycle | × minimal pair |")
        w("|---|---|---|---|---|---|")
        for kind in ("reentrant", "exclusive", "fair", "read", "write", "semaphore"):
            k = ikinds.get(kind)
            if k:
                w(f"| {kind} | {k['script_per_cycle']:,.0f} | {k['script_per_cycle'] / min_s:.2f}× | "
                  f"{k['script_per_cycle'] / base_i:.2f}× | {k['redis_per_cycle']:,.0f} | {k['redis_per_cycle'] / min_r:.2f}× |")
        if floor_i:
            floor_r = instr["floor_redis_per_cycle"]
            w(f"| features floor | {floor_i:,.0f} | {floor_i / min_s:.2f}× | {floor_i / base_i:.2f}× | "
              f"{floor_r:,.0f} | {floor_r / min_r:.2f}× |")
        w(f"| minimal pair | {min_s:,.0f} | 1.00× | | {min_r:,.0f} | 1.00× |")
        w("")
        if floor_i:
            w("**The features floor.** The issue keeps every feature of the cycle: Redisson's layout "
              "and wake-up, a fencing token never below Redis's clock, the lease record with its "
              "rollback nonce, the history entry and the live event in the reply, the deadline "
              "after which a call changes nothing, state and history that expire when unused. "
              "`benches/floor/floor.lua` is the least a reentrant acquire + release can do and keep "
              "them: a pair of functions for a free reentrant lock with no label and no "
              "Idempotency-Key, writing the same record, history entry and replies as Leasehold's "
              "for that cycle, and nothing for the other kinds, fair queues, reentry, conflicts or "
              "late expiries (`benches/floor.py` drives it; it is a yardstick, not a lock to use). "
              f"It ran {instr['floor_cycles']:,} cycles, one call at a time, on the same callgrind-run "
              f"Redis: {floor_i:,.0f} script instructions per cycle, {floor_i / min_s:.2f}× the "
              f"minimal pair. So of Leasehold's {base_i / min_s:.2f}×, the features themselves take "
              f"{floor_i / min_s:.2f}×; the rest ({(base_i - floor_i) / 1000:.1f}k instructions per "
              "cycle) is what the general scripts spend on everything else they must handle.\n")


def end_to_end(w, ctx, before, machine):
    """§3: the uncontended loop end to end, the light client and wrk."""
    minimal = ctx.minimal
    rb_pairs = ctx.rb_pairs
    spread = ctx.spread
    unc = ctx.unc
    unc_rounds = ctx.unc_rounds
    wrk = ctx.wrk
    wrk_cps = ctx.wrk_cps
    wrk_rounds = ctx.wrk_rounds
    # ---- 3. End to end ------------------------------------------------------------------------
    w("## 3. Uncontended acquire + release, end to end\n")
    w("Each connection acquires and releases its own lock name in a loop over HTTP/1.1 keep-alive. "
      "Two clients drive the same loop in turn. The light client (`scenarios uncontended`: "
      "HTTP/1.1 keep-alive connections it writes and reads itself, as redis-benchmark does with "
      "RESP, all on one thread, as redis-benchmark drives the ceiling from one thread; its "
      "answers are parsed with httparse, hyper's parser) gives cycles/s and per-operation "
      "latency. wrk runs it with one "
      "thread and one Lua VM per connection (its script keeps each connection's lease). Both "
      "share these cores with the server and Redis, so what a client spends is taken from them: "
      "each client's CPU per request is shown. Ratios: the light client's cycles/s against the "
      "minimal pair's pairs/s with as many connections, from redis-benchmark (§1) and from true "
      "pairs (redis-minimal)."
      + (f" Each loop ran in {max(len(v) for v in unc_rounds.values())} rounds (a fresh server each); "
         "the round with the median cycles/s is shown, with the range of the rounds' cycles/s and "
         "acquire p99 in brackets." if unc_rounds and max(len(v) for v in unc_rounds.values()) > 1 else "")
      + "\n")

    def cpu_us(r):
        v = r and r.get("client_cpu_us_per_request")
        return "–" if v is None else f"{v:.1f}"

    w("| connections | light client cycles/s | ÷ redis-benchmark pairs/s | ÷ true pairs/s | acquire p50 / p99 / p999 ms | release p50 / p99 / p999 ms | client CPU µs per request | wrk cycles/s | wrk p50 / p99 ms (requests) | wrk CPU µs per request |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for c in (1, 16, 64):
        wk, u = wrk.get(c), unc.get(c)
        if not wk and not u:
            continue
        m = minimal.get(c)
        if u:
            a, rl = u["acquire_ms"], u["release_ms"]
            cps = u["cycles_per_s"]
            p99_range = spread(unc_rounds[c], lambda r: r["acquire_ms"]["p99"], ms)
            cells = [str(c), num(cps) + spread(unc_rounds[c], lambda r: r["cycles_per_s"], num),
                     ratio(cps, rb_pairs(c)), ratio(cps, m and m["pairs_per_s"]),
                     f"{ms(a['p50'])} / {ms(a['p99'])}{p99_range} / {ms(a['p999'])}",
                     f"{ms(rl['p50'])} / {ms(rl['p99'])} / {ms(rl['p999'])}", cpu_us(u)]
        else:
            cells = [str(c)] + ["–"] * 6
        if wk:
            cells += [num(wk.get("cycles_per_s")) + spread(wrk_rounds[c], wrk_cps, num),
                      f"{ms(wk['p50_ms'])} / {ms(wk['p99_ms'])}", cpu_us(wk)]
        else:
            cells += ["–", "–", "–"]
        w("| " + " | ".join(cells) + " |")


def end_to_end_extras(w, ctx, before, machine):
    """§3, continued: what the loop cost Redis, failures, /healthz, server threads."""
    rows = ctx.rows
    all_cores_rounds = ctx.all_cores_rounds
    loop_us_spread = ctx.loop_us_spread
    minimal = ctx.minimal
    rb_us = ctx.rb_us
    spread = ctx.spread
    unc = ctx.unc
    wrk = ctx.wrk
    wrk_all_cores = ctx.wrk_all_cores
    wrk_cps = ctx.wrk_cps
    wrk_rounds = ctx.wrk_rounds
    # What the light client's loops cost Redis (runs before it was recorded have none).
    if any((u or {}).get("redis") for u in unc.values()):
        w("\nWhat the light client's loop cost Redis, from Redis's own counters over each loop "
          "(the median round's, the rounds' range in brackets): the FCALL µs per cycle from `INFO "
          "commandstats` and Redis's CPU per cycle from `INFO cpu` (everything: networking, the "
          "events' PUBLISH), beside the minimal pair's with as many connections (true pairs; "
          "redis-benchmark in §1). This is how issue 10 measured its \"before\" (16 connections, "
          "one lock name per connection). Calls here come many at a time, as in production, "
          "where §2 makes them one at a time with Redis idle in between.\n")
        w("| connections | script µs per cycle | ÷ true pair | ÷ redis-benchmark pair | Redis CPU µs per cycle | ÷ true pair | ÷ redis-benchmark pair |")
        w("|---|---|---|---|---|---|---|")
        for c in (1, 16, 64):
            u = unc.get(c)
            red = u and u.get("redis")
            if not red:
                continue
            m = minimal.get(c)
            us, cpu = red["script_us_per_cycle"], red["cpu_us_per_cycle"]
            w(f"| {c} | {us:.1f}{loop_us_spread(c)} | {ratio(us, m and m['redis_us_per_pair'])} | {ratio(us, rb_us(c))} | "
              f"{cpu:.1f} | {ratio(cpu, m and m.get('redis_cpu_us_per_pair'))} | "
              f"{ratio(cpu, rb_us(c, 'redis_cpu_us_per_call'))} |")
    # A refused acquire or failed release (each run's locks are its own: see acquire_release.lua).
    wrk_runs = [r for r in rows if r.get("stack") == "wrk-acquire-release"]
    failed = [(r["connections"], r.get("round"), r["wrk"]["failures"]) for r in wrk_runs
              if r["wrk"].get("failures")]
    if wrk_runs and "failures" in wrk_runs[0]["wrk"]:
        w("\nwrk requests answered other than 201 (acquire) or 200 (release): "
          + ("none, in every run." if not failed else
             "; ".join(f"{n} at {c} connections (round {rd})" for c, rd, n in failed) + "."))
    hz = find(rows, stack="http-healthz")
    if hz:
        w(f"\nA bare HTTP round trip on the same server stack (`GET /healthz`, wrk, 64 connections): "
          f"{num(hz['wrk']['requests_per_s'])} requests/s, p99 {ms(hz['wrk']['p99_ms'])} ms.")
    if wrk_all_cores:
        threads = machine.get("server_threads", "?")
        w(f"\nServer threads: the same wrk loop on a server with one thread per core (tokio's "
          f"default, {next(iter(wrk_all_cores.values()))['server_threads']}) against this run's "
          f"{threads} (one core left to Redis).\n")
        w("| connections | threads | wrk cycles/s | wrk p50 / p99 ms |")
        w("|---|---|---|---|")
        for c in sorted(wrk_all_cores):
            alt, ours = wrk_all_cores[c], wrk.get(c)
            if ours:
                w(f"| {c} | {threads} | {num(ours.get('cycles_per_s'))}{spread(wrk_rounds[c], wrk_cps, num)} | "
                  f"{ms(ours['p50_ms'])} / {ms(ours['p99_ms'])} |")
            aw = alt["wrk"]
            w(f"| {c} | {alt['server_threads']} | {num(aw.get('cycles_per_s'))}{spread(all_cores_rounds[c], wrk_cps, num)} | "
              f"{ms(aw['p50_ms'])} / {ms(aw['p99_ms'])} |")
    w("")


def contended(w, ctx, before, machine):
    """§4: contended handoff, Leasehold beside its peers."""
    rows = ctx.rows
    def peer_p50(peer, n, hold=5):
        r = find(rows, peer=peer, scenario="contended", clients=n, hold_ms=hold)
        return pct_of(r and r.get("handoff_ms"), "p50")

    w("## 4. Contended handoff\n")
    w("N clients compete for one lock with server-side waits (`wait_ms`); each releases as soon as "
      "it is granted, then stands back until another client holds the lock (at most 1 s) before "
      "asking again, the same for every system, so that every handoff is a real transfer to a "
      "waiting client. Handoff = from the 200 of a release to the 201 of the next "
      "holder, as the clients see it, counted only when the lock passes to another client; a "
      "client re-taking the lock it just released is a self-regrant (no handoff, and a sign of "
      "unfairness). FIFO inversions (fair lock) are counted from the server's own `queued` / "
      "`granted` events: a grant that skipped a live waiter queued before it.\n")
    w("### 4a. Throughput under contention (no critical section)\n")
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
      "its full 0.1 s poll; the median falls on either side. 4b measures the handoff to a waiter "
      "that is really blocked.\n")
    w("### 4b. Handoff to a blocked waiter (5 ms critical section)\n")
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


def parked_waiters(w, ctx, before, machine):
    """§5: parked waiters, by protocol."""
    drain_spread = ctx.drain_spread
    parked = ctx.parked
    parked_rounds = ctx.parked_rounds
    w("## 5. Parked waiters\n")
    parked = list(parked.values())
    if parked:
        w("10,000 concurrent waiting requests on 100 locks held by others, each on a fresh server; "
          "once all are parked the holders release and every waiter, once granted, releases at "
          "once, so each lock passes through its 100 waiters in turn (the drain is 10,000 "
          "handoffs, 100 locks at a time). Over HTTP/1.1 each waiter has its own connection; over "
          "h2c (HTTP/2 without TLS, prior knowledge) the waiters are streams multiplexed over a "
          "few connections. The waiters are the light client of §3 (each waiter's own release "
          "is part of the drain)."
          + (f" Each protocol ran in {max(len(v) for v in parked_rounds.values())} rounds (the "
             "protocols in turn); the round with the median drain is shown, with the range of "
             "the rounds' drains in brackets." if max(len(v) for v in parked_rounds.values()) > 1
             else "") + "\n")
        w("| measure | " + " | ".join(r["protocol"] + f" ({r['client_connections']:,} client connections)" for r in parked) + " | target |")
        w("|---|" + "---|" * len(parked) + "---|")
        def row(label, f, target):
            w(f"| {label} | " + " | ".join(f(r) for r in parked) + f" | {target} |")
        row("waiters parked (time to park)", lambda r: f"{r['parked']:,} ({r['parking_seconds']:.1f} s)", "10,000")
        row("server RSS idle / parked", lambda r: f"{r['rss_mb_before']:.1f} / {r['rss_mb_parked']:.1f} MB", "< 150 MB")
        row("per parked waiter (RSS delta / waiters)", lambda r: f"{(r['rss_mb_parked'] - r['rss_mb_before']) * 1024 / max(r['parked'], 1):.1f} KB", "≤ 16 KB (HTTP/1.1), ≤ 5 KB (h2c)")
        row("server CPU while they wait", lambda r: f"{r['idle_cpu_percent']:.2f} % ({r.get('idle_seconds', 5):.0f} s)", "< 2 %")
        row("Redis connections of the server", lambda r: str((r.get('redis') or {}).get('connections', '–')), "≤ 2")
        row("subscriptions (patterns / channels)", lambda r: f"{(r.get('redis') or {}).get('pattern_subscriptions', '–')} / {(r.get('redis') or {}).get('channel_subscriptions', '–')}", "–")
        row("release all → every waiter answered", lambda r: f"{r['drain_seconds']:.2f} s{drain_spread(r)}" if r.get('drain_seconds') is not None else "–", "≤ 1 s")
        row("answered after the release: p50 / p99 ms", lambda r: f"{ms((r.get('answered_after_release_ms') or {}).get('p50'))} / {ms((r.get('answered_after_release_ms') or {}).get('p99'))}", "–")
        row("failed waiters", lambda r: str(r['failures']), "0")
    w("")


def read_heavy(w, ctx, before, machine):
    """§6: the read-heavy read/write lock."""
    rows = ctx.rows
    w("## 6. Read-heavy read/write lock\n")
    w("64 readers and 2 writers on one lock, each acquiring and releasing in a loop.\n")
    w("| policy | reads/s | writer grants | writer wait p50 ms | writer wait p99 ms |")
    w("|---|---|---|---|---|")
    for policy in ("readers_first", "fifo"):
        r = find(rows, scenario="read_heavy", policy=policy)
        if r:
            ww = r.get("writer_wait_ms") or {}
            w(f"| {policy} | {num(r['reads_per_s'])} | {r['writes']} | {ms(ww.get('p50'))} | {ms(ww.get('p99'))} |")
    w("")


def dashboard(w, ctx, before, machine):
    """§7: the dashboard's overview page."""
    rows = ctx.rows
    w("## 7. Dashboard\n")
    d = find(rows, scenario="dashboard")
    if d and "render_ms" in d:
        rm = d["render_ms"]
        w(f"Overview page (`GET /`) with {d['locks']:,} live locks: p50 {ms(rm['p50'])} ms, p99 {ms(rm['p99'])} ms "
          f"({d['page_bytes']:,} bytes).")
    elif d:
        w(f"Not measured: {d.get('unavailable')}.")
    w("")


def peers_uncontended(w, ctx, before, machine):
    """The peers, uncontended at 16 connections."""
    rows = ctx.rows
    unc = ctx.unc
    w("## Peers, uncontended (16 connections each)\n")
    w("| | cycles/s | acquire p50 / p99 ms |")
    w("|---|---|---|")
    # Leasehold's median round, as in §3 (the first round that matched used to stand here).
    r16 = unc.get(16)
    if r16:
        w(f"| Leasehold (HTTP) | {num(r16['cycles_per_s'])} | {ms(r16['acquire_ms']['p50'])} / {ms(r16['acquire_ms']['p99'])} |")
    for name, peer in (("Python `redis` Lock (direct Redis)", "python-redis-lock"), ("etcd lock (JSON gateway)", "etcd-lock")):
        r = find(rows, peer=peer, scenario="uncontended")
        if r:
            w(f"| {name} | {num(r['cycles_per_s'])} | {ms(r['acquire_ms']['p50'])} / {ms(r['acquire_ms']['p99'])} |")
    w("")
