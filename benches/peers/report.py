"""Turns bench-out/peers.jsonl (one benches/peers/run.sh run) into benches/peers.md: one table
per workload, every system's version and settings, and the reading, every figure from that
run (Leasehold's failover figures from benches/failover.md, its own run, named as such).

python3 benches/peers/report.py bench-out/peers.jsonl "benches/peers/run.sh 3" benches/failover.md
"""
import json
import statistics
import sys
from pathlib import Path

NAMES = {
    "leasehold": "Leasehold, Python client",
    "leasehold-light": "Leasehold, Rust light client",
    "python-redis-lock": "redis-py `Lock`",
    "node-redisson": "node-redisson `RLock`",
    "etcd-lock": "etcd lock (v3lock)",
    "pg-advisory": "PostgreSQL `pg_advisory_lock`",
}
ORDER = list(NAMES)
# Whether the system promises first come, first served to blocked waiters.
FIFO_CLAIM = {
    "leasehold": "no (`reentrant`: no queue)", "leasehold-light": "no (`reentrant`: no queue)",
    "python-redis-lock": "no", "node-redisson": "no (no fair lock in node-redisson)",
    "etcd-lock": "yes (by key revision)", "pg-advisory": "no (not documented)",
}


def ms(v):
    return "–" if v is None else f"{v:.3f}" if v < 10 else f"{v:,.1f}"


def num(v):
    return "–" if v is None else f"{v:,.0f}"


def us(v):
    return "–" if v is None else f"{v:,.1f}"


def name_of(r):
    n = NAMES[r["peer"]]
    kind = (r.get("settings") or {}).get("kind") or r.get("kind")
    return f"{n}, {kind}" if r["peer"].startswith("leasehold") and kind else n


def rows_of(rows, scenario):
    found = [r for r in rows if r.get("scenario") == scenario and r.get("peer") in NAMES]
    return sorted(found, key=lambda r: (ORDER.index(r["peer"]), name_of(r), r.get("connections") or r.get("clients")))


def header(w, rows, command):
    start = next((r for r in rows if r.get("machine") == "start"), {})
    end = next((r for r in rows if r.get("machine") == "end"), {})
    load = ""
    if start and end:
        total = end["cpu_jiffies"][0] - start["cpu_jiffies"][0]
        idle = end["cpu_jiffies"][1] - start["cpu_jiffies"][1]
        load = (f"A shared machine: load average {' / '.join(start['loadavg'])} (1 / 5 / 15 min) when "
                f"the run began and {' / '.join(end['loadavg'])} when it ended; ")
        if "busy_1s_percent" in start:
            load += (f"with none of the run's processes running, other work kept the two cores "
                     f"{start['busy_1s_percent']:.0f} % busy (one second just before the run) and "
                     f"{end['busy_1s_percent']:.0f} % (just after); ")
        load += f"over the run, with its own processes, they were {100 * (total - idle) / max(total, 1):.0f} % busy. "
    w("## Lock services side by side (benches/peers/run.sh)\n")
    w(f"One run of `{command}` on {start.get('at', '?')}: {start.get('cpus', '?')} cores "
      f"({start.get('cpu', '?')}), {start.get('memory_gb', '?')} GiB, Linux {start.get('kernel', '?')}. "
      + load + "Every system runs here on loopback, started and stopped by the command, on the same "
      "cores as its clients; the clients' own CPU is shown beside each figure so that a "
      f"client-bound figure can be told apart. Each uncontended loop runs {start.get('seconds', 0):g} s "
      f"and each contended one {2 * start.get('seconds', 0):g} s, once: "
      "figures from one run on a shared 2-core machine move by tens of percent from run to run "
      "(CPU per cycle too, with other work in the caches), so read ratios, not digits; "
      "BENCHMARKS.md §1–4 has Leasehold's own figures from its longer, repeated rounds. Consul "
      "did not run: it is not in Debian's archive (removed after its licence change), and "
      "nothing else this machine may install from carries a Consul server.\n")


