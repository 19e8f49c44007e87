"""PostgreSQL's session advisory locks, as applications use them for a distributed lock: one
session (connection) per client, `SELECT pg_advisory_lock(key)` (blocks in the server's lock
manager until granted; bounded here by `lock_timeout` 30 s), `SELECT pg_advisory_unlock(key)`;
the key is a 64-bit hash of the lock name. psycopg 3 over the Unix socket, autocommit. Prints
one JSON object of results.

python pg_advisory.py --dsn "host=/run/dir port=5432 user=postgres dbname=postgres" --mode ...

PostgreSQL makes no fairness promise for advisory locks. While holding, a contended client asks
the server whether a session that started waiting before its own lock call (pg_stat_activity's
query_start, the server's clock) still waits on the key: that grant passed over it.
"""
import hashlib
import sys

import psycopg

import common

PASSED_OVER = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1
  AND l.classid::bigint = %s AND l.objid::bigint = %s AND a.query_start < %s"""


def key_of(name):
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class Client:
    def __init__(self, dsn):
        self.db = psycopg.connect(dsn, autocommit=True)
        self.db.execute("SET lock_timeout = '30s'")

    def acquire(self, name):
        key = key_of(name)
        # statement_timestamp(): when this call started, by the server's clock (see order).
        started = self.db.execute("SELECT statement_timestamp() FROM pg_advisory_lock(%s)",
                                  (key,)).fetchone()[0]
        return key, started

    def release(self, held):
        if not self.db.execute("SELECT pg_advisory_unlock(%s)", (held[0],)).fetchone()[0]:
            raise RuntimeError(f"advisory lock {held[0]} was not held")

    def order(self, held):
        key, started = held
        high, low = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
        return int(self.db.execute(PASSED_OVER, (high, low, started)).fetchone()[0] > 0)

    def close(self):
        self.db.close()


def connect(args, i):
    return Client(args.dsn)


def add_args(p):
    p.add_argument("--dsn", required=True, help="libpq connection string")


def settings(args):
    return {"client": f"psycopg {psycopg.__version__}, a session per client, autocommit",
            "lock_timeout_s": 30}


def server_inversions(passed_over):
    return sum(passed_over)


if __name__ == "__main__":
    common.main("pg-advisory", sys.modules[__name__])
