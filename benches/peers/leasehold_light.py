"""Leasehold driven by its own load generator (`benches/scenarios.rs`: the light Rust client
of BENCHMARKS.md §3 and §4, HTTP/1.1 keep-alive, one thread), beside the Python rows: what the
server gives when the client costs little. Runs the scenario, adds the servers' CPU over it and
the report's labels. Prints one JSON object of results.

python leasehold_light.py --bench BIN --url URL --redis-url URL --server-pids P,Q \
    --mode uncontended|contended --clients N --seconds S [--hold-ms H --kind fair]
"""
import argparse
import json
import subprocess

import common


def main():
    common.exit_on_term()
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True, help="the built scenarios binary")
    p.add_argument("--url", required=True)
    p.add_argument("--redis-url", required=True)
    p.add_argument("--server-pids", required=True)
    p.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--hold-ms", type=int, default=0)
    p.add_argument("--kind", default="reentrant")
    a = p.parse_args()
    pids = [int(x) for x in a.server_pids.split(",")]
    cmd = [a.bench, "--url", a.url, "--redis-url", a.redis_url, "--seconds", str(a.seconds)]
    if a.mode == "uncontended":
        cmd += ["uncontended", "--connections", str(a.clients)]
    else:
        cmd += ["contended", "--clients", str(a.clients), "--kind", a.kind, "--hold-ms", str(a.hold_ms)]
    ticks0 = common.cpu_ticks(pids)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=a.seconds + 90)
    ticks = common.cpu_ticks(pids) - ticks0
    r = json.loads(out.stdout)
    r.update(peer="leasehold-light", settings={"client": "benches/scenarios.rs (Rust, one thread)",
                                               "kind": a.kind, "ttl_ms": 30000})
    if a.mode == "uncontended":
        r["client_cpu_us_per_cycle"] = round(2 * r.pop("client_cpu_us_per_request"), 1)
        r["server_cpu_us_per_cycle"] = common.cpu_us_per(ticks, r["cycles"])
        r.pop("redis", None)
    else:
        r["server_cpu_us_per_grant"] = common.cpu_us_per(ticks, r["grants"])
        r["fifo_inversions_server"] = (r.pop("fifo_inversions") or {}).get("count")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