def versions(w, rows):
    v = next((r["versions"] for r in rows if "versions" in r), {})
    w("| system | version | client | settings |")
    w("|---|---|---|---|")
    w(f"| Leasehold | {v.get('leasehold', '?')}, release build | Python `http.client` (keep-alive, one "
      "connection per client; the same client as etcd's rows); and `benches/scenarios.rs`, the light "
      "Rust client of §3–4 | `serve --redis-url redis+unix://… --worker-threads 1 --max-wait-ms 120000` "
      "(benches/run.sh's flags), a Redis of its own shared with nobody during its loops; TTL 30 s, "
      "`wait_ms` 30000 (server-side wait), `reentrant` unless `fair` is named |")
    w(f"| redis-py `Lock` | redis-py {v.get('redis-py', '?')} | Python, one connection per client | "
      "`timeout=30`, `acquire()` blocking: it polls every 0.1 s (redis-py's default); SET NX PX, "
      "then a compare-and-delete script |")
    w(f"| node-redisson `RLock` | node-redisson {v.get('node-redisson', '?')} on Node "
      f"{v.get('node', '?')} | one Node process; each client its own `Redisson` (a command and a "
      "subscriber connection) | `lock(30000)`: a 30 s lease, no watchdog; a waiter subscribes to the "
      "lock's channel and retries on the unlock message; waits bounded at 30 s by the driver |")
    w(f"| Redis under the three above | {v.get('redis', '?')} | Unix socket | `--save \"\" "
      "--appendonly no` (benches/run.sh's settings) |")
    w(f"| etcd lock | {v.get('etcd', '?')} | Python `http.client` through etcd's JSON gateway | "
      "the v3lock service (the concurrency Mutex, run in the server): `/v3/lock/lock` with a "
      "session lease per client (60 s, etcd's default); one member for §1–3 (data directory on "
      "this machine's disk: every grant and release is a Raft entry fsynced to the WAL), three for "
      "§4; heartbeat 100 ms, election timeout 1000 ms (defaults) |")
    w(f"| PostgreSQL advisory locks | {v.get('postgresql', '?')} | psycopg {v.get('psycopg', '?')} "
      "(libpq), one session per client, autocommit, Unix socket | `initdb` defaults; "
      "`pg_advisory_lock(key)` / `pg_advisory_unlock(key)`, key a 64-bit hash of the name, "
      "`lock_timeout` 30 s; no TTL: a lock lives as long as its session |")
    w(f"\nPython {v.get('python', '?')}; {v.get('rustc', '?')}.\n")


def uncontended(w, rows):
    w("### 1. Uncontended cycles\n")
    w("Each client acquires and releases its own lock in a loop. Client CPU: the load "
      "generator's process over the loop, per cycle; server CPU: the system's processes "
      "(Leasehold and its Redis; Redis; etcd; the postmaster and its sessions), per cycle.\n")
    w("| system | clients | cycles/s | acquire p50 / p99 ms | release p50 / p99 ms | client CPU µs per cycle | server CPU µs per cycle |")
    w("|---|---|---|---|---|---|---|")
    for r in rows_of(rows, "uncontended"):
        a, b = r.get("acquire_ms") or {}, r.get("release_ms") or {}
        w(f"| {name_of(r)} | {r['connections']} | {num(r['cycles_per_s'])} | {ms(a.get('p50'))} / "
          f"{ms(a.get('p99'))} | {ms(b.get('p50'))} / {ms(b.get('p99'))} | "
          f"{us(r.get('client_cpu_us_per_cycle'))} | {us(r.get('server_cpu_us_per_cycle'))} |")
    w("")


def contended(w, rows):
    w("### 2. Contended handoff to a blocked waiter\n")
    w("One lock, N clients blocking on it (each system's own blocking call); each holder keeps "
      "it 5 ms, releases, then stands back until another client holds it (at most 1 s), so that "
      "at every release the others are already waiting. Handoff: from the release's answer to "
      "the next holder's grant, as the clients see it, counted when the lock passes to another "
      "client; a self-regrant is a client taking back the lock it just released. Stalled: "
      "waiters still waiting on a free lock 5 s after the loop ended.\n")
    w("| system | clients | grants/s | handoff p50 / p99 ms | handoffs | self-regrants | stalled waiters | server CPU µs per grant |")
    w("|---|---|---|---|---|---|---|---|")
    for r in rows_of(rows, "contended"):
        h = r.get("handoff_ms") or {}
        w(f"| {name_of(r)} | {r['clients']} | {num(r['grants_per_s'])} | {ms(h.get('p50'))} / "
          f"{ms(h.get('p99'))} | {h.get('n', 0):,} | {r.get('self_regrants', '–')} | "
          f"{r.get('stalled_waiters', 0)} | {us(r.get('server_cpu_us_per_grant'))} |")
    w("")


