"""A RedLock lease's holder hears the signals any lease's does (clients/PROTOCOL.md, "Signals
before the loss"): its watch tells what a majority of the nodes say, and ``contended`` counts
the RedLock requests waiting for the name. Against the server test.sh started with three RedLock
nodes of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers import assert_given_up_as_revoked, lease_state, wait_until

import leasehold


@pytest.fixture
def redlock_raw(redlock_url: str) -> Iterator[httpx.Client]:
    """Plain HTTP to the RedLock server, to look at the lease there."""
    with httpx.Client(base_url=redlock_url, timeout=10) as c:
        yield c


def test_a_redlock_holder_hears_contended_and_a_revocation(
    redlock_url: str, redlock_admin_token: str, redlock_raw: httpx.Client, name: str
) -> None:
    """clients/parity.json ``redlockSignals``: contended while a RedLock request waits, then an
    operator's revocation, ignored here: given up as lost (revoked) before the deadline less the
    margin, as test_a_revocation_ignored_is_a_loss_before_the_deadline checks of a main-Redis
    lease."""
    signals: list[leasehold.Signal] = []
    waiter_failed: list[BaseException] = []

    def wait_for_it() -> None:
        # One server-side wait (its --max-wait-ms is the default): it gives up, as the lease
        # is never released before the revocation.
        try:
            with leasehold.Client(redlock_url) as other:
                with pytest.raises(leasehold.LockHeld):
                    other.acquire(name, ttl_ms=10000, kind="redlock", wait_ms=3000)
        except BaseException as error:  # the assertion, seen by the test's thread
            waiter_failed.append(error)

    with leasehold.Client(redlock_url) as client, leasehold.Client(redlock_url, api_key=redlock_admin_token) as admin:
        with pytest.raises(leasehold.LeaseLost) as raised:
            with client.lock(name, ttl_ms=10000, kind="redlock") as lease:  # loss margin 1.67 s
                lease.on_signal(signals.append)
                assert lease.kind == "redlock"
                assert lease._watching.wait(5)
                waiter = threading.Thread(target=wait_for_it)
                waiter.start()
                try:
                    told = wait_until(
                        lambda: [s for s in signals if s.kind == "contended" and s.waiters], 5, f"contended: {signals}"
                    )
                finally:
                    waiter.join(10)
                assert not waiter.is_alive() and not waiter_failed, waiter_failed
                assert (told[0].waiters or 0) >= 1 and told[0].lock == name and told[0].id

                answer = admin.revoke(name, 3000, reason="rotate the nodes")
                answered = time.monotonic()
                [revoked] = answer["leases"]
                assert revoked["lease_id"] == lease.lease_id
                deadline = revoked["revocation"]["deadline"]
                assert lease.revocation_requested.wait(3), "the revocation was never told"
                asked = [s for s in signals if s.kind == "revocation_requested"]
                assert len(asked) == 1 and asked[0].revocation is not None
                assert asked[0].revocation.reason == "rotate the nodes" and asked[0].revocation.deadline == deadline
                # The deadline less the margin: about 1.3 s after the answer.
                assert_given_up_as_revoked(lease, redlock_raw, deadline, answered, within=(0.8, 2.5))
        assert raised.value.reason == "revoked"
    # The release at the block's end gave the lock back (on the nodes) before the deadline.
    assert lease_state(redlock_raw, name, lease.lease_id) == "released"
