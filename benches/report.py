"""Turns bench-out/results.jsonl (one benches/run.sh run) into BENCHMARKS.md: tables with the
machine, the date, the command, and every figure beside its ceiling or peer from the same run;
issue 10's targets first, each with its figure before the work (from a small JSON file,
benches/before.json) and after (this run).

python3 benches/report.py bench-out/results.jsonl "benches/run.sh 10" benches/before.json > BENCHMARKS.md
"""
import json
from pathlib import Path
import sys
from types import SimpleNamespace

from report_format import load
from report_sections import (ceiling, contended, dashboard, end_to_end, end_to_end_extras,
                             parked_waiters, peers_uncontended, read_heavy, redis_cost)
from report_targets import targets_redis, targets_waiters


# The pages after the run's own sections, in this order: those the runs of their own write
# (benches/cpu.sh: what a cycle costs the server against Redis, and its floor; benches/peers/
# run.sh: the cross-system lock benchmark; benches/replicas.sh: replica acknowledgements and
# failover; benches/failover.sh: failover to the next grant per name; benches/cluster.sh: Redis
# Cluster against one Redis; benches/image.sh: the container image's binary), and those kept by
# hand (elections_signals.md: the figures of cargo bench --bench election, signals and
# wait_estimate; leases_cost.md: what the leases layer and the quota budget cost Redis; why.md:
# the measurements behind the code's shape).
OWN_PAGES = ("cpu.md", "peers.md", "replicas.md", "failover.md", "elections_signals.md", "cluster.md",
             "image.md", "leases_cost.md", "why.md")


def header(w, command, machine):
    """The title, and the machine, date, command and settings of the run."""
    w("# Benchmarks\n")
    w(f"One run of `{command}` on {machine.get('date', '?')}: {machine.get('cpus', '?')} cores "
      f"({machine.get('cpu', '?')}), {machine.get('memory_gb', '?')} GiB, Linux {machine.get('kernel', '?')}; "
      f"{machine.get('redis', '')}; {machine.get('etcd', '')}; {machine.get('rustc', '')}. "
      "Load generators, Redis, etcd and the server share the same cores, on loopback; every "
      "figure below comes from this one run and is set beside its ceiling or peer from the same "
      "run. Reproduce with `benches/run.sh` (`--quick` for a shorter run while iterating). "
      "The server and the Rust load generators are built with Cargo's release profile (fat LTO, "
      "one codegen unit: see `Cargo.toml`). "
      f"The server runs with `--worker-threads {machine.get('server_threads', '?')}`: Redis shares "
      "these cores, so the server leaves it one, as the book's Sizing page advises (§3 compares one thread "
      "per core).\n")