def fifo(w, rows):
    w("### 3. FIFO inversions\n")
    w("From the same contended runs. As the clients saw it: a grant that went to a client while "
      "another, which had asked more than 1 ms earlier (one process's clock), still waited; this "
      "count includes the clients' own scheduling jitter. In the system's own order, where it "
      "can tell: Leasehold's `queued` and `granted` events in Redis's clock (a grant that skipped a "
      "live waiter queued before it; fair locks only); etcd's lock key create revisions (a grant "
      "whose key is younger than one granted after it); PostgreSQL's `pg_locks` and "
      "`pg_stat_activity`, read by each holder (a session whose lock call started before the "
      "holder's, by the statements' start times, still waiting on the key; a session that lost "
      "its core between its statement's start and its place in the lock queue counts too, so "
      "this count is an upper bound).\n")
    w("| system | claims FIFO | clients | grants | inversions as the clients saw them | inversions in the system's own order |")
    w("|---|---|---|---|---|---|")
    for r in rows_of(rows, "contended"):
        own = r.get("fifo_inversions_server")
        client = r.get("fifo_inversions_client")
        fair = (r.get("settings") or {}).get("kind") == "fair"
        claim = "yes (`kind: fair`)" if fair else FIFO_CLAIM[r["peer"]]
        w(f"| {name_of(r)} | {claim} | {r['clients']} | {r['grants']:,} | "
          f"{'–' if client is None else f'{client:,}'} | {'–' if own is None else f'{own:,}'} |")
    w("")


def leasehold_failover(path):
    """Leasehold's rows of benches/failover.md's table, as its cells: mode, replicas, rounds,
    promotion, next grant median, p90, max, every name granted again."""
    found = []
    if path.exists():
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] in ("sentinel", "cluster"):
                found.append(cells[:8])
    return found


def failover(w, rows, failover_md):
    w("### 4. Failover to the next grant\n")
    runs = [r for r in rows if r.get("scenario") == "failover"]
    grants = sorted(g for r in runs for g in r["next_grant_ms"] if g is not None)
    missing = sum(1 for r in runs for g in r["next_grant_ms"] if g is None)
    elected = [r["elected_ms"] for r in runs if r.get("elected_ms") is not None]
    w("etcd with 3 members on loopback: each round, 20 clients take and release their own lock "
      "(a session and a name each, 10 ms apart, spread over the members), the leader is killed "
      "with SIGKILL, and each name's next grant is timed from the kill (a client whose member "
      "is gone, or whose call fails, retries on the next member); the killed member is then "
      "started again and rejoins before the next round. Leasehold's figures are not from this "
      f"run: they are `benches/failover.sh`'s (`{failover_md}`, where the method is the same: 20 "
      "names, next grant per name from the `kill -9` of the Redis master or Cluster primary), "
      "shown here for the comparison.\n")
    w("| system | what fails over | rounds | new leader / promotion (median) | next grant per name: median | p90 | max | every name granted again |")
    w("|---|---|---|---|---|---|---|---|")
    if grants:
        p90 = grants[int(0.9 * (len(grants) - 1))]
        w(f"| etcd lock (this run) | 3 members, election timeout 1000 ms | {len(runs)} | "
          f"{statistics.median(elected):,.0f} ms | {statistics.median(grants):,.0f} ms | {p90:,} ms | "
          f"{max(grants):,} ms | {'yes' if not missing else f'no: {missing} names never'} |")
    for mode, replicas, rounds, promotion, median, p90, top, every in leasehold_failover(Path(failover_md)):
        what = ("Sentinel, `down-after-milliseconds` 2000" if mode == "sentinel"
                else "Cluster of 3 primaries, `cluster-node-timeout` 2000")
        w(f"| Leasehold ({failover_md}) | {what}, {replicas} replica(s) per primary | {rounds} | "
          f"{promotion} | {median} | {p90} | {top} | {every} |")
    w("\nPostgreSQL, redis-py and node-redisson have no failover of their own to measure here "
      "(redis-py and node-redisson follow a Sentinel or a Cluster as their Redis client does; a "
      "PostgreSQL advisory lock lives in one server's memory and is gone with it).\n")
    return grants


