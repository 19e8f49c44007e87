"""The Python `redis` package's Lock (redis-py), as users run it: acquire() with its default
blocking wait (it polls every 0.1 s), release(). Prints one JSON object of results.

python python_lock.py --socket /path/r.sock --mode uncontended|contended --threads N --seconds S
"""
import argparse
import json
import threading
import time

from common import handoffs, pct

import redis



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
    granted, grants_seen = threading.Condition(), [0]

    def worker():
        r = redis.Redis(unix_socket_path=args.socket)
        lock = r.lock("py-contended", timeout=30)
        while time.perf_counter() < deadline:
            lock.acquire()  # blocking, default sleep=0.1
            with guard:
                events.append((time.perf_counter(), "grant", threading.get_ident()))
            with granted:
                grants_seen[0] += 1
                mine = grants_seen[0]
                granted.notify_all()
            time.sleep(args.hold_ms / 1000)
            lock.release()
            with guard:
                events.append((time.perf_counter(), "release", threading.get_ident()))
            # Stand back until another client holds the lock (bounded), so every handoff
            # measured is a real transfer to a waiting client.
            with granted:
                granted.wait_for(lambda: grants_seen[0] > mine, timeout=1.0)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    secs = time.perf_counter() - started
    handoff_times, self_regrants, grants = handoffs(events)
    return {"peer": "python-redis-lock", "scenario": "contended", "clients": args.threads,
            "grants_per_s": grants / secs, "self_regrants": self_regrants, "hold_ms": args.hold_ms,
            "handoff_ms": pct(handoff_times)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--hold-ms", type=float, default=0, help="critical section length")

    a = p.parse_args()
    print(json.dumps(uncontended(a) if a.mode == "uncontended" else contended(a)))
