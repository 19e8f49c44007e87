"""The Python `redis` package's Lock (redis-py), as users run it: acquire() with its default
blocking wait (it polls every 0.1 s), release(). Prints one JSON object of results.

python python_lock.py --socket /path/r.sock --mode uncontended|contended --threads N --seconds S
"""
import argparse
import json
import threading
import time

import redis


def pct(samples):
    if not samples:
        return None
    s = sorted(samples)
    pick = lambda q: round(s[round((len(s) - 1) * q)] * 1e3, 3)
    return {"p50": pick(0.5), "p99": pick(0.99), "p999": pick(0.999), "max": pick(1.0), "n": len(s)}


def uncontended(args):
    deadline = time.perf_counter() + args.seconds
    acq, rel = [], []

    def worker(i):
        r = redis.Redis(unix_socket_path=args.socket)
        lock = r.lock(f"py-u-{i}", timeout=30)
        a, b = [], []
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            lock.acquire()
            t1 = time.perf_counter()
            lock.release()
            a.append(t1 - t0)
            b.append(time.perf_counter() - t1)
        acq.extend(a)
        rel.extend(b)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    secs = time.perf_counter() - started
    return {"peer": "python-redis-lock", "scenario": "uncontended", "connections": args.threads,
            "cycles_per_s": len(acq) / secs, "acquire_ms": pct(acq), "release_ms": pct(rel)}


def contended(args):
    deadline = time.perf_counter() + args.seconds
    events = []  # (time, "grant"|"release", thread)
    guard = threading.Lock()

    def worker():
        r = redis.Redis(unix_socket_path=args.socket)
        lock = r.lock("py-contended", timeout=30)
        while time.perf_counter() < deadline:
            lock.acquire()  # blocking, default sleep=0.1
            with guard:
                events.append((time.perf_counter(), "grant", threading.get_ident()))
            lock.release()
            with guard:
                events.append((time.perf_counter(), "release", threading.get_ident()))
            time.sleep(args.think_ms / 1000)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    secs = time.perf_counter() - started
    events.sort()
    # A handoff is the lock passing to another client; re-taking one's own lock is not one.
    handoffs, last_release, self_regrants = [], None, 0
    for at, kind, who in events:
        if kind == "release":
            last_release = (at, who)
        elif last_release is not None:
            if who == last_release[1]:
                self_regrants += 1
            else:
                handoffs.append(at - last_release[0])
            last_release = None
    grants = sum(1 for e in events if e[1] == "grant")
    return {"peer": "python-redis-lock", "scenario": "contended", "clients": args.threads,
            "grants_per_s": grants / secs, "self_regrants": self_regrants, "think_ms": args.think_ms,
            "handoff_ms": pct(handoffs)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--think-ms", type=float, default=1,
                   help="work between critical sections, before asking again")
    a = p.parse_args()
    print(json.dumps(uncontended(a) if a.mode == "uncontended" else contended(a)))