def find(rows, peer, scenario, n, kind=None):
    for r in rows:
        if r.get("peer") == peer and r.get("scenario") == scenario and (r.get("connections") or r.get("clients")) == n:
            if kind is None or (r.get("settings") or {}).get("kind") == kind:
                return r
    return None


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def reading_uncontended(w, rows):
    w("**Uncontended.** Cycles/s at 16 clients: " + ", ".join(
        f"{name_of(r)} {num(r['cycles_per_s'])}" for r in rows_of(rows, "uncontended") if r["connections"] == 16)
      + ". The Python rows share one client (`http.client` for Leasehold and etcd, the peers' "
      "own libraries for Redis and PostgreSQL), and its CPU per cycle is of the order of the "
      "server's or above: those rows measure the client as much as the system, which is why the "
      "Rust light client's row is there; it is what the server gives when the client costs "
      "little, and no peer here has its like.")
    lh = find(rows, "leasehold", "uncontended", 16)
    ahead = [r for r in rows_of(rows, "uncontended") if r["connections"] == 16 and lh
             and r["peer"] in ("python-redis-lock", "node-redisson", "pg-advisory", "etcd-lock")
             and r["cycles_per_s"] > lh["cycles_per_s"]]
    if ahead:
        w(" Where a peer wins: against Leasehold driven by the Python client at 16 clients, " + ", ".join(
            f"{name_of(r)} makes {ratio(r['cycles_per_s'], lh['cycles_per_s'])} its cycles/s "
            f"(its client: {us(r.get('client_cpu_us_per_cycle'))} µs per cycle against "
            f"{us(lh.get('client_cpu_us_per_cycle'))})" for r in ahead) + ".")
    light = find(rows, "leasehold-light", "uncontended", 16)
    beyond = [r for r in ahead if light and r["cycles_per_s"] > light["cycles_per_s"]]
    if beyond:
        w(" Driven by its own light Rust client, the cheapest client it has, Leasehold is still "
          "behind " + " and ".join(f"{name_of(r)} ({ratio(r['cycles_per_s'], light['cycles_per_s'])} "
                                   "its cycles/s)" for r in beyond) + ".")
    one = [r for r in rows_of(rows, "uncontended") if r["connections"] == 1 and r.get("acquire_ms")]
    if one:
        w(" Acquire p50 with one client, one call at a time: " + ", ".join(
            f"{name_of(r)} {ms(r['acquire_ms']['p50'])} ms" for r in one) + ".")
    cheaper = [r for r in rows_of(rows, "uncontended") if r["connections"] == 16 and lh
               and r["peer"] not in ("leasehold", "leasehold-light")
               and (r.get("server_cpu_us_per_cycle") or 1e9) < (lh.get("server_cpu_us_per_cycle") or 0)]
    if cheaper:
        w(" Server CPU per cycle at 16 clients, Leasehold and its Redis "
          f"{us(lh.get('server_cpu_us_per_cycle'))} µs against " + ", ".join(
              f"{name_of(r)} {us(r['server_cpu_us_per_cycle'])} µs" for r in cheaper) + ".")
    w(" Why they cost less: each does less per cycle. A PostgreSQL advisory lock is an entry in "
      "the server's shared-memory lock table, one statement to take and one to give back, with no "
      "expiry (it lasts as long as the session), no fencing token and no record; redis-py's lock "
      "is a SET NX PX and a one-key compare-and-delete script; node-redisson's is Redisson's "
      "acquire script, and its release a script and a DEL of its unlock latch. A Leasehold cycle "
      "is two HTTP requests with JSON bodies, and two Redis functions that keep Redisson's layout "
      "and add the lease record, a fencing token, a history entry and an event (BENCHMARKS.md §2 "
      "counts them: 3.4× the minimal Redisson pair's Redis instructions). etcd's lock is the "
      "slowest by design: every acquire and every release is a Raft entry fsynced to the WAL, "
      "durable and replicated, where the others keep locks in memory.\n")


def reading_contended(w, rows):
    parts = []
    for r in rows_of(rows, "contended"):
        if r["clients"] == 16 and r.get("handoff_ms"):
            parts.append(f"{name_of(r)} {ms(r['handoff_ms']['p50'])} / {ms(r['handoff_ms']['p99'])} ms")
    w("**Handoff to a blocked waiter** (p50 / p99, 16 clients): " + "; ".join(parts) + ". "
      "How each wakes its next holder explains the spread: Leasehold parks the waiter in the "
      "server and wakes it from Redisson's unlock message through one subscriber; PostgreSQL's "
      "lock manager wakes the next waiter inside the server; etcd's waiter watches the key just "
      "before its own and wakes on its deletion, a Raft commit later; node-redisson wakes every "
      "waiter of the lock with one message and they race for it; redis-py does not wake anyone: "
      "a waiter polls every 0.1 s, so the lock lies free for up to 100 ms between holders.")
    stalled = [r for r in rows_of(rows, "contended") if r.get("stalled_waiters")]
    if stalled:
        w(" node-redisson left " + ", ".join(
            f"{r['stalled_waiters']} of {r['clients']} waiters" for r in stalled)
          + " waiting on a free lock after the loop: it subscribes to the unlock channel only "
          "after a failed try, so a release in between goes unheard and the waiter sleeps until "
          "the next release or the lock's TTL (Java Redisson subscribes first; the issue is the "
          "anchors' 'missed wake-up', Redisson #5761 and #6539).")
    w("\n")


