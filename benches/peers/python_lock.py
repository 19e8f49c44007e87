"""The Python `redis` package's Lock (redis-py), as users run it: `acquire()` with its default
blocking wait (it polls every 0.1 s; bounded here at 30 s), `release()`; a 30 s lock timeout,
one connection per client, Redis over its Unix socket. Prints one JSON object of results.

python python_lock.py --socket /path/r.sock --mode uncontended|contended --clients N --seconds S
"""
import sys

import redis

import common


class Client:
    def __init__(self, socket):
        self.redis = redis.Redis(unix_socket_path=socket, socket_timeout=40)

    def acquire(self, name):
        lock = self.redis.lock(name, timeout=30, blocking_timeout=30)
        if not lock.acquire():
            raise RuntimeError(f"{name}: not acquired within 30 s")
        return lock

    def release(self, lock):
        lock.release()

    def close(self):
        self.redis.close()


def connect(args, i):
    return Client(args.socket)


def add_args(p):
    p.add_argument("--socket", required=True, help="Redis's Unix socket")


def settings(args):
    return {"client": f"redis-py {redis.__version__}", "lock_timeout_s": 30, "poll_s": 0.1}


if __name__ == "__main__":
    common.main("python-redis-lock", sys.modules[__name__])
