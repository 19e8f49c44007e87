#!/usr/bin/env python3
"""What one Leasehold cycle costs Redis when Redis is busy: the server's own acquire and release
FCALLs, captured with MONITOR from one cycle over HTTP, replayed back to back (pipelined, on
fresh lock names and lease ids) beside Redisson's minimal pair and the features floor
(benches/floor/, see floor.py) replayed the same way. Script µs per cycle from INFO
commandstats, per round. Used by benches/run.sh.

One at a time over HTTP (§2 of BENCHMARKS.md), Redis waits for the server between calls, and
the server's work on the same cores leaves Redis's caches cold; replayed back to back, both sides
run on warm caches, as a Redis near its capacity does.

usage: replay.py <redis unix socket> <server url> [names per round] [rounds]"""
import json
import sys
import threading
import time
import urllib.request
import uuid

import redis

import floor

sock, url = sys.argv[1], sys.argv[2]
names = int(sys.argv[3]) if len(sys.argv) > 3 else 500
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
r = redis.Redis(unix_socket_path=sock)


def http(method, path, token=None, body=None):
    req = urllib.request.Request(url + path, method=method, data=body)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


# Capture: MONITOR lists every command with its arguments; the two FCALLs of one cycle (the
# first acquire and the first release) are kept. Arguments here are plain ASCII without spaces.
captured = {}
ready = threading.Event()


def watch():
    with r.monitor() as m:
        ready.set()
        for cmd in m.listen():
            words = cmd["command"].split(" ")
            if words[0] == "FCALL" and words[1].endswith(("_acquire", "_release")):
                captured.setdefault(words[1].rsplit("_", 1)[1], words)
            if len(captured) == 2:
                return


t = threading.Thread(target=watch, daemon=True)
t.start()
ready.wait(5)
time.sleep(0.2)
lease = http("POST", "/v1/locks/replay-capture/leases", body=b'{"ttl_ms":30000}')
http("DELETE", f"/v1/locks/replay-capture/leases/{lease['lease_id']}", token=lease["token"])
t.join(10)
if len(captured) != 2:
    sys.exit("replay.py: the server's FCALLs were not seen")
acq, rel = captured["acquire"], captured["release"]
lease_id, name = lease["lease_id"], "replay-capture"


def for_lock(words, new_name, new_id):
    out = []
    for i, w in enumerate(words):
        if i == 5:
            w = "0"  # ARGV[1], the deadline: the captured one has passed; "0" is none
        w = w.replace(lease_id, new_id)
        out.append(new_name if w == name else w.replace("{%s}" % name, "{%s}" % new_name))
    return out


acq_sha = r.script_load(open("benches/redisson/lock_acquire.lua").read())
rel_sha = r.script_load(open("benches/redisson/lock_release.lua").read())
holder = "b9f3a0c2-5d1e-4c7a-9e2f-3a4b5c6d7e8f:1"


def leasehold_round(k):
    lock_names = [f"replay-{k}-{i}" for i in range(names)]
    ids = [str(uuid.uuid4()) for _ in lock_names]
    p = r.pipeline(transaction=False)
    for n, i in zip(lock_names, ids):
        p.execute_command(*for_lock(acq, n, i))
    for n, i in zip(lock_names, ids):
        p.execute_command(*for_lock(rel, n, i))
    replies = p.execute()
    if not all(b'"status":"acquired"' in x for x in replies[:names]):
        sys.exit("replay.py: a replayed acquire was not granted")


def minimal_round(k):
    p = r.pipeline(transaction=False)
    lock_names = [f"replay-min-{k}-{i}" for i in range(names)]
    for n in lock_names:
        p.evalsha(acq_sha, 1, n, 30000, holder)
    for n in lock_names:
        p.evalsha(rel_sha, 2, n, "redisson_lock__channel:{%s}" % n, 0, 30000, holder)
    p.execute()


def floor_round(k):
    p = r.pipeline(transaction=False)
    cycles = [floor.calls(f"replay-floor-{k}-{i}", str(uuid.uuid4())) for i in range(names)]
    for acquire, _ in cycles:
        p.execute_command(*acquire)
    for _, release in cycles:
        p.execute_command(*release)
    replies = p.execute()
    if not all(b'"status":"released"' in x for x in replies[names:]):
        sys.exit("replay.py: a replayed floor cycle was not granted and released")


def usec_per_cycle(run, command, k):
    r.config_resetstat()
    run(k)
    stats = r.info("commandstats").get("cmdstat_" + command, {})
    return stats.get("usec", 0) / (stats.get("calls", 0) / 2)


# A warm-up round each, then the rounds, taking the three in turn.
floor.load(r)
leasehold_round(0)
minimal_round(0)
floor_round(0)
ours, minimal, floors = [], [], []
for k in range(1, rounds + 1):
    ours.append(usec_per_cycle(leasehold_round, "fcall", k))
    minimal.append(usec_per_cycle(minimal_round, "evalsha", k))
    floors.append(usec_per_cycle(floor_round, "fcall", k))
print(json.dumps({"scenario": "replay", "names": names, "rounds": rounds,
                  "script_us_per_cycle": ours, "minimal_us_per_pair": minimal,
                  "floor_us_per_cycle": floors}))
