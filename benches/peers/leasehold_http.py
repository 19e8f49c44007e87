"""Leasehold's HTTP API driven from Python with the standard library's HTTP client
(`common.Http`, the same as the etcd driver's): POST /v1/locks/{name}/leases?wait_ms=30000 (the wait is server-side; a fair lock
answers 202 with a ticket, polled with its own server-side wait until granted), then DELETE
the lease with its bearer token. 30 s TTL, one keep-alive connection per client. The official
Python SDK would add a heartbeat thread and a watch stream per lease; the peers' clients here
run without theirs (redis-py has none, node-redisson runs with an explicit lease time), so
this driver leaves them out too. Prints one JSON object of results.

python leasehold_http.py --url http://127.0.0.1:8080 --kind reentrant|fair --mode ... [--redis-socket S]

With --redis-socket (the Redis behind the server), a contended run also counts FIFO inversions
from the server's own `queued` / `granted` events, in Redis's clock (the method of
benches/scenarios/contended.rs).
"""
import json
import sys
import threading
from collections import deque

import common

WAIT_MS = 30000


class Client:
    def __init__(self, url, kind):
        self.http, self.body = common.Http(url), {"kind": kind, "ttl_ms": 30000}

    def acquire(self, name):
        timeout = WAIT_MS / 1000 + 10
        status, headers, body = self.http.call("POST", f"/v1/locks/{name}/leases?wait_ms={WAIT_MS}",
                                               self.body, timeout=timeout)
        while status == 202:  # a fair ticket: wait for it in line
            ticket = {"authorization": f"Bearer {body['token']}"}
            status, headers, body = self.http.call("POST", f"{headers['location']}?wait_ms={WAIT_MS}",
                                                   headers=ticket, timeout=timeout)
        if status != 201:
            raise RuntimeError(f"acquire {name}: {status} {body}")
        return name, body["lease_id"], body["token"]

    def release(self, held):
        name, lease, token = held
        status, _, body = self.http.call("DELETE", f"/v1/locks/{name}/leases/{lease}",
                                         headers={"authorization": f"Bearer {token}"})
        if status != 200:
            raise RuntimeError(f"release {name}: {status} {body}")

    def close(self):
        self.http.close()


def connect(args, i):
    return Client(args.url, args.kind)


def add_args(p):
    p.add_argument("--url", required=True)
    p.add_argument("--kind", default="reentrant", help="reentrant, exclusive or fair")
    p.add_argument("--redis-socket", help="the server's Redis, for its events (FIFO check)")


def settings(args):
    return {"client": "Python http.client, keep-alive", "kind": args.kind, "ttl_ms": 30000,
            "wait_ms": WAIT_MS}


def watch(args, name):
    """Collects the lock's events from Redis until the returned function is called, which
    counts the grants that skipped a live waiter queued before them."""
    if not args.redis_socket or args.kind != "fair":  # only a fair lock queues its waiters
        return None
    import redis
    pubsub = redis.Redis(unix_socket_path=args.redis_socket).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("leasehold:events")
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            msg = pubsub.get_message(timeout=0.1)
            if msg is None:
                continue
            batch = json.loads(msg["data"])
            for e in batch if isinstance(batch, list) else [batch]:
                if e.get("lock") == name:
                    at = e.get("at_us") or e.get("at_ms", 0) * 1000
                    seen.append((at, e.get("type", ""), e.get("lease_id", "")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def finish():
        stop.wait(0.3)  # the last events still on their way
        stop.set()
        reader.join(timeout=5)
        pubsub.close()
        return events_inversions(seen)

    return finish


def events_inversions(events):
    """Grants that skipped a live waiter queued before them, with the events in Redis's order
    (a stable sort: events of one instant keep their arrival order)."""
    pending, gone, count = deque(), set(), 0
    for _, kind, lease in sorted(events, key=lambda e: e[0]):
        if kind == "queued":
            pending.append(lease)
        elif kind in ("left", "expired"):
            gone.add(lease)
        elif kind in ("granted", "acquired"):
            while pending and pending[0] in gone:
                pending.popleft()
            if lease in pending:
                count += pending[0] != lease
                pending.remove(lease)
            elif pending:
                count += 1  # granted without queueing while others waited: barging
    return count


if __name__ == "__main__":
    common.main("leasehold", sys.modules[__name__])