def reading_fifo(w, rows):
    own = {}
    for r in rows_of(rows, "contended"):
        if r.get("fifo_inversions_server") is not None:
            key = name_of(r)
            n, g = own.get(key, (0, 0))
            own[key] = (n + r["fifo_inversions_server"], g + r["grants"])
    w("**FIFO.** In the systems' own order: " + "; ".join(
        f"{k} {n:,} inversions in {g:,} grants" for k, n, g in ((k, *v) for k, v in own.items())) + ". ")
    claims = {k: v for k, v in own.items() if not k.startswith(NAMES["pg-advisory"])}
    kept = [k for k, (n, _) in claims.items() if n == 0]
    broke = [f"{k} ({n:,})" for k, (n, _) in claims.items() if n]
    if kept:
        w("The order promised was kept by " + ", ".join(kept) + ". ")
    if broke:
        w("It was not kept by " + ", ".join(broke) + ". ")
    pg = [(n, g) for k, (n, g) in own.items() if k.startswith(NAMES["pg-advisory"])]
    if pg:
        w("PostgreSQL documents no order for advisory locks; its lock manager queues a waiter behind "
          "the ones already waiting for a conflicting lock, " + (
              "and in this run no grant passed over an earlier waiter. " if pg[0][0] == 0 else
              f"and {pg[0][0]:,} of {pg[0][1]:,} grants went to a session whose lock call started "
              "after that of one still waiting (an upper bound: see above). "))
    w(
      "Leasehold's non-fair kinds, redis-py and node-redisson make no claim, and the clients' "
      "counts say how far from arrival order their grants fall. Where a system's own order shows "
      "no inversion, the clients' count is their own scheduling jitter (a thread stamps its ask, "
      "then waits for a core before the request leaves) against the 1 ms margin.\n")


def millis(cell):
    try:
        return int(cell.replace(",", "").replace("ms", "").strip())
    except ValueError:
        return None


def reading_failover(w, rows, grants, failover_md):
    if not grants:
        return
    runs = [r for r in rows if r.get("scenario") == "failover"]
    med = statistics.median(grants)
    elected = statistics.median(r["elected_ms"] for r in runs if r.get("elected_ms") is not None)
    lh = [(m, rep, millis(mid)) for m, rep, _, _, mid, *_ in leasehold_failover(Path(failover_md))]
    faster = [f"{m} with {rep} replica(s) ({v:,} ms)" for m, rep, v in lh if v is not None and v < med]
    slower = [f"{m} with {rep} replica(s) ({v:,} ms)" for m, rep, v in lh if v is not None and v >= med]
    w(f"**Failover.** etcd elected a new leader {elected:,.0f} ms (median) after the kill, and the "
      f"names' next grants came {med:,.0f} ms (median) after it. Its members notice a dead leader "
      "after one election timeout (1 s by default), where Sentinel and Cluster wait out a 2 s "
      "failure detection (`down-after-milliseconds`, `cluster-node-timeout`) before promoting a "
      "replica: etcd's own recovery is the quicker one. Its clients' is not always: a lock call "
      "in flight on a surviving member when the leader died is answered only at etcd's request "
      "timeout (5 s + 2 × the election timeout = 7 s, 'request timed out, possibly due to "
      "previous leader failure'), and through the gateway a client has no way to cut it short "
      "but its own deadline; calls that had gone to the killed member fail at once and are "
      "retried on another.")
    if faster:
        w(" Leasehold's next grant came sooner on " + ", ".join(faster) + ".")
    if slower:
        w(" Leasehold's came later on " + ", ".join(slower) + ".")
    w(" Both ran at their default detection times; shorter ones make either fail over sooner, and "
      "falsely more often.\n")


def main():
    path, command, failover_md = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [json.loads(line) for line in open(path) if line.strip()]
    out = []
    w = out.append
    header(w, rows, command)
    versions(w, rows)
    uncontended(w, rows)
    contended(w, rows)
    fifo(w, rows)
    grants = failover(w, rows, failover_md)
    w("### Reading\n")
    # Each reading is one paragraph, written in pieces (some only when the figures call for them).
    for reading, extra in ((reading_uncontended, ()), (reading_contended, ()), (reading_fifo, ()),
                           (reading_failover, (grants, failover_md))):
        pieces = []
        reading(pieces.append, rows, *extra)
        if pieces:
            w("".join(pieces).strip() + "\n")
    for r in rows:
        if "note" in r:
            w(f"Note: {r['note']}.\n")
    print("\n".join(out).rstrip())


if __name__ == "__main__":
    main()
