#!/usr/bin/env python3
"""The features floor (benches/floor/floor.lua): loads it into a Redis and runs uncontended
cycles on it, one call at a time, as `scenarios redis-cost` runs Leasehold's over HTTP. Used by
benches/run.sh under callgrind, and by replay.py (which imports `load` and `calls`).

usage: floor.py <redis unix socket> <cycles>"""
import pathlib
import sys
import uuid

import redis

LIBRARY = pathlib.Path(__file__).parent / "floor" / "floor.lua"
NONCE = "d6334e8e74700990e3b1c7bf863ac551"


def load(r):
    r.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY.read_text())


def calls(name, lease_id, ttl_ms=30000):
    """The two FCALLs of one cycle on lock `name` for lease `lease_id`: (acquire, release)."""
    # The state outlives the lease at least by the tombstone time, 60 s, as Leasehold's does.
    keys = ("2", name, "{%s}:leasehold" % name)
    return (("FCALL", "floor_acquire", *keys, "0", str(ttl_ms), lease_id, NONCE, "60000"),
            ("FCALL", "floor_release", *keys, "0", lease_id))


def main():
    r = redis.Redis(unix_socket_path=sys.argv[1])
    cycles = int(sys.argv[2])
    load(r)
    name = "floor-%s" % uuid.uuid4().hex[:8]
    for _ in range(cycles):
        acquire, release = calls(name, str(uuid.uuid4()))
        granted, released = r.execute_command(*acquire), r.execute_command(*release)
        if b'"status":"acquired"' not in granted or b'"status":"released"' not in released:
            sys.exit("floor.py: a cycle was not granted and released: %r %r" % (granted, released))


if __name__ == "__main__":
    main()
