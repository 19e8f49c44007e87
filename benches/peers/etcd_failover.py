"""One etcd failover, timed per lock name as benches/failover_probe.py times Leasehold's: with a
3-member etcd cluster running, CLIENTS clients (each its own session lease and lock name,
spread over the members' client URLs) take and release their lock over and over (10 ms
apart, through the JSON gateway as etcd_lock.py); then the leader is killed with SIGKILL and
each name's next grant is timed from the kill, as is the election of a new leader (a survivor's
status names one). A client that loses its member, or whose call fails meanwhile, retries on
the next member. Prints one JSON line, with the index of the member killed (run.sh starts it
again before the next round).

python etcd_failover.py --endpoints URL1,URL2,URL3 --pids PID1,PID2,PID3 --round N
"""
import argparse
import json
import os
import signal
import threading
import time

import common
from etcd_lock import Client


class Prober(threading.Thread):
    def __init__(self, endpoints, i, name, stop):
        super().__init__(daemon=True)
        self.client, self.name, self.stop = Client(endpoints, i), name, stop
        self.grants, self.errors = [], 0

    def run(self):
        while not self.stop.is_set():
            try:
                key = self.client.acquire(self.name, retry_for=20)
                self.grants.append(time.monotonic())
                self.client.release(key, retry_for=20)
            except RuntimeError:
                self.errors += 1  # every endpoint refused for 20 s: try again
            time.sleep(0.01)


def status(endpoint):
    try:
        _, _, s = common.Http(endpoint).call("POST", "/v3/maintenance/status", {}, timeout=0.5)
        return s["header"]["member_id"], s.get("leader")
    except Exception:
        return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--pids", required=True)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--round", type=int, default=1)
    args = ap.parse_args()
    endpoints, pids = args.endpoints.split(","), [int(p) for p in args.pids.split(",")]
    members = [status(e) for e in endpoints]
    leader = members[0][1]
    victim = [m for m, _ in members].index(leader)
    stop = threading.Event()
    probers = [Prober(endpoints, i, f"fo-{args.round}-{i}", stop) for i in range(args.clients)]
    for p in probers:
        p.start()
    deadline = time.monotonic() + 20
    while not all(p.grants for p in probers):
        if time.monotonic() > deadline:
            raise SystemExit("names not granted before the kill")
        time.sleep(0.05)
    killed = time.monotonic()
    os.kill(pids[victim], signal.SIGKILL)
    survivors = [e for i, e in enumerate(endpoints) if i != victim]
    elected, deadline = None, killed + 60
    while time.monotonic() < deadline:
        if elected is None and any(l not in (None, leader, "0") for _, l in map(status, survivors)):
            elected = time.monotonic()
        if elected is not None and all(any(t > killed for t in p.grants) for p in probers):
            break
        time.sleep(0.01)
    stop.set()
    for p in probers:
        p.join(timeout=30)
    after = [[t for t in p.grants if t > killed] for p in probers]
    for p in probers:
        p.client.close()
    print(json.dumps({
        "peer": "etcd-lock", "scenario": "failover", "members": len(endpoints), "round": args.round,
        "killed": victim, "clients": args.clients,
        "elected_ms": round((elected - killed) * 1000) if elected else None,
        "next_grant_ms": [round((a[0] - killed) * 1000) if a else None for a in after],
        "failed_calls": sum(p.errors for p in probers),
    }))


if __name__ == "__main__":
    main()
