#!/usr/bin/env bash
# The shorter run of benches/run.sh (3 s loops, no peers), for iterating: the minimal Redisson
# pair, Leasehold's Redis cost per kind, end to end beside the pair, handoff, parked waiters.
# Writes bench-out/BENCHMARKS.quick.md. Usage: benches/quick.sh [seconds-per-timed-loop]
exec "$(dirname "$0")/run.sh" --quick "$@"
