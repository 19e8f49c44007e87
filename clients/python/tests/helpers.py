"""Helpers the tests share: bounded waits and looks at the server's state."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import httpx
import pytest

import leasehold


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Polls ``predicate`` until it is truthy; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def lock_state(raw: httpx.Client, name: str) -> Optional[dict[str, Any]]:
    """The lock's inspection, or None when the server does not know it (never taken)."""
    r = raw.get(f"/v1/locks/{name}")
    if r.status_code == 404:
        return None
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def is_free(raw: httpx.Client, name: str) -> bool:
    state = lock_state(raw, name)
    return state is None or not state.get("held")


def lease_state(raw: httpx.Client, name: str, lease_id: str, resource: str = "locks") -> str:
    r = raw.get(f"/v1/{resource}/{name}/leases/{lease_id}")
    r.raise_for_status()
    return str(r.json()["state"])


def assert_given_up_as_revoked(
    lease: leasehold.Lease, raw: httpx.Client, deadline: str, answered: float, within: tuple[float, float]
) -> None:
    """A revocation ignored: ``lease`` is given up as lost (revoked), still showing the
    revocation whose ``deadline`` the server answered, ``within`` (low, high) seconds of that
    answer (``answered``, monotonic): at the deadline less the margin, so the work stops while
    the server still holds the lock for it (it evicts only at the deadline)."""
    assert lease.lost.wait(5), "the lease was never given up"
    lost_after = time.monotonic() - answered
    assert lease.lost_reason == "revoked"
    assert lease.revocation is not None and lease.revocation.deadline == deadline
    low, high = within
    assert low < lost_after < high, f"given up {lost_after:.2f} s after the revocation"
    assert lease_state(raw, lease.name, lease.lease_id) == "held"


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Prints a measurement so that it shows in the test run's output."""
    with capsys.disabled():
        print(f"\n    {line}", end="")


def loss_line(what: str, sent_at: float, answered_at: float, told_at: float) -> str:
    """How long after the force release the lease's holder was told (monotonic seconds in)."""
    return (
        f"loss latency ({what}): told {(told_at - answered_at) * 1000:+.1f} ms from the force "
        f"release's answer ({(told_at - sent_at) * 1000:.1f} ms from its request; the answer "
        f"took {(answered_at - sent_at) * 1000:.1f} ms)"
    )
