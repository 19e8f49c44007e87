"""What the peer benchmarks share, so that every system runs the same workloads and is measured
the same way: the client loops (uncontended cycles, contended handoff), percentiles, the
handoff count, FIFO inversions as the clients see them, and the CPU the client and the servers
spent. A driver is a module that only says how its system acquires and releases:
`connect(args, i)` returns a client with `acquire(name)`, `release(held)` and `close()` (and,
where the system can tell its own grant order, `order(held)`, read while holding). It may also
define `add_args(parser)`, `settings(args)` (what the report says about it), `watch(args, name)`
(starts listening to the system's own events; returns a function that stops and counts
inversions) or `server_inversions(orders)`. `main` does the rest and prints one JSON object.

Drivers that cannot run in this process (node-redisson, in Node) run the same loops in their
own language and hand their raw samples to `summarise_*` here.""" 
import argparse
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time

# Loops sleep and switch between many threads; Python's default 5 ms switch interval would
# delay a woken waiter by up to 5 ms, a client cost that is not the system's.
sys.setswitchinterval(0.0005)

# A client that asked more than this much earlier than the one granted, and still waits, was
# passed over. Clocks are one process's, but the ask reaches the server a little after it is
# stamped; the margin keeps that jitter from counting as an inversion.
FIFO_MARGIN_S = 0.001


