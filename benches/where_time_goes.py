#!/usr/bin/env python3
"""Where a server's CPU went, from collapsed stacks (inferno-collapse-perf's output, one
`frame;frame;... count` line per stack, the root first, the thread's name as the root): each
stack's samples go to the part of the request path of its deepest frame that names one (so a
serde_json call made by a handler counts as JSON, the handler's own code as the handler; the
parts add up), then by thread, and by the kind of the leaf frame (kernel, allocator, copies,
the rest). Usage: where_time_goes.py server.folded"""
import re
import sys
from collections import Counter

# (part, pattern over one frame), the most specific first: a frame belongs to the first part
# whose pattern it matches.
PARTS = [
    ("kernel: HTTP sockets (TCP)", r"tcp_sendmsg|tcp_recvmsg|tcp_v4_rcv|tcp_rcv"),
    ("kernel: Redis socket (Unix)", r"unix_stream_sendmsg|unix_stream_recvmsg|unix_stream_read"),
    ("kernel: waiting and waking (epoll, futex, scheduler)", r"epoll_wait|do_epoll|futex|schedule\b|__schedule|finish_task_switch"),
    ("hyper: HTTP/1.1 parse and encode", r"hyper::proto::h1::role|Http1Transaction|parse_headers|hyper::proto::h1::io"),
    ("axum: routing and extractors", r"axum::routing|path_router|FromRequest|from_request"),
    ("tower-http: tracing spans (TraceLayer)", r"tower_http::trace|tracing::span|tracing_core|tracing_subscriber"),
    ("tower-http: request ids (UUIDs)", r"request_id|uuid::"),
    ("metrics (prometheus-client)", r"prometheus_client|leasehold::metrics"),
    ("JSON (serde_json)", r"serde_json"),
    ("Redis client (redis-rs)", r"redis::aio|redis::cmd|redis::pipeline|redis::parser|redis::types|redis::script"),
    ("lease tokens (hashing, HMAC, base64)", r"sha2::|hmac::|base64::|leasehold::crypto|token"),
    ("auth (keys, principals)", r"leasehold::auth"),
    ("the lock path (leasehold::locks, ::leases)", r"leasehold::locks|leasehold::leases"),
    ("the API handlers (leasehold::api)", r"leasehold::api"),
    ("tokio: scheduler and timers", r"tokio::runtime::(scheduler|task|time)|tokio::sync"),
    ("allocation (mimalloc)", r"\bmi_|_mi_|mi_malloc|mi_free"),
]

def part_of(frames):
    for frame in reversed(frames):
        for name, pattern in PARTS:
            if re.search(pattern, frame):
                return name
    return "other (the rest of the server, std, hyper's connection loop)"

def leaf_kind(frame):
    if frame.endswith("_[k]"):
        return "kernel"
    if re.search(r"\bmi_|_mi_", frame):
        return "allocator (mimalloc)"
    if re.search(r"memmove|memcpy|memset|memcmp", frame):
        return "memory copies and compares"
    if frame.startswith("[") or "vdso" in frame:
        return "vdso and unknown"
    return "user code (the rest)"

def main(path):
    total = 0
    parts = Counter()
    leaves = Counter()
    threads = Counter()
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaves[leaf_kind(frames[-1])] += n
        threads[re.sub(r"[-_]?\d+$", "", frames[0])] += n
        parts[part_of(frames)] += n
    if not total:
        print("no samples")
        return
    print(f"{total:,} samples (perf's weights)")
    print("by part of the request path (the deepest frame that names one; adds up):")
    for name, n in parts.most_common():
        print(f"  {100 * n / total:5.1f} %  {name}")
    print("by thread:")
    for name, n in threads.most_common():
        print(f"  {100 * n / total:5.1f} %  {name}")
    print("by leaf frame (exclusive; adds up):")
    for kind, n in leaves.most_common():
        print(f"  {100 * n / total:5.1f} %  {kind}")

if __name__ == "__main__":
    main(sys.argv[1])
