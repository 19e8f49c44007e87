"""Why a caller waits (issue 56): a refusal says how long the holder has held the lock and,
once the server has seen a few holds of the name, how long it should still hold it; a fair
lock's waiter is told its place and the estimate (``on_queued``). And when a lease's watch
tells ``expiring``: ``expiring_slack_ms``, the client's or the lock's own."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from helpers import is_free, wait_until

import leasehold


def _hold_briefly(client: leasehold.Client, name: str, times: int, kind: str = "reentrant") -> None:
    """Past holds of ``name`` (about 300 ms each): what the server estimates a wait from."""
    for _ in range(times):
        with client.lock(name, kind=kind, ttl_ms=5000):
            time.sleep(0.3)


def test_a_refusal_says_how_long_the_lock_is_held(url: str, name: str) -> None:
    with leasehold.Client(url) as holder, leasehold.Client(url) as other:
        with holder.lock(f"{name}-new", ttl_ms=5000, holder="first"):
            time.sleep(0.1)
            with pytest.raises(leasehold.LockHeld) as raised:
                with other.lock(f"{name}-new", wait_ms=0):
                    pass
        first = raised.value
        assert first.holder == "first"
        assert first.held_since is not None and first.held_since.endswith("Z")
        assert first.held_for_ms is not None and first.held_for_ms >= 100
        assert first.estimated_wait_ms is None  # no past holds of the name

        # (Past holds first: the server reads a name's hold times at most once a second.)
        _hold_briefly(holder, name, 3)
        with holder.lock(name, ttl_ms=5000, holder="second"):
            with pytest.raises(leasehold.LockHeld) as raised:
                with other.lock(name, wait_ms=0):
                    pass
        refused = raised.value
        assert refused.holder == "second"
        assert refused.held_for_ms is not None and refused.held_for_ms >= 0
        # Just granted: about the median of the past holds (300 ms) is left.
        assert isinstance(refused.estimated_wait_ms, int) and 100 < refused.estimated_wait_ms < 1000


def test_a_fair_waiter_is_told_its_place(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    _hold_briefly(client, name, 3, kind="fair")
    head = client.acquire(name, kind="fair", ttl_ms=10000, holder="head")
    queued: list[leasehold.Queued] = []
    got: list[leasehold.Lease] = []

    def waiter() -> None:
        with client.lock(name, kind="fair", wait_ms=15000, on_queued=queued.append) as lease:
            got.append(lease)

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        # The server cuts each poll at 2 s (test.sh): each 202 is told, the first at once.
        wait_until(lambda: len(queued) >= 2, what="two answers in line")
        for place in queued:
            assert place.position == 1 and place.held_by == "head"
            assert isinstance(place.estimated_wait_ms, int) and place.estimated_wait_ms >= 0
            assert place.held_for_ms is not None
        # Told at once, behind a hold just granted: about the median past hold is left (later,
        # the head outlasting every past hold, the estimate is 0: it may end at any moment).
        assert 0 < queued[0].estimated_wait_ms < 1000  # type: ignore[operator]
        assert queued[1].held_for_ms >= queued[0].held_for_ms  # type: ignore[operator]
    finally:
        head.release()
        thread.join(10)
    assert len(got) == 1 and got[0].fencing_token > head.fencing_token
    assert is_free(raw, name)


def test_a_fair_wait_running_out_says_who_holds(client: leasehold.Client, name: str) -> None:
    with client.lock(name, kind="fair", ttl_ms=10000, holder="head"):
        refused: list[leasehold.LockHeld] = []

        def waiter() -> None:
            try:
                with client.lock(name, kind="fair", wait_ms=500):
                    pass
            except leasehold.LockHeld as e:
                refused.append(e)

        thread = threading.Thread(target=waiter)
        thread.start()
        thread.join(10)
    [error] = refused
    assert error.get("position") == 1 and error.holder == "head" and error.held_for_ms is not None


def test_expiring_comes_at_the_slack(url: str, name: str) -> None:
    watches: list[httpx.Request] = []
    blocked = threading.Event()

    def hook(request: httpx.Request) -> None:
        if request.url.path.endswith("/watch"):
            watches.append(request)
        if blocked.is_set() and request.url.path.endswith("/heartbeat"):
            # As a paused or cut-off process: its heartbeats no longer arrive.
            raise httpx.ConnectError("heartbeats stopped by the test", request=request)

    with leasehold.Client(url, expiring_slack_ms=500) as client:
        client._http.event_hooks["request"].append(hook)
        with client.lock(f"{name}-client", ttl_ms=3000) as lease:
            assert lease._watching.wait(5)
        signals: list[leasehold.Signal] = []
        with pytest.raises(leasehold.LeaseLost) as raised:
            # The lock's own slack: 1.4 s of the 3 s TTL, before the loss margin (1 s).
            with client.lock(name, ttl_ms=3000, expiring_slack_ms=1400) as lease:
                lease.on_signal(signals.append)
                assert lease._watching.wait(5)
                blocked.set()
                stopped = time.monotonic()
                wait_until(lambda: any(s.kind == "expiring" for s in signals), what="expiring")
                told = time.monotonic() - stopped
                wait_until(lease.lost.is_set, what="the loss")
        assert raised.value.reason == "unrenewable"
    [expiring] = [s for s in signals if s.kind == "expiring"]
    # Told once 1.4 s were left (the default would be 1 s, the client's 0.5 s), at most 1.6 s
    # after the heartbeats stopped (the last one went out up to a third of the TTL before).
    assert expiring.remaining_ms is not None and 1000 < expiring.remaining_ms <= 1400
    assert told < 1.9
    slacks = [w.url.params.get("expiring_slack_ms") for w in watches]
    assert slacks[0] == "500" and slacks[1:] and set(slacks[1:]) == {"1400"}


def test_expiring_slack_must_be_positive(url: str, name: str) -> None:
    with pytest.raises(ValueError, match="expiring_slack_ms"):
        leasehold.Client(url, expiring_slack_ms=0)
    with leasehold.Client(url) as client:
        with pytest.raises(ValueError, match="expiring_slack_ms"):
            client.lock(name, expiring_slack_ms=-5)
        with pytest.raises(ValueError, match="expiring_slack_ms"):
            client.acquire(name, expiring_slack_ms=1.5)  # type: ignore[arg-type]
