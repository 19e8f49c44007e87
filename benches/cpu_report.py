#!/usr/bin/env python3
"""Turns bench-out/cpu.jsonl (one benches/cpu.sh run) into benches/cpu.md, which BENCHMARKS.md
takes in: the server's CPU per cycle against Redis's, the floor under it, several instances,
and the callgrind counts. Usage: cpu_report.py bench-out/cpu.jsonl "benches/cpu.sh 10 3" """
import json
import statistics
import sys


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rng(xs, fmt):
    return f"{fmt(min(xs))}–{fmt(max(xs))}" if xs else "–"


def num(x):
    return f"{x:,.0f}"


def us(x):
    return f"{x:.1f}"


def main(path, command):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    machine = next((r["machine"] for r in rows if "machine" in r), {})
    cg = next((r["callgrind"] for r in rows if "callgrind" in r), None)

    def loops(connections, servers=1, floor=None):
        return [r for r in rows if r.get("scenario") == "uncontended"
                and r["connections"] == connections and r.get("servers", 1) == servers
                and r.get("floor") == floor]

    u16, u64, two = loops(16), loops(64), loops(16, servers=2)
    floor = loops(16, floor="/healthz")
    pairs = [r for r in rows if r.get("scenario") == "redis_minimal"]
    minimal = med([r["pairs_per_s"] for r in pairs])
    server = med([r["server_cpu_us_per_cycle"] for r in u16])
    redis = med([r["redis"]["cpu_us_per_cycle"] for r in u16])
    rounds = len(u16)
    out = []
    w = out.append
    w("## What a cycle costs the server (benches/cpu.sh, issue 58)")
    w("")
    w(f"One run of `{command}` on {machine.get('date', '?')}: {machine.get('cpus', '?')} cores "
      f"({machine.get('cpu', '?')}), Linux {machine.get('kernel', '?')}, load average "
      f"{' / '.join(machine.get('load', []))} when it began; {machine.get('redis', '?')}; "
      f"{machine.get('rustc', '?')}. One Redis on a Unix socket (no persistence), Leasehold "
      f"instances against it with `--worker-threads 1` (Redis shares the 2 cores), the light "
      f"client's loop (each connection its own lock name), the minimal Redisson pair straight at "
      f"the same Redis; {rounds} rounds, each figure the rounds' median with their range in "
      f"brackets. The server's CPU is its process's (`/proc/<pid>/stat`: user and kernel time, "
      f"so the kernel's work of sending its answers over loopback TCP too), Redis's from `INFO "
      f"cpu`. This machine's speed moves by a factor of two from day to day (the same loop "
      f"measured 32.5–35.7 µs of server CPU per cycle on 2026-11-25, the Sizing page): read the "
      f"ratios, which are taken within a round.")
    w("")
    w("| connections | cycles/s | ÷ minimal pair's pairs/s | server CPU µs per cycle | Redis CPU µs per cycle | server ÷ Redis | acquire p50 / p99 ms |")
    w("|---|---|---|---|---|---|---|")
    for c, group in ((16, u16), (64, u64)):
        if not group:
            continue
        cps = [r["cycles_per_s"] for r in group]
        srv = [r["server_cpu_us_per_cycle"] for r in group]
        rds = [r["redis"]["cpu_us_per_cycle"] for r in group]
        rat = [s / r for s, r in zip(srv, rds)]
        w(f"| {c} | {num(med(cps))} ({rng(cps, num)}) | {med(cps) / minimal:.2f}× | "
          f"{us(med(srv))} ({rng(srv, us)}) | {us(med(rds))} ({rng(rds, us)}) | "
          f"{med(rat):.2f}× ({rng(rat, lambda x: f'{x:.2f}')}) | "
          f"{med([r['acquire_ms']['p50'] for r in group]):.3f} / {med([r['acquire_ms']['p99'] for r in group]):.3f} |")
    w("")
    w(f"The minimal pair at 16 connections: {num(minimal)} pairs/s "
      f"({rng([r['pairs_per_s'] for r in pairs], num)}), Redis CPU "
      f"{us(med([r['redis_cpu_us_per_pair'] for r in pairs]))} µs per pair.")
    w("")
    w("**The floor.** What a Leasehold cycle cannot cost less than on this stack, measured in "
      "the same rounds: two HTTP/1.1 requests answered by the same server with nothing else to "
      "do (`GET /healthz` twice per cycle, the same light client, 16 connections), and two Redis "
      "script calls made by a Rust process with redis-rs, the server's Redis client (the "
      "minimal pair's own client: its CPU per pair).")
    w("")
    by_round = {r["round"]: r for r in u16}
    floor_by = {r["round"]: r["server_cpu_us_per_cycle"] for r in floor}
    client_by = {r["round"]: r["client_cpu_us_per_pair"] for r in pairs}

    def part(per_round):
        """The part's µs per cycle and its ratio to Redis's CPU per Leasehold cycle: the
        medians of the rounds' (each ratio taken within its round)."""
        got = {k: v for k, v in per_round.items() if k in by_round}
        vals = list(got.values())
        rat = [v / by_round[k]["redis"]["cpu_us_per_cycle"] for k, v in got.items()]
        return f"{us(med(vals))} ({rng(vals, us)}) | {med(rat):.2f}× ({rng(rat, lambda x: f'{x:.2f}')})"

    both = {k: floor_by[k] + client_by[k] for k in floor_by if k in client_by}
    rest = {k: by_round[k]["server_cpu_us_per_cycle"] - v for k, v in both.items() if k in by_round}
    w("| part | µs of CPU per cycle | ÷ Redis CPU per Leasehold cycle |")
    w("|---|---|---|")
    w(f"| two HTTP requests (`GET /healthz` ×2, the server) | {part(floor_by)} |")
    w(f"| two Redis calls (redis-rs, the client's side) | {part(client_by)} |")
    w(f"| the floor: both | {part(both)} |")
    w(f"| the rest of a Leasehold cycle (routing, JSON bodies, credentials, the lease and its token, events, metrics) | {part(rest)} |")
    w(f"| the whole cycle | {part({k: r['server_cpu_us_per_cycle'] for k, r in by_round.items()})} |")
    w("")
    load = med([2 * r["client_cpu_us_per_request"] for r in u16])
    cores = machine.get("cpus", 2)
    per_cycle = load + redis + server
    target = 0.35 * minimal
    w(f"**Cycles/s on these cores.** At 16 connections a cycle costs the load client "
      f"{us(load)} µs, Redis {us(redis)} and the server {us(server)}: {us(per_cycle)} µs of "
      f"the {cores} cores' time, so at most {num(cores * 1e6 / per_cycle)} cycles/s with both "
      f"cores fully busy ({cores * 1e6 / per_cycle / minimal:.2f}× the minimal pair). "
      f"{num(target)} cycles/s (0.35× the pair) would leave the server "
      f"{us(cores * 1e6 / target - load - redis)} µs per cycle, against a floor of "
      f"{us(med(list(both.values())))}.")
    w("")
    if two:
        instances(w, u16, two, server, redis)
    if cg:
        allocations(w, cg)
    print("\n".join(out))


