"""Multileases and lock-delays against the real server, through both halves of the client:
all or nothing, the loss of a member is the loss of the whole (``lease.lost``, LeaseLost
naming the member), each lock's fencing token, and a lock-delay refusing the next holder
(LockDelay) but not after a release."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from helpers import is_free, lock_state

import leasehold


def test_a_multilease_is_all_or_nothing(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    a, b = f"{name}-a", f"{name}-b"
    with client.lock(b, kind="write", holder="other"):
        with pytest.raises(leasehold.LockHeld) as refused:
            with client.multilease([a, (b, "write")], wait_ms=0):
                pytest.fail("granted while a lock was held")
        assert [(m["lock"], m["holder"]) for m in refused.value.get("members")] == [(b, "other")]
        assert is_free(raw, a), f"{a} held after a refused multilease"
    with client.multilease([a, (b, "write")], holder="both") as lease:
        assert lease.kind == "multilease" and lease.name == f"{a},{b}"
        assert [(m.lock, m.kind) for m in lease.members] == [(a, "reentrant"), (b, "write")]
        for member in lease.members:
            holder = (lock_state(raw, member.lock) or {})["holders"][0]
            assert (holder["lease_id"], holder["fencing_token"]) == (member.lease_id, member.fencing_token)
            assert member.fencing_token > 0
        assert client.inspect_multilease(lease.lease_id)["state"] == "held"
    assert is_free(raw, a) and is_free(raw, b)


def test_a_member_lost_is_the_multilease_lost_and_its_lock_delay_holds(
    client: leasehold.Client, admin: leasehold.Client, raw: httpx.Client, name: str
) -> None:
    a, b = f"{name}-a", f"{name}-b"
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.multilease([a, b], ttl_ms=30000, lock_delay_ms=30000) as lease:
            admin.force_release(b, reason="test")
            assert lease.lost.wait(10), "the multilease was not lost within 10 s"
    assert raised.value.reason == "force_released" and raised.value.member == b
    # The block's release gave the other lock back at once.
    assert is_free(raw, a), f"{a} kept after the lost multilease's release"
    with pytest.raises(leasehold.LockDelay) as delayed:
        client.acquire(b, wait_ms=0)
    assert delayed.value.code == "lock_delay" and delayed.value.delayed_until
    assert (delayed.value.retry_after or 0) > 0


def test_a_lock_delay_is_waited_through_and_not_kept_after_a_release(
    client: leasehold.Client, admin: leasehold.Client, name: str
) -> None:
    delay_ms = 1500
    lease = client.acquire(name, ttl_ms=20000, lock_delay_ms=delay_ms)
    admin.force_release(name, reason="test")
    freed = time.monotonic()
    assert lease.lost.wait(10)
    lease.release()
    with pytest.raises(leasehold.LockDelay):
        client.acquire(name, wait_ms=0)
    # Longer than the delay and than the server's 2 s --max-wait-ms, which the client re-asks past.
    with client.lock(name, wait_ms=10000, lock_delay_ms=delay_ms):
        waited = time.monotonic() - freed
        assert waited >= delay_ms / 1000 - 0.1, f"granted {waited:.2f} s after the force release"
    with client.lock(name, wait_ms=0):
        pass  # a release leaves no delay


def test_the_async_multilease_is_lost_with_a_member(url: str, admin: leasehold.Client, name: str) -> None:
    a, b = f"{name}-a", f"{name}-b"

    async def main() -> leasehold.LeaseLost:
        async with leasehold.AsyncClient(url) as client:
            with pytest.raises(leasehold.LeaseLost) as raised:
                async with client.multilease([a, b], ttl_ms=30000) as lease:
                    await asyncio.to_thread(admin.force_release, a, "test")
                    await asyncio.wait_for(lease.lost.wait(), 10)
            return raised.value

    loss = asyncio.run(main())
    assert loss.member == a and loss.reason == "force_released"
