"""Loss: told to the block's work at once (watch) or within a heartbeat interval (410), and a
heartbeat that keeps a lease alive for many TTLs."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from helpers import lease_state, lock_state, loss_line, report

import leasehold


def test_loss_after_a_force_release_is_told_at_once(
    client: leasehold.Client,
    admin: leasehold.Client,
    raw: httpx.Client,
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    told_at: list[float] = []
    work_started = threading.Event()

    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.lock(name, ttl_ms=30000) as lease:

            def work() -> None:
                # The block's work: runs until its lease is lost.
                work_started.set()
                lease.lost.wait(20)
                told_at.append(time.monotonic())

            worker = threading.Thread(target=work)
            worker.start()
            work_started.wait(5)
            # Wait until the watch stream is open, so the latency measured is the stream's.
            assert lease._watching.wait(5)
            sent_at = time.monotonic()
            answer = admin.force_release(name, reason="test")
            answered_at = time.monotonic()
            assert answer["released"] is True
            worker.join(20)
            assert told_at, "the work was never told"
            assert lease.lost_reason == "force_released"
            with pytest.raises(leasehold.LeaseLost):
                lease.check()
    report(capsys, loss_line("sync, watch stream", sent_at, answered_at, told_at[0]))
    assert raised.value.reason == "force_released" and raised.value.code == "lease_lost"
    assert told_at[0] - answered_at < 1.0
    assert lease_state(raw, name, lease.lease_id) == "force_released"


def test_loss_without_the_watch_comes_with_the_next_heartbeat(
    url: str, admin: leasehold.Client, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ttl_ms = 900  # heartbeats every 300 ms
    with leasehold.Client(url, watch=False) as client:
        with pytest.raises(leasehold.LeaseLost) as raised:
            with client.lock(name, ttl_ms=ttl_ms) as lease:
                admin.force_release(name)
                answered_at = time.monotonic()
                assert lease.lost.wait(5)
                told_at = time.monotonic()
    latency_ms = (told_at - answered_at) * 1000
    report(capsys, f"loss latency (sync, heartbeat 410 only, TTL {ttl_ms} ms): {latency_ms:.1f} ms")
    assert raised.value.reason == "force_released"
    assert latency_ms <= ttl_ms / 3 + 500  # within one heartbeat interval (plus a round trip)


def test_a_heartbeat_keeps_the_lease_across_three_ttls(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    ttl_ms = 1500  # a heartbeat every 500 ms, each with 500 ms to answer
    with client.lock(name, ttl_ms=ttl_ms) as lease:
        started = time.monotonic()
        # Nothing but waiting for a loss that must not come, for over 3 TTLs.
        assert not lease.lost.wait(3.5 * ttl_ms / 1000)
        assert time.monotonic() - started > 3 * ttl_ms / 1000
        assert lease_state(raw, name, lease.lease_id) == "held"
        with pytest.raises(leasehold.LockHeld):
            client.acquire(name, wait_ms=0)
        assert lease.expires_in > 0
    assert lease_state(raw, name, lease.lease_id) == "released"


def test_a_semaphore_heartbeat_keeps_its_permits(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    ttl_ms = 1500
    with client.semaphore(name, limit=1, ttl_ms=ttl_ms) as lease:
        assert not lease.lost.wait(3.5 * ttl_ms / 1000)
        assert lease_state(raw, name, lease.lease_id, "semaphores") == "held"
        with pytest.raises(leasehold.NoPermits):
            client.acquire_semaphore(name, 1, wait_ms=0)
    assert client.inspect_semaphore(name)["used"] == 0


def test_a_lost_lease_is_not_released_again_and_a_nested_block_raises_once(
    client: leasehold.Client, admin: leasehold.Client, raw: httpx.Client, name: str
) -> None:
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.lock(name) as outer:
            with client.lock(name) as inner:
                assert inner is outer
                admin.force_release(name)
                assert outer.lost.wait(5)
    # One LeaseLost, raised by the inner block and passed through the outer one.
    assert raised.value.__context__ is None
    assert lock_state(raw, name) is None or not lock_state(raw, name)["held"]  # type: ignore[index]


def test_an_exception_wins_over_nothing_but_loss_is_still_reported(
    client: leasehold.Client, admin: leasehold.Client, name: str
) -> None:
    """The block failed because its lease was lost: LeaseLost, with the block's error as its
    context."""
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.lock(name) as lease:
            admin.force_release(name)
            assert lease.lost.wait(5)
            raise RuntimeError("the write was refused: stale fencing token")
    assert isinstance(raised.value.__context__, RuntimeError)


def test_a_semaphore_lease_is_told_its_loss(
    client: leasehold.Client, admin: leasehold.Client, raw: httpx.Client, name: str
) -> None:
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.semaphore(name, limit=2, permits=2) as lease:
            assert lease._watching.wait(5)
            admin.force_release(name)  # on a semaphore's name: every permit comes back
            assert lease.lost.wait(5)
    assert raised.value.reason == "force_released"
    assert lease_state(raw, name, lease.lease_id, "semaphores") == "force_released"


def test_a_refused_watch_leaves_loss_to_the_heartbeats(keyed_url: str, keyed_admin_token: str, key_secret: str) -> None:
    """The keyed server allows a key 2 streams (--max-streams-per-client 2, which counts lease
    watches): a third lease's watch is refused (429), and its loss still comes, with the
    next heartbeat."""
    with leasehold.Client(keyed_url, api_key=key_secret) as client:
        with leasehold.Client(keyed_url, api_key=keyed_admin_token) as admin:
            with client.lock("jobs:first") as first, client.lock("jobs:second") as second:
                assert first._watching.wait(5) and second._watching.wait(5)
                with pytest.raises(leasehold.LeaseLost):
                    with client.lock("jobs:third", ttl_ms=900) as third:
                        admin.force_release("jobs:third")
                        answered_at = time.monotonic()
                        assert third.lost.wait(5)
                        assert time.monotonic() - answered_at <= 0.3 + 0.5
                assert not third._watching.is_set()  # it never had a stream
                assert not first.lost.is_set() and not second.lost.is_set()
