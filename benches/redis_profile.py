#!/usr/bin/env python3
"""Sets callgrind dumps of redis-server side by side: thousands of instructions per cycle in
each part of a script call, for benches/redis_profile.sh (which says how the dumps are made).
Needs a redis-server with symbols: in a stripped one, the Lua engine's functions are addresses.

usage: redis_profile.py <label>=<callgrind dump>:<cycles> ...

Rows are inclusive (a function with everything it calls) unless marked "own" (the function's
own instructions only); indented rows are part of the row above them, and rows at one level
may overlap (a reply's strings are made by "Lua strings made" too), so they do not add up."""
import re
import subprocess
import sys

# (row label, function, inclusive?, indent). The script call is FCALL (Leasehold, the floor) or
# EVALSHA (Redisson's minimal pair): whichever the dump has.
ROWS = [
    ("all of Redis", "PROGRAM TOTALS", True, 0),
    ("the script calls (FCALL or EVALSHA)", "SCRIPT", True, 0),
    ("KEYS and ARGV made into Lua tables", "luaCreateArray", True, 1),
    ("redis.call", "luaRedisGenericCommand", True, 1),
    ("the commands themselves", "call'2", True, 2),
    ("XADD (history)", "xaddCommand", True, 3),
    ("HSET", "hsetCommand", True, 3),
    ("HMGET / HGET", "HASHREAD", True, 3),
    ("TIME", "timeCommand", True, 3),
    ("PUBLISH", "publishCommand", True, 3),
    ("their replies made into Lua values", "redisProtocolToLuaType", True, 2),
    ("their arguments made into Redis strings", "luaArgsToRedisArgv", True, 2),
    ("Lua strings made (interned: hashed, looked up, allocated)", "luaS_newlstr", False, 1),
    ("`..` (concatenation)", "luaV_concat", True, 1),
    ("string.match / string.find", "str_find_aux", True, 1),
    ("string.format", "str_format", True, 1),
    ("text read as numbers", "luaO_str2d", True, 1),
    ("garbage collection steps", "luaC_step", True, 1),
    ("the Lua VM's own instructions (own)", "luaV_execute", False, 1),
]
LINE = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)")
NAME = re.compile(r":([^: \[]+) \[")


def costs(path, inclusive):
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}",
                          "--threshold=100", path], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        n, name = int(m.group(1).replace(",", "")), m.group(2)
        if name.startswith("PROGRAM TOTALS"):
            found.setdefault("PROGRAM TOTALS", n)
        elif (f := NAME.search(name)):
            # The first (largest) entry of a name: a recursive function's own frames follow it.
            found.setdefault(f.group(1), n)
    return found


def cell(inc, own, function, inclusive):
    table = inc if inclusive else own
    if function == "SCRIPT":
        return table.get("fcallCommand") or table.get("evalShaCommand") or 0
    if function == "HASHREAD":
        return table.get("hmgetCommand", 0) + table.get("hgetCommand", 0)
    if function == "redisProtocolToLuaType":
        # Each reply's top-level conversion; the nested ones are inside it.
        return table.get("redisProtocolToLuaType", 0) or (
            table.get("redisProtocolToLuaType_Array", 0) + table.get("redisProtocolToLuaType_Int", 0)
            + table.get("redisProtocolToLuaType_BulkString", 0))
    return table.get(function, 0)


def main():
    columns = []
    for arg in sys.argv[1:]:
        label, rest = arg.split("=", 1)
        path, cycles = rest.rsplit(":", 1)
        columns.append((label, costs(path, True), costs(path, False), int(cycles)))
    print("Thousands of Redis instructions per cycle (callgrind). Indented rows are part of the "
          "row above; rows at one level may overlap, so they do not add up.\n")
    print("| | " + " | ".join(f"{label} ({cycles:,} cycles)" for label, _, _, cycles in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for label, function, inclusive, indent in ROWS:
        values = [cell(inc, own, function, inclusive) / cycles / 1000 for _, inc, own, cycles in columns]
        if not any(values):
            continue
        print(f"| {'· ' * indent}{label} | " + " | ".join(f"{v:.1f}" for v in values) + " |")


if __name__ == "__main__":
    main()
