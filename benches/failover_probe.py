#!/usr/bin/env python3
"""One failover, timed per name (benches/failover.sh runs it once per round).

Against a running deploy/local/sentinel.sh or deploy/local/cluster.sh: picks the Redis master
(Sentinel) or a Cluster primary and NAMES lock names it serves, has one client per name take
and release its lock over and over (uncontended, a keep-alive connection each, 10 ms apart),
then kills the master with SIGKILL and records, per name, how long after the kill the next
grant came; also when the replica was promoted (its ROLE), and what the refusals said. Prints
one JSON line. Stdlib only; redis-cli for the Redis side.
"""

import argparse
import http.client
import json
import os
import signal
import subprocess
import threading
import time


def redis(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *map(str, args)],
                         capture_output=True, text=True, timeout=5)
    return out.stdout.strip()


def crc16(data):
    """CRC16-XMODEM, the Cluster's key hash."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot(key):
    return crc16(key.encode()) % 16384


def role(port):
    try:
        return redis(port, "role").split("\n")[0]
    except Exception:
        return ""


def cluster_victim(base, count):
    """(victim port, its replicas' ports, slot ranges) from CLUSTER NODES."""
    lines = redis(base, "cluster", "nodes").splitlines()
    nodes = {}
    for line in lines:
        f = line.split()
        nodes[f[0]] = (int(f[1].split("@")[0].split(":")[1]), f[2], f[3], f[8:])
    primaries = sorted((p, i) for i, (p, flags, _, _) in nodes.items()
                       if "master" in flags and "fail" not in flags and nodes[i][3])
    port, ident = primaries[0]
    replicas = [p for (p, flags, of, _) in nodes.values() if of == ident and "fail" not in flags]
    ranges = []
    for r in nodes[ident][3]:
        if r.startswith("["):
            continue
        a, _, b = r.partition("-")
        ranges.append((int(a), int(b or a)))
    return port, replicas, ranges


class Prober(threading.Thread):
    """Takes and releases one name over and over, recording when each grant came."""

    def __init__(self, host, port, name, stop):
        super().__init__(daemon=True)
        self.host, self.port, self.name, self.stop = host, port, name, stop
        self.grants = []  # (when the request was sent, when it was answered, degraded)
        self.refusals = {}
        self.conn = None

    def call(self, method, path, body=None, token=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        try:
            self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                              headers=headers)
            reply = self.conn.getresponse()
            data = reply.read()
            return reply.status, (json.loads(data) if data else {})
        except Exception as e:
            self.conn.close()
            self.conn = None
            return 0, {"code": type(e).__name__}

    def run(self):
        path = f"/v1/locks/{self.name}/leases"
        while not self.stop.is_set():
            sent = time.monotonic()
            # The shortest TTL the server allows by default: a release lost in the failover
            # leaves the name held that long, which the next grant then waits out.
            status, body = self.call("POST", path, {"ttl_ms": 1000})
            if status == 201:
                self.grants.append((sent, time.monotonic(), body.get("degraded")))
                self.call("DELETE", f"{path}/{body['lease_id']}", token=body["token"])
            else:
                key = f"{status} {body.get('code', '')}"
                self.refusals[key] = self.refusals.get(key, 0) + 1
            time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--mode", choices=["sentinel", "cluster"], required=True)
    ap.add_argument("--base", type=int, required=True, help="the first Redis port")
    ap.add_argument("--sentinel", type=int, help="a Sentinel's port (Sentinel mode)")
    ap.add_argument("--replicas", type=int, required=True)
    ap.add_argument("--names", type=int, default=20)
    ap.add_argument("--round", type=int, default=1)
    args = ap.parse_args()
    host, port = args.url.split("//")[1].split(":")
    if args.mode == "sentinel":
        addr = redis(args.sentinel, "sentinel", "get-master-addr-by-name", "leasehold").split()
        victim = int(addr[1])
        replicas = [int(line.split("port=")[1].split(",")[0])
                    for line in redis(victim, "info", "replication").splitlines()
                    if line.startswith("slave") and "port=" in line]
        names = [f"fo-{args.round}-{i}" for i in range(args.names)]
    else:
        victim, replicas, ranges = cluster_victim(args.base, 3 * (1 + args.replicas))
        names, i = [], 0
        while len(names) < args.names:
            name = f"fo-{args.round}-{i}"
            i += 1
            if any(a <= slot(name) <= b for a, b in ranges):
                names.append(name)
    stop = threading.Event()
    probers = [Prober(host, int(port), n, stop) for n in names]
    for p in probers:
        p.start()
    # Every name granted at least once before the kill.
    deadline = time.monotonic() + 20
    while not all(p.grants for p in probers):
        if time.monotonic() > deadline:
            raise SystemExit("names not granted before the kill")
        time.sleep(0.05)
    pid = int([l for l in redis(victim, "info", "server").splitlines()
               if l.startswith("process_id:")][0].split(":")[1])
    for p in probers:
        p.refusals.clear()
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    promoted = None
    deadline = killed + 60
    while time.monotonic() < deadline:
        if promoted is None and any(role(r) == "master" for r in replicas):
            promoted = time.monotonic()
        if promoted is not None and all(any(s > killed for s, _, _ in p.grants) for p in probers):
            break
        time.sleep(0.01)
    stop.set()
    for p in probers:
        p.join(timeout=10)
    # A grant counts only when its request was sent after the kill (one in flight then may
    # have been answered by the master before it died).
    after = [[(t, d) for s, t, d in p.grants if s > killed] for p in probers]
    refusals = {}
    for p in probers:
        for k, n in p.refusals.items():
            refusals[k] = refusals.get(k, 0) + n
    print(json.dumps({
        "mode": args.mode,
        "replicas": args.replicas,
        "round": args.round,
        "victim": victim,
        "promoted_ms": round((promoted - killed) * 1000) if promoted else None,
        "next_grant_ms": [round((a[0][0] - killed) * 1000) if a else None for a in after],
        "first_degraded": sorted({a[0][1] for a in after if a and a[0][1]}),
        "refusals": refusals,
    }))


if __name__ == "__main__":
    main()
