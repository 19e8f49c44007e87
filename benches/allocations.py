#!/usr/bin/env python3
"""Instructions and allocations per cycle of a server, from a callgrind dump of it taken over a
known number of cycles (benches/cpu.sh): the calls into mimalloc's entry points (what Rust's
global allocator calls: mi_malloc_aligned, mi_zalloc_aligned, mi_realloc_aligned) counted from
the dump's call records, by the function that made them, and the process's instructions.
Usage: allocations.py [--json] callgrind.out cycles"""
import json
import re
import sys

ALLOC = {"mi_malloc_aligned", "mi_zalloc_aligned", "mi_realloc_aligned", "mi_malloc", "mi_zalloc",
         "mi_realloc", "mi_calloc"}
# The allocating functions listed, most allocations first.
TOP = 15


def read(path):
    """(total instructions, {callee: calls}, {caller: allocation calls})."""
    names, calls, callers = {}, {}, {}
    total, fn, cfn = 0, None, None
    for line in open(path, errors="replace"):
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
            continue
        m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
        if m:
            kind, ident, name = m.groups()
            if name:
                names[ident] = name.strip()
            if kind == "fn":
                fn = names.get(ident)
            else:
                cfn = names.get(ident)
            continue
        if line.startswith("calls=") and cfn is not None:
            n = int(line[6:].split()[0])
            calls[cfn] = calls.get(cfn, 0) + n
            if cfn in ALLOC and fn is not None:
                callers[fn] = callers.get(fn, 0) + n
    return total, calls, callers


def main(args):
    as_json = args and args[0] == "--json"
    if as_json:
        args = args[1:]
    path, cycles = args[0], int(args[1])
    total, calls, callers = read(path)
    allocs = sum(n for name, n in calls.items() if name in ALLOC)
    top = sorted(callers.items(), key=lambda kv: -kv[1])[:TOP]
    result = {
        "callgrind": {
            "cycles": cycles,
            "instructions_per_cycle": total / cycles,
            "allocations_per_cycle": allocs / cycles,
            "frees_per_cycle": calls.get("mi_free", 0) / cycles,
            "allocating": [[name, n / cycles] for name, n in top],
        }
    }
    if as_json:
        print(json.dumps(result))
        return
    r = result["callgrind"]
    print(f"{cycles} cycles: {r['instructions_per_cycle']:,.0f} instructions per cycle, "
          f"{r['allocations_per_cycle']:.1f} allocations per cycle ({r['frees_per_cycle']:.1f} frees)")
    for name, n in r["allocating"]:
        print(f"  {n:6.1f}  {name[:150]}")


if __name__ == "__main__":
    main(sys.argv[1:])
