"""Formatting and lookup helpers of the benchmark report (benches/report.py)."""
import json


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return rows


def find(rows, **match):
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def ms(v):
    return "–" if v is None else f"{v:.3f}"


def num(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    if a is None or b in (None, 0):
        return "–"
    return f"{a / b:.2f}×"


def pct_of(block, q):
    return None if not block else block.get(q)


def yes(ok):
    return "–" if ok is None else ("yes" if ok else "**no**")
