"""node-redisson's RLock: runs redisson.js (the same loops as common.py, in Node) and
summarises its raw samples with common.py, so its figures are computed as every other
system's. node-redisson 1.0.4 has RLock only: no fair lock (RFairLock), so no FIFO claim.

python node_redisson.py --socket /path/r.sock --node-modules DIR --mode uncontended|contended ...
"""
import argparse
import json
import os
import subprocess
import sys

import common

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    common.exit_on_term()
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True, help="Redis's Unix socket")
    p.add_argument("--node-modules", required=True, help="where node-redisson is installed")
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--hold-ms", type=float, default=0)
    p.add_argument("--prefix", default=f"peers-{os.getpid()}")
    p.add_argument("--server-pids", default="")
    a = p.parse_args()
    env = dict(os.environ, NODE_PATH=a.node_modules)
    cmd = ["node", os.path.join(HERE, "redisson.js"), a.socket, a.mode, str(a.clients),
           str(a.seconds), str(a.hold_ms), a.prefix, a.server_pids]
    # Bounded: the loop runs a few seconds, every wait is at most 30 s.
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.seconds + 90)
    if run.returncode != 0:
        sys.exit(f"redisson.js failed: {run.stderr[-2000:]}")
    raw = json.loads(run.stdout)
    peer = "node-redisson"
    if a.mode == "uncontended":
        r = common.summarise_uncontended(peer, a.clients, raw["secs"], raw["acq"], raw["rel"],
                                         raw["client_cpu_s"], raw["server_ticks"])
    else:
        events = [tuple(e) for e in raw["events"]]
        asks = [tuple(x) for x in raw["asks"]]
        r = common.summarise_contended(peer, a.clients, raw["secs"], a.hold_ms, events, asks,
                                       raw["end"], raw["server_ticks"],
                                       {"stalled_waiters": raw["stalled"]})
    ask = lambda *c: subprocess.run(c, env=env, capture_output=True, text=True, timeout=30).stdout.strip()
    version = ask("node", "-p", "require('node-redisson/package.json').version")
    r["settings"] = {"client": f"node-redisson {version} on Node {ask('node', '--version')}",
                     "lease_ms": 30000, "wait": "lock(30000): pub/sub wake-up, bounded at 30 s"}
    print(json.dumps(r))


if __name__ == "__main__":
    main()