class Http:
    """One keep-alive HTTP/1.1 connection that sends JSON and reads JSON: the HTTP drivers'
    client (Leasehold's API, etcd's gateway). The standard library's, not `requests`, whose
    adapters, hooks and proxy look-ups cost the client several times what a lock call costs
    the server: both HTTP systems get the same light client, as the Redis and PostgreSQL
    drivers have theirs."""

    def __init__(self, base):
        host, port = base.removeprefix("http://").rstrip("/").split(":")
        self.host, self.port, self.conn = host, int(port), None

    def call(self, method, path, body=None, headers=None, timeout=10.0):
        """(status, headers, parsed JSON body or None). Opens the connection again if the
        server closed it; raises OSError when it cannot."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn.sock.settimeout(timeout)
        data = None if body is None else json.dumps(body).encode()
        h = {"content-type": "application/json"} if data is not None else {}
        h.update(headers or {})
        try:
            self.conn.request(method, path, body=data, headers=h)
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        return r.status, r.headers, json.loads(raw) if raw else None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def exit_on_term():
    """SIGTERM (run.sh's cleanup) as an exception, so that subprocess.run stops the child it
    started (node, the scenarios binary) instead of leaving it running."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def pct(samples):
    """p50/p99/p999/max of durations in seconds, as milliseconds."""
    if not samples:
        return None
    s = sorted(samples)
    pick = lambda q: round(s[round((len(s) - 1) * q)] * 1e3, 3)
    return {"p50": pick(0.5), "p99": pick(0.99), "p999": pick(0.999), "max": pick(1.0), "n": len(s)}


def handoffs(events):
    """(time, "grant"|"release", client) events -> (handoff durations, self-regrants, grants).

    A handoff is the lock passing to another client, from the release to the next grant; a
    client re-taking the lock it just released is a self-regrant, not a handoff."""
    events = sorted(events)
    lat, last_release, self_regrants = [], None, 0
    for at, kind, who in events:
        if kind == "release":
            last_release = (at, who)
        elif last_release is not None:
            if who == last_release[1]:
                self_regrants += 1
            else:
                lat.append(at - last_release[0])
            last_release = None
    return lat, self_regrants, sum(1 for e in events if e[1] == "grant")


def fifo_inversions(asks, end):
    """asks: (asked_at, granted_at or None, client) -> grants that passed over a client which
    had asked earlier (by more than FIFO_MARGIN_S) and was still waiting. One per such grant."""
    grants = sorted((g, a, c) for a, g, c in asks if g is not None)
    waiting = [(a, g if g is not None else end, c) for a, g, c in asks]
    count = 0
    for granted, asked, client in grants:
        if any(c != client and a < asked - FIFO_MARGIN_S and g > granted for a, g, c in waiting):
            count += 1
    return count


def cpu_ticks(pids):
    """CPU clock ticks (user + system) of these processes and their children that are alive
    (PostgreSQL serves each session in a child of the postmaster)."""
    pids = set(pids)
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # After the command name: state, ppid, ... utime is the 12th field, stime the 13th.
        if int(entry) in pids or int(fields[1]) in pids:
            total += int(fields[11]) + int(fields[12])
    return total


def cpu_us_per(ticks, count):
    return round(ticks * 1e6 / os.sysconf("SC_CLK_TCK") / count, 1) if count else None


def summarise_uncontended(peer, clients, secs, acq, rel, client_cpu_s, server_ticks):
    return {"peer": peer, "scenario": "uncontended", "connections": clients, "seconds": secs,
            "cycles": len(acq), "cycles_per_s": len(acq) / secs,
            "acquire_ms": pct(acq), "release_ms": pct(rel),
            "client_cpu_us_per_cycle": round(client_cpu_s * 1e6 / len(acq), 1) if acq else None,
            "server_cpu_us_per_cycle": cpu_us_per(server_ticks, len(acq))}


def summarise_contended(peer, clients, secs, hold_ms, events, asks, end, server_ticks, extra=None):
    handoff_times, self_regrants, grants = handoffs(events)
    result = {"peer": peer, "scenario": "contended", "clients": clients, "seconds": secs,
              "hold_ms": hold_ms, "grants": grants, "grants_per_s": grants / secs,
              "self_regrants": self_regrants, "handoff_ms": pct(handoff_times),
              "fifo_inversions_client": fifo_inversions(asks, end),
              "server_cpu_us_per_grant": cpu_us_per(server_ticks, grants)}
    result.update(extra or {})
    return result


def run_threads(target, n):
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        # Every acquire waits at most 30 s and every run a few seconds: a thread still alive
        # after this is a hung client, reported rather than waited for.
        t.join(timeout=120)
        if t.is_alive():
            raise RuntimeError("a client thread did not finish within 120 s")


def connect_all(driver, args, n):
    clients = [None] * n
    run_threads(lambda i: clients.__setitem__(i, driver.connect(args, i)), n)
    return clients


def uncontended(peer, driver, args):
    """Each client acquires and releases its own lock name in a loop, as fast as it can."""
    clients = connect_all(driver, args, args.clients)
    acq, rel, guard = [], [], threading.Lock()
    cpu0, ticks0 = os.times(), cpu_ticks(args.server_pids)
    started = time.perf_counter()
    deadline = started + args.seconds

    def worker(i):
        c, name, a, b = clients[i], f"{args.prefix}-u-{i}", [], []
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            held = c.acquire(name)
            t1 = time.perf_counter()
            c.release(held)
            a.append(t1 - t0)
            b.append(time.perf_counter() - t1)
        with guard:
            acq.extend(a)
            rel.extend(b)

    run_threads(worker, args.clients)
    secs = time.perf_counter() - started
    ticks, cpu1 = cpu_ticks(args.server_pids) - ticks0, os.times()
    for c in clients:
        c.close()
    client_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return summarise_uncontended(peer, args.clients, secs, acq, rel, client_cpu, ticks)


def contended(peer, driver, args):
    """One lock, N clients blocking on it. Each holder keeps it hold_ms, releases, then stands
    back until another client holds it (at most 1 s), so every handoff measured is a real
    transfer to a client that was already waiting."""
    clients = connect_all(driver, args, args.clients)
    name = f"{args.prefix}-contended-{args.clients}-{args.hold_ms:g}"
    events, asks, orders, guard = [], [], [], threading.Lock()
    granted, seen = threading.Condition(), [0]
    ticks0 = cpu_ticks(args.server_pids)
    started = time.perf_counter()
    deadline = started + args.seconds

    def worker(i):
        c = clients[i]
        while time.perf_counter() < deadline:
            asked = time.perf_counter()
            held = c.acquire(name)
            at = time.perf_counter()
            with guard:
                events.append((at, "grant", i))
                asks.append((asked, at, i))
            with granted:
                seen[0] += 1
                mine = seen[0]
                granted.notify_all()
            # The system's own account of the order, where it has one, read while holding.
            order = c.order(held) if hasattr(c, "order") else None
            if order is not None:
                with guard:
                    orders.append(order)
            time.sleep(max(0.0, args.hold_ms / 1000 - (time.perf_counter() - at)))
            c.release(held)
            with guard:
                events.append((time.perf_counter(), "release", i))
            with granted:
                granted.wait_for(lambda: seen[0] > mine, timeout=1.0)

    watcher = driver.watch(args, name) if hasattr(driver, "watch") else None
    run_threads(worker, args.clients)
    end = time.perf_counter()
    ticks = cpu_ticks(args.server_pids) - ticks0
    for c in clients:
        c.close()
    extra = {}
    if watcher is not None:
        extra["fifo_inversions_server"] = watcher()
    elif hasattr(driver, "server_inversions"):
        extra["fifo_inversions_server"] = driver.server_inversions(orders)
    return summarise_contended(peer, args.clients, end - started, args.hold_ms, events, asks,
                               end, ticks, extra)


def main(peer, driver):
    """The command line every driver shares; prints one JSON object of results."""
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--clients", "--threads", type=int, default=16, dest="clients")
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--hold-ms", type=float, default=0, help="critical section length")
    p.add_argument("--prefix", default=f"peers-{os.getpid()}", help="lock names start with it")
    p.add_argument("--server-pids", default="", help="comma-separated: whose CPU to count")
    if hasattr(driver, "add_args"):
        driver.add_args(p)
    args = p.parse_args()
    args.server_pids = [int(x) for x in args.server_pids.split(",") if x]
    run = uncontended if args.mode == "uncontended" else contended
    result = run(peer, driver, args)
    if hasattr(driver, "settings"):
        result["settings"] = driver.settings(args)
    print(json.dumps(result))