def instances(w, u16, two, server, redis):
    """The same loop spread over two instances, beside one (`server`, `redis`: its medians)."""
    cps2 = [r["cycles_per_s"] for r in two]
    srv2 = [r["server_cpu_us_per_cycle"] for r in two]
    rds2 = [r["redis"]["cpu_us_per_cycle"] for r in two]
    w("**Several instances.** The same 16 connections spread over two instances against the "
      "one Redis (the servers' CPU per cycle is both together):")
    w("")
    w("| instances | cycles/s | servers' CPU µs per cycle | Redis CPU µs per cycle |")
    w("|---|---|---|---|")
    w(f"| 1 | {num(med([r['cycles_per_s'] for r in u16]))} | {us(server)} | {us(redis)} |")
    w(f"| 2 | {num(med(cps2))} ({rng(cps2, num)}) | {us(med(srv2))} ({rng(srv2, us)}) | {us(med(rds2))} ({rng(rds2, us)}) |")
    w("")


def allocations(w, cg):
    """The callgrind counts: instructions and allocations per cycle, the top allocators."""
    w(f"**Instructions and allocations** (one instance under callgrind, {num(cg['cycles'])} "
      f"cycles at 4 connections; `benches/allocations.py`): "
      f"{num(cg['instructions_per_cycle'])} instructions per cycle in the server's own "
      f"code and libraries (the kernel's not counted), "
      f"{cg['allocations_per_cycle']:.1f} allocations per cycle (about "
      f"{cg['allocations_per_cycle'] / 2:.0f} per request). The functions that allocate most, "
      f"per cycle:")
    w("")
    w("| allocations per cycle | function (the allocation's caller) |")
    w("|---|---|")
    for name, n in cg["allocating"][:10]:
        short = name if len(name) < 110 else name[:107] + "..."
        w(f"| {n:.1f} | `{short}` |")
    w("")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
