"""Signals before the loss (clients/PROTOCOL.md): each one the watch tells reaches
``lease.on_signal``; an operator's revocation (``client.revoke``) is told on the lease, and a
lease not released in time is given up as lost (reason ``revoked``) before its deadline; the
watch is opened again with ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime

import httpx
import pytest
from helpers import assert_given_up_as_revoked, lease_state, wait_until
from proxy import FaultyProxy

import leasehold


def _seconds_between(start: str, end: str) -> float:
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def test_a_revocation_honoured_is_no_loss(
    client: leasehold.Client, admin: leasehold.Client, raw: httpx.Client, name: str
) -> None:
    signals: list[leasehold.Signal] = []
    with client.lock(name, ttl_ms=3000) as lease:  # loss margin 1 s
        lease.on_signal(signals.append)
        assert lease._watching.wait(5)
        answer = admin.revoke(name, 5000, reason="deploy v2")
        assert answer["lock"] == name
        [revoked] = answer["leases"]
        assert revoked["lease_id"] == lease.lease_id and revoked["again"] is False
        assert revoked["revocation"]["reason"] == "deploy v2"

        assert lease.revocation_requested.wait(3), "the revocation was never told"
        revocation = lease.revocation
        assert revocation is not None
        assert revocation.reason == "deploy v2"
        assert revocation.requested_by == "admin token"
        assert revocation.deadline == revoked["revocation"]["deadline"]
        assert 4.9 < _seconds_between(revocation.requested_at, revocation.deadline) < 5.1
        told = [s for s in signals if s.kind == "revocation_requested"]
        assert len(told) == 1 and told[0].revocation == revocation and told[0].lock == name
        # Asked again: the first deadline stands.
        again = admin.revoke(name, 60000, reason="later")["leases"][0]
        assert again["again"] is True and again["revocation"]["deadline"] == revocation.deadline
        lease.check()  # not lost: the deadline less the margin is 4 s away
    # The block's end released it: no loss.
    assert not lease.lost.is_set() and lease.lost_reason is None
    assert lease_state(raw, name, lease.lease_id) == "released"


def test_a_revocation_ignored_is_a_loss_before_the_deadline(
    client: leasehold.Client, admin: leasehold.Client, raw: httpx.Client, name: str
) -> None:
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.lock(name, ttl_ms=6000) as lease:  # loss margin 1 s
            assert lease._watching.wait(5)
            answer = admin.revoke(name, 3000, reason="maintenance")
            answered = time.monotonic()
            deadline = answer["leases"][0]["revocation"]["deadline"]
            # The deadline less the margin: about 2 s after the answer.
            assert_given_up_as_revoked(lease, raw, deadline, answered, within=(1.5, 3.0))
    assert raised.value.reason == "revoked"
    # The release at the block's end gave the lock back before the deadline.
    assert lease_state(raw, name, lease.lease_id) == "released"


def test_a_revocation_told_by_a_heartbeat_without_the_watch(url: str, admin: leasehold.Client, name: str) -> None:
    signals: list[leasehold.Signal] = []
    with leasehold.Client(url, watch=False) as client:
        lease = client.acquire(name, ttl_ms=3000)  # heartbeats every second
        try:
            lease.on_signal(signals.append)
            answered = time.monotonic()
            admin.revoke(name, 4000)
            assert lease.revocation_requested.wait(2.5), "no heartbeat told the revocation"
            assert lease.revocation is not None and lease.revocation.reason == ""
            assert [s.kind for s in signals] == ["revocation_requested"] and signals[0].id is None
            assert lease.lost.wait(5)
            assert lease.lost_reason == "revoked"
            assert time.monotonic() - answered < 4.0, "lost after the deadline"
        finally:
            lease.release()


def test_a_member_revocation_told_by_a_multilease_heartbeat_without_the_watch(
    url: str, admin: leasehold.Client, name: str
) -> None:
    a, b = f"{name}-a", f"{name}-b"
    signals: list[leasehold.Signal] = []
    with leasehold.Client(url, watch=False) as client:
        lease = client.acquire_multilease([a, b], ttl_ms=3000)  # heartbeats every second
        try:
            lease.on_signal(signals.append)
            answered = time.monotonic()
            deadline = admin.revoke(b, 4000, reason="rebalance")["leases"][0]["revocation"]["deadline"]
            assert lease.revocation_requested.wait(2.5), "no heartbeat told the member's revocation"
            assert lease.revocation is not None and lease.revocation.reason == "rebalance"
            assert lease.revocation.deadline == deadline
            assert [(s.kind, s.lock) for s in signals] == [("revocation_requested", b)]
            assert signals[0].id is None and signals[0].lease_id == lease.lease_id
            assert lease.lost.wait(5)
            assert lease.lost_reason == "revoked"
            assert time.monotonic() - answered < 4.0, "lost after the deadline"
        finally:
            lease.release()


def test_a_multilease_keeps_the_revocation_with_the_earliest_deadline(
    client: leasehold.Client, admin: leasehold.Client, name: str
) -> None:
    """clients/parity.json ``multileaseRevocationEarliestDeadline``: of its members'
    revocations a multilease keeps the one with the earliest deadline (a later-told one with an
    earlier deadline replaces it; one with a later deadline changes nothing), is given up at its
    deadline less the margin naming that member, and each member shows its own revocation."""
    a, b, c = f"{name}-a", f"{name}-b", f"{name}-c"
    signals: list[leasehold.Signal] = []
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.multilease([a, b, c], ttl_ms=3000) as lease:  # loss margin 1 s
            lease.on_signal(signals.append)
            assert lease._watching.wait(5)
            first = admin.revoke(a, 8000, reason="first")["leases"][0]["revocation"]["deadline"]
            wait_until(lambda: lease.revocation is not None, 3, "the first revocation told")
            assert lease.revocation is not None and lease.revocation.deadline == first
            second = admin.revoke(b, 3000, reason="second")["leases"][0]["revocation"]["deadline"]
            answered = time.monotonic()
            wait_until(lambda: lease.revocation and lease.revocation.deadline == second, 3, "the earlier deadline kept")
            admin.revoke(c, 6000, reason="third")  # later than the kept one: nothing changes
            wait_until(lambda: len(signals) == 3, 3, "every revocation told")
            assert [(s.kind, s.lock) for s in signals] == [("revocation_requested", m) for m in (a, b, c)]
            assert lease.revocation is not None and lease.revocation.reason == "second"
            assert lease.lost.wait(5), "the lease was never given up"
            lost_after = time.monotonic() - answered
            # b's deadline less the margin: about 2 s after b's revocation (a's would be 7 s).
            assert 1.5 < lost_after < 3.0, f"given up {lost_after:.2f} s after the earliest revocation"
            assert lease.lost_reason == "revoked"
            shown = {m.lock: m.revocation.reason if m.revocation else None for m in lease.members}
            assert shown == {a: "first", b: "second", c: "third"}
            assert [m.revocation.deadline for m in lease.members if m.lock == b and m.revocation] == [second]
    assert raised.value.reason == "revoked" and raised.value.member == b
    assert repr(b) in raised.value.detail, raised.value.detail


def test_contended_tells_the_waiters(client: leasehold.Client, url: str, name: str) -> None:
    signals: list[leasehold.Signal] = []
    contended = threading.Event()

    def seen(signal: leasehold.Signal) -> None:
        signals.append(signal)
        if signal.kind == "contended" and signal.waiters:
            contended.set()

    got: list[leasehold.Lease] = []
    with client.lock(name, ttl_ms=10000) as lease:
        lease.on_signal(seen)
        assert lease._watching.wait(5)

        def wait_for_it() -> None:
            with leasehold.Client(url) as other:
                with other.lock(name, wait_ms=8000) as second:
                    got.append(second)

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        try:
            assert contended.wait(5), f"no contended signal: {signals}"
        finally:
            lease.release()
            waiter.join(10)
    signal = next(s for s in signals if s.kind == "contended")
    assert signal.waiters == 1 and signal.lock == name and signal.id
    assert got, "the waiter got the lock once released"


def test_the_watch_is_opened_again_with_last_event_id(url: str, name: str) -> None:
    signals: list[leasehold.Signal] = []
    with FaultyProxy(url) as proxy, leasehold.Client(proxy.url) as client:
        with client.lock(name, ttl_ms=10000) as lease:
            lease.on_signal(signals.append)
            assert lease._watching.wait(5)

            def wait_for_it() -> None:  # one server-side wait (its --max-wait-ms is 2 s)
                with leasehold.Client(url) as other:
                    with pytest.raises(leasehold.LockHeld):
                        other.acquire(name, wait_ms=1900)

            waiter = threading.Thread(target=wait_for_it)
            waiter.start()
            try:
                wait_until(lambda: signals, 5, "contended")
                last = signals[-1].id
                assert last is not None
                assert proxy.cut_streams() == 1
                path = f"/v1/locks/{name}/leases/{lease.lease_id}/watch"
                reopened = wait_until(lambda: proxy.requests("GET", path)[1:], 5, "the watch opened again")
                assert reopened[0].headers.get("last-event-id") == last
                # The server goes on counting: what it tells next (the waiters again, or none
                # now) has the next ids.
                wait_until(lambda: len(signals) >= 2, 5, "a signal on the reopened watch")
                assert int(signals[1].id or 0) > int(last), [s.id for s in signals]
            finally:
                waiter.join(10)


def test_async_a_revocation_honoured(url: str, admin: leasehold.Client, name: str) -> None:
    async def main() -> None:
        async with leasehold.AsyncClient(url) as client:
            signals: list[leasehold.Signal] = []
            async with client.lock(name, ttl_ms=3000) as lease:
                remove = lease.on_signal(signals.append)
                assert await asyncio.wait_for(lease._watching.wait(), 5)
                await asyncio.to_thread(admin.revoke, name, 5000, "async test")
                await asyncio.wait_for(lease.revocation_requested.wait(), 3)
                assert lease.revocation is not None and lease.revocation.reason == "async test"
                assert [s.kind for s in signals] == ["revocation_requested"]
                remove()
            assert not lease.lost.is_set()

        async with leasehold.AsyncClient(url) as client:
            lease = await client.acquire(name, ttl_ms=3000)
            await asyncio.wait_for(lease._watching.wait(), 5)
            await asyncio.to_thread(admin.revoke, name, 1500)  # given up 0.5 s later (margin 1 s)
            await asyncio.wait_for(lease.lost.wait(), 1.5)
            assert lease.lost_reason == "revoked"
            await lease.release()

    asyncio.run(main())


def test_revoke_errors_are_typed(url: str, admin: leasehold.Client, client: leasehold.Client, name: str) -> None:
    with pytest.raises(leasehold.NotFound) as free:
        admin.revoke(name, 1000)
    assert free.value.code == "lock_not_found" and free.value.status == 404
    with client.lock(name, ttl_ms=5000):
        with pytest.raises(leasehold.NotFound) as other:
            admin.revoke(name, 1000, lease_id="00000000-0000-4000-8000-000000000000")
        assert other.value.code == "lease_not_found"
        with pytest.raises(leasehold.InvalidRequest) as invalid:
            admin.revoke(name, 3_600_001)
        assert invalid.value.code == "invalid_body"
        with pytest.raises(leasehold.Unauthorized):
            client.revoke(name, 1000)


def test_async_revoke_errors_are_typed(url: str, admin_token: str, name: str) -> None:
    async def main() -> None:
        async with leasehold.AsyncClient(url, api_key=admin_token) as admin:
            with pytest.raises(leasehold.NotFound) as free:
                await admin.revoke(name, 1000, reason="nobody")
            assert free.value.code == "lock_not_found"

    asyncio.run(main())
