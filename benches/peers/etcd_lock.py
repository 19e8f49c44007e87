"""etcd's lock service (v3lock: the concurrency package's Mutex, run inside the etcd server)
through etcd's own HTTP/JSON gateway (grpc-gateway), as a non-Go client uses it: one lease per
client (a session: 60 s TTL, etcd's default), POST /v3/lock/lock (blocks server-side until
granted; waiters are ordered by their key's create revision), POST /v3/lock/unlock. Prints one
JSON object of results.

python etcd_lock.py --endpoint http://127.0.0.1:2379 --mode uncontended|contended --clients N

While holding, a contended client reads its lock key's create revision (one range request):
a grant whose key is younger than a key granted after it passed over a waiter, in etcd's own
order. With several --endpoint values (comma-separated), a client that cannot reach one
retries on the next (etcd_failover.py).
"""
import base64
import http.client
import sys
import time

import common

SESSION_TTL_S = 60
LOCK_TIMEOUT_S = 30


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


class Client:
    def __init__(self, endpoints, first=0):
        self.endpoints, self.at = endpoints, first % len(endpoints)
        self.http = common.Http(self.endpoints[self.at])
        self.lease = self.post("/v3/lease/grant", {"TTL": SESSION_TTL_S}, 10)["ID"]

    def post(self, path, body, timeout, retry_for=0.0):
        """POST to the current endpoint; on a refused connection or an error answer, to the
        next one, until retry_for seconds have passed (0: no retry)."""
        give_up = time.perf_counter() + retry_for
        while True:
            try:
                status, _, answer = self.http.call("POST", path, body, timeout=timeout)
                if status == 200:
                    return answer
                error = f"{status} {str(answer)[:200]}"
            except (OSError, http.client.HTTPException) as e:
                error = repr(e)
            if time.perf_counter() >= give_up:
                raise RuntimeError(f"{path}: {error}")
            self.http.close()
            self.at = (self.at + 1) % len(self.endpoints)
            self.http = common.Http(self.endpoints[self.at])
            time.sleep(0.01)

    def acquire(self, name, retry_for=0.0):
        return self.post("/v3/lock/lock", {"name": b64(name), "lease": self.lease},
                         LOCK_TIMEOUT_S, retry_for)["key"]

    def release(self, key, retry_for=0.0):
        self.post("/v3/lock/unlock", {"key": key}, 10, retry_for)

    def order(self, key):
        kvs = self.post("/v3/kv/range", {"key": key}, 10).get("kvs") or [{}]
        return int(kvs[0].get("create_revision", 0))

    def close(self):
        try:
            self.post("/v3/lease/revoke", {"ID": self.lease}, 5)
        except RuntimeError:
            pass  # the lease ends with its TTL
        self.http.close()


def connect(args, i):
    return Client(args.endpoint.split(","), i)


def add_args(p):
    p.add_argument("--endpoint", required=True, help="etcd client URL(s), comma-separated")


def settings(args):
    return {"client": "Python http.client, keep-alive, via etcd's JSON gateway",
            "session_ttl_s": SESSION_TTL_S}


def server_inversions(revisions):
    """revisions: each grant's key create revision, in grant order -> grants that went to a
    key created after one still waiting (granted later)."""
    count, later_min = 0, None
    for rev in reversed(revisions):
        if later_min is not None and later_min < rev:
            count += 1
        later_min = rev if later_min is None else min(later_min, rev)
    return count


if __name__ == "__main__":
    common.main("etcd-lock", sys.modules[__name__])
