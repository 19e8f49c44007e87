"""etcd's lock service (v3 concurrency API) through etcd's own HTTP/JSON gateway, as a
non-Go client uses it: one lease per client, POST /v3/lock/lock (blocks server-side until
granted), POST /v3/lock/unlock. Prints one JSON object of results.

python etcd_lock.py --endpoint http://127.0.0.1:2379 --mode uncontended|contended --threads N
"""
import argparse
import base64
import json
import threading
import time

from common import handoffs, pct

import requests


def b64(s):
    return base64.b64encode(s.encode()).decode()



class Client:
    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.http = requests.Session()
        grant = self.http.post(f"{endpoint}/v3/lease/grant", json={"TTL": 60}, timeout=10).json()
        self.lease = grant["ID"]

    def lock(self, name):
        r = self.http.post(f"{self.endpoint}/v3/lock/lock",
                           json={"name": b64(name), "lease": self.lease}, timeout=60)
        r.raise_for_status()
        return r.json()["key"]

    def unlock(self, key):
        self.http.post(f"{self.endpoint}/v3/lock/unlock", json={"key": key}, timeout=10).raise_for_status()


def uncontended(args):
    deadline = time.perf_counter() + args.seconds
    acq, rel = [], []

    def worker(i):
        c = Client(args.endpoint)
        a, b = [], []
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            key = c.lock(f"etcd-u-{i}")
            t1 = time.perf_counter()
            c.unlock(key)
            a.append(t1 - t0)
            b.append(time.perf_counter() - t1)
        acq.extend(a)
        rel.extend(b)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    secs = time.perf_counter() - started
    return {"peer": "etcd-lock", "scenario": "uncontended", "connections": args.threads,
            "cycles_per_s": len(acq) / secs, "acquire_ms": pct(acq), "release_ms": pct(rel)}


def contended(args):
    deadline = time.perf_counter() + args.seconds
    events, guard = [], threading.Lock()  # (time, "grant"|"release", thread)
    granted, grants_seen = threading.Condition(), [0]

    def worker():
        c = Client(args.endpoint)
        while time.perf_counter() < deadline:
            key = c.lock("etcd-contended")
            with guard:
                events.append((time.perf_counter(), "grant", threading.get_ident()))
            with granted:
                grants_seen[0] += 1
                mine = grants_seen[0]
                granted.notify_all()
            time.sleep(args.hold_ms / 1000)
            c.unlock(key)
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
    return {"peer": "etcd-lock", "scenario": "contended", "clients": args.threads,
            "grants_per_s": grants / secs, "self_regrants": self_regrants, "hold_ms": args.hold_ms,
            "handoff_ms": pct(handoff_times)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--hold-ms", type=float, default=0, help="critical section length")

    a = p.parse_args()
    print(json.dumps(uncontended(a) if a.mode == "uncontended" else contended(a)))
