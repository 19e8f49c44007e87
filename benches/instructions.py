#!/usr/bin/env python3
"""Reads one callgrind dump of redis-server: the instructions spent in a command (inclusive: the
commands a script calls count in it) and in the whole process, as JSON. Used by benches/run.sh
for the figures that do not depend on what else the machine is doing.
usage: instructions.py <callgrind dump> <C function, e.g. fcallCommand>"""
import json
import re
import subprocess
import sys

dump, function = sys.argv[1], sys.argv[2]
text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                      capture_output=True, text=True, check=True).stdout


def count(pattern):
    for line in text.splitlines():
        if re.search(pattern, line):
            return int(line.split()[0].replace(",", ""))
    return 0


print(json.dumps({"function": function, "instructions": count(r":%s \[" % re.escape(function)),
                  "total": count(r"PROGRAM TOTALS")}))