def replayed(replay):
    """(the server's rounds, the minimal pair's rounds, their medians, the features floor's
    rounds and median), each sorted; all None without a replay."""
    if not replay:
        return None, None, None, None, None, None
    rep_ours = sorted(replay["script_us_per_cycle"])
    rep_min = sorted(replay["minimal_us_per_pair"])
    rep_us, rep_base = rep_ours[(len(rep_ours) - 1) // 2], rep_min[(len(rep_min) - 1) // 2]
    # The features floor replayed the same way (runs before it was added have none).
    rep_floor = sorted(replay.get("floor_us_per_cycle") or [])
    rep_floor_us = rep_floor[(len(rep_floor) - 1) // 2] if rep_floor else None
    return rep_ours, rep_min, rep_us, rep_base, rep_floor, rep_floor_us


def prepare(rows):
    """What the sections share: the rows by scenario, the median round of each, and the
    helpers that format a figure's range over the rounds."""
    # The ceiling: Redisson's minimal RLock pair.
    rb = {(r["op"], r["connections"]): r for r in rows if r.get("ceiling") == "redisson-minimal"}
    minimal = {r["connections"]: r for r in rows if r.get("scenario") == "redis_minimal"}

    def rb_pairs(c):
        a, r = rb.get(("acquire", c)), rb.get(("release", c))
        if not a or not r:
            return None
        return 1.0 / (1.0 / a["requests_per_s"] + 1.0 / r["requests_per_s"])

    def rb_us(c, key="redis_us_per_call"):
        a, r = rb.get(("acquire", c)), rb.get(("release", c))
        return a[key] + r[key] if a and r else None

    # Each kind ran in several interleaved rounds: its median round (by script µs) stands for it,
    # and the rounds' range is shown beside it.
    cost_rounds = {}
    for r in rows:
        if r.get("scenario") == "redis_cost":
            cost_rounds.setdefault(r["kind"], []).append(r)
    costs = {}
    for kind, runs in cost_rounds.items():
        runs.sort(key=lambda r: r["script_us_per_cycle"])
        costs[kind] = runs[(len(runs) - 1) // 2]
    base = minimal.get(1)
    base_us = base and base["redis_us_per_pair"]
    base_cpu = base and base.get("redis_cpu_us_per_pair")
    reentrant = costs.get("reentrant")
    # The end-to-end loops ran in rounds too: the median round by cycles/s stands for each, and
    # the rounds' range is shown beside it.
    def rounds_of(pick, key):
        by = {}
        for r in rows:
            if pick(r):
                by.setdefault(r["connections"], []).append(r)
        for runs in by.values():
            runs.sort(key=key)
        return by

    def medians(by):
        return {c: runs[(len(runs) - 1) // 2] for c, runs in by.items()}

    def spread(runs, key, fmt):
        vals = sorted(key(r) for r in runs)
        return f" ({fmt(vals[0])}–{fmt(vals[-1])})" if len(vals) > 1 else ""

    def wrk_cps(r):
        return r["wrk"].get("cycles_per_s") or 0

    wrk_rounds = rounds_of(lambda r: r.get("stack") == "wrk-acquire-release" and "server_threads" not in r, wrk_cps)
    wrk = {c: r["wrk"] for c, r in medians(wrk_rounds).items()}
    all_cores_rounds = rounds_of(lambda r: r.get("stack") == "wrk-acquire-release" and "server_threads" in r, wrk_cps)
    wrk_all_cores = medians(all_cores_rounds)
    unc_rounds = rounds_of(lambda r: r.get("scenario") == "uncontended" and "peer" not in r,
                           lambda r: r["cycles_per_s"])
    unc = medians(unc_rounds)
    # Parked waiters by protocol, in rounds (older runs: one): each protocol's round with the
    # median drain is shown, with the range of the rounds' drains.
    parked_rounds = {}
    for r in rows:
        if r.get("scenario") == "parked":
            parked_rounds.setdefault(r["protocol"], []).append(r)
    for runs in parked_rounds.values():
        runs.sort(key=lambda r: r.get("drain_seconds") or 0)
    parked = {proto: runs[(len(runs) - 1) // 2] for proto, runs in parked_rounds.items()}

    def drain_spread(p):
        return spread(parked_rounds[p["protocol"]], lambda r: r.get("drain_seconds") or 0,
                      lambda v: f"{v:.2f}")
    instr = next((r for r in rows if r.get("scenario") == "instructions"), None)
    # Instructions per kind (runs before the per-kind step recorded the reentrant cycle only).
    ikinds = {}
    if instr:
        ikinds = instr.get("kinds") or {"reentrant": {"script_per_cycle": instr["script_per_cycle"],
                                                      "redis_per_cycle": instr["redis_per_cycle"]}}
    h1, h2 = parked.get("http/1.1"), parked.get("h2c")
    # The server's FCALLs replayed back to back beside the minimal pair (replay.py): medians of
    # the rounds, each side's own.
    replay = next((r for r in rows if r.get("scenario") == "replay"), None)
    rep_ours, rep_min, rep_us, rep_base, rep_floor, rep_floor_us = replayed(replay)
    # The features floor in instructions (benches/floor/), where the run counted it.
    floor_i = instr.get("floor_script_per_cycle") if instr else None

    def floor_note(value, base, unit):
        return f"; features floor: {value}{unit} = {base:.2f}×" if value is not None else ""

    # The same under the 16-connection loop of §3, as the issue measured its "before" (16
    # connections, one lock name per connection): the loop's FCALL µs per cycle against the
    # minimal pair's script µs per pair at 16 connections, true pairs and redis-benchmark.
    def loop_us_spread(c):
        return spread(unc_rounds[c], lambda r: (r.get("redis") or {}).get("script_us_per_cycle", 0),
                      lambda v: f"{v:.1f}")

    return SimpleNamespace(**locals())


def main():
    rows = load(sys.argv[1])
    command = sys.argv[2] if len(sys.argv) > 2 else "benches/run.sh"
    before = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else {}
    machine = next((r["machine"] for r in rows if "machine" in r), {})
    out = []
    w = out.append
    header(w, command, machine)
    ctx = prepare(rows)
    for section in (targets_redis, targets_waiters, ceiling, redis_cost, end_to_end, end_to_end_extras,
                    contended, parked_waiters, read_heavy, dashboard, peers_uncontended):
        section(w, ctx, before, machine)
    for page in OWN_PAGES:
        path = Path(__file__).with_name(page)
        if path.exists():
            w(path.read_text().rstrip())
            w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
