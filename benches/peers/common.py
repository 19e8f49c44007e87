"""What the peer benchmarks share: percentiles and the handoff count, so every system is
measured the same way."""


def pct(samples):
    """p50/p99/p999/max of durations in seconds, as milliseconds."""
    if not samples:
        return None
    s = sorted(samples)
    pick = lambda q: round(s[round((len(s) - 1) * q)] * 1e3, 3)
    return {"p50": pick(0.5), "p99": pick(0.99), "p999": pick(0.999), "max": pick(1.0), "n": len(s)}


def handoffs(events):
    """(time, "grant"|"release", client) events -> (handoff durations, self-regrants, grants).

    A handoff is the lock passing to another client, from the release to the next grant; a
    client re-taking the lock it just released is a self-regrant, not a handoff."""
    events = sorted(events)
    lat, last_release, self_regrants = [], None, 0
    for at, kind, who in events:
        if kind == "release":
            last_release = (at, who)
        elif last_release is not None:
            if who == last_release[1]:
                self_regrants += 1
            else:
                lat.append(at - last_release[0])
            last_release = None
    return lat, self_regrants, sum(1 for e in events if e[1] == "grant")
