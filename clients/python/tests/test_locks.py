"""Locks, semaphores, read/write and fair locks through the synchronous client."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from helpers import is_free, lease_state, lock_state, wait_until

import leasehold


def test_acquire_wait_release(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with client.lock(name, ttl_ms=5000, holder="first") as first:
        assert first.name == name and first.kind == "reentrant" and first.holder == "first"
        assert first.fencing_token > 0 and first.lease_id and first.token.startswith("lht_")
        assert not first.lost.is_set()
        assert lease_state(raw, name, first.lease_id) == "held"

        # Someone else, not waiting: LockHeld with who holds it and when to come back.
        with pytest.raises(leasehold.LockHeld) as refused:
            client.acquire(name, wait_ms=0, holder="second")
        assert refused.value.code == "lock_held" and refused.value.status == 409
        assert refused.value.holder == "first"
        assert refused.value.lease_id == first.lease_id
        assert refused.value.retry_after is not None and 0 < refused.value.retry_after <= 5

        # A waiter in another thread gets it once the block ends. Its wait (6 s) is longer
        # than the server's --max-wait-ms (2 s): the client asks again, unseen.
        got: list[leasehold.Lease] = []

        def waiter() -> None:
            with client.lock(name, wait_ms=6000, holder="waiter") as lease:
                got.append(lease)
                assert lock_state(raw, name)["holders"][0]["lease_id"] == lease.lease_id  # type: ignore[index]

        thread = threading.Thread(target=waiter)
        thread.start()
        wait_until(lambda: (lock_state(raw, name) or {}).get("waiting_count"), what="the waiter to wait")
        assert not got
    thread.join(10)
    assert not thread.is_alive()
    assert got and got[0].fencing_token > first.fencing_token
    assert lease_state(raw, name, first.lease_id) == "released"
    assert lease_state(raw, name, got[0].lease_id) == "released"
    assert is_free(raw, name)


def test_acquire_and_release_by_hand(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    lease = client.acquire(name, ttl_ms=2000)
    try:
        assert lease_state(raw, name, lease.lease_id) == "held"
    finally:
        lease.release()
    lease.release()  # idempotent
    assert is_free(raw, name)
    with client.acquire(name) as again:  # a lease is a context manager too
        assert again.lease_id != lease.lease_id
    assert is_free(raw, name)


def test_an_exception_in_the_block_releases(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with pytest.raises(ZeroDivisionError):
        with client.lock(name) as lease:
            raise ZeroDivisionError("the work failed")
    assert lease_state(raw, name, lease.lease_id) == "released"
    assert not lease.lost.is_set()


def test_wait_without_limit(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    holder = client.acquire(name, ttl_ms=5000)
    done = threading.Event()

    def waiter() -> None:
        with client.lock(name, wait_ms=None):
            done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until(lambda: (lock_state(raw, name) or {}).get("waiting_count"), what="the waiter to wait")
    holder.release()
    thread.join(10)
    assert done.is_set()


def test_reentry(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with client.lock(name, ttl_ms=3000) as outer:
        assert outer.reentry_count == 1
        with client.lock(name) as inner:
            # The same lease, one level deeper: same id, same fencing token, same TTL.
            assert inner is outer
            assert outer.reentry_count == 2 and outer.ttl_ms == 3000
            holders = lock_state(raw, name)["holders"]  # type: ignore[index]
            assert len(holders) == 1 and holders[0]["reentry_count"] == 2
        assert outer.reentry_count == 1
        # Still held after the inner block.
        assert lock_state(raw, name)["holders"][0]["reentry_count"] == 1  # type: ignore[index]
        with pytest.raises(leasehold.LockHeld):
            client.acquire(name, wait_ms=0)

        # Another thread is another holder: it does not re-enter, it waits.
        refused: list[BaseException] = []

        def other() -> None:
            try:
                with client.lock(name, wait_ms=200):
                    pass
            except leasehold.LockHeld as e:
                refused.append(e)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
        assert len(refused) == 1
    assert is_free(raw, name)


def test_exclusive_locks_refuse_reentry(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with client.lock(name, kind="exclusive") as lease:
        with pytest.raises(leasehold.NotReentrant) as e:
            with client.lock(name, kind="exclusive"):
                pass
        assert e.value.code == "not_reentrant" and e.value.status == 409
        assert not lease.lost.is_set()
        assert lock_state(raw, name)["holders"][0]["reentry_count"] == 1  # type: ignore[index]
    assert is_free(raw, name)


def test_semaphore(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with client.semaphore(name, limit=3, permits=2, ttl_ms=5000) as big:
        assert big.kind == "semaphore" and big.permits == 2
        # Semaphore blocks do not re-enter: a nested one takes more permits.
        with client.semaphore(name, 3) as small:
            assert small.lease_id != big.lease_id and small.permits == 1
            state = client.inspect_semaphore(name)
            assert state["used"] == 3 and state["available"] == 0
            with pytest.raises(leasehold.NoPermits) as e:
                client.acquire_semaphore(name, 3, wait_ms=200)
            assert isinstance(e.value, leasehold.LockHeld)
            assert e.value.code == "no_permits" and e.value.retry_after is not None

        # A waiter gets a permit as soon as one comes back.
        got: list[leasehold.Lease] = []
        blocker = client.acquire_semaphore(name, 3)

        def waiter() -> None:
            with client.semaphore(name, 3, wait_ms=5000) as lease:
                got.append(lease)

        thread = threading.Thread(target=waiter)
        thread.start()
        wait_until(lambda: client.inspect_semaphore(name).get("waiting_count"), what="the waiter to wait")
        blocker.release()
        thread.join(10)
        assert len(got) == 1

        with pytest.raises(leasehold.LimitMismatch) as mismatch:
            client.acquire_semaphore(name, limit=4)
        assert mismatch.value.limit == 3
    assert client.inspect_semaphore(name)["used"] == 0


def test_read_write(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    # Two readers share (acquire() never re-enters: these are two holders).
    r1 = client.acquire(name, kind="read", ttl_ms=5000)
    r2 = client.acquire(name, kind="read", ttl_ms=5000)
    assert len(lock_state(raw, name)["holders"]) == 2  # type: ignore[index]
    # A writer waits for them.
    with pytest.raises(leasehold.LockHeld):
        client.acquire(name, kind="write", wait_ms=200)
    got: list[leasehold.Lease] = []

    def writer() -> None:
        with client.lock(name, kind="write", wait_ms=5000) as w:
            got.append(w)

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: (lock_state(raw, name) or {}).get("waiting_count"), what="the writer to wait")
    r1.release()
    assert not got
    r2.release()
    thread.join(10)
    assert len(got) == 1 and got[0].kind == "write"

    with client.lock(name, kind="write") as w:
        # A reader waits for the writer.
        with pytest.raises(leasehold.LockHeld):
            client.acquire(name, kind="read", wait_ms=200)
        # The writer may read too (a downgrade: same lease, one more level).
        with client.lock(name, kind="read") as same:
            assert same is w and w.reentry_count == 2
            holder = lock_state(raw, name)["holders"][0]  # type: ignore[index]
            assert holder["read_count"] == 1 and holder["write_count"] == 1
        holder = lock_state(raw, name)["holders"][0]  # type: ignore[index]
        assert holder["read_count"] == 0 and holder["write_count"] == 1
    assert is_free(raw, name)

    with client.lock(name, kind="read") as r:
        with pytest.raises(leasehold.UpgradeRefused) as e:
            with client.lock(name, kind="write"):
                pass
        assert e.value.code == "upgrade_refused"
        assert not r.lost.is_set()
    assert is_free(raw, name)


def test_fair_order(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    order: list[str] = []
    tokens: list[int] = []
    errors: list[BaseException] = []
    head = client.acquire(name, kind="fair", ttl_ms=10000)

    def waiter(label: str) -> None:
        try:
            # 15 s of wait against the server's 2 s: the client is answered 202 with a
            # ticket and polls it until its turn; the user sees none of that.
            with client.lock(name, kind="fair", wait_ms=15000, holder=label) as lease:
                order.append(label)
                tokens.append(lease.fencing_token)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def queued() -> int:
        return int((lock_state(raw, name) or {}).get("queue_length") or 0)

    threads = []
    for i, label in enumerate(["w1", "w2", "w3"]):
        thread = threading.Thread(target=waiter, args=(label,))
        thread.start()
        threads.append(thread)
        wait_until(lambda: queued() == i + 1, what=f"{label} to queue")  # noqa: B023 (called at once)
    queue = [entry["holder"] for entry in lock_state(raw, name)["queue"]]  # type: ignore[index]
    assert queue == ["w1", "w2", "w3"]
    head.release()
    for thread in threads:
        thread.join(20)
    assert not errors
    assert order == ["w1", "w2", "w3"]
    assert tokens == sorted(tokens) and tokens[0] > head.fencing_token
    assert is_free(raw, name)


def test_fair_wait_running_out_leaves_the_queue(client: leasehold.Client, raw: httpx.Client, name: str) -> None:
    with client.lock(name, kind="fair", ttl_ms=10000):
        refused: list[leasehold.LockHeld] = []

        def waiter() -> None:
            try:
                with client.lock(name, kind="fair", wait_ms=2500):
                    pass
            except leasehold.LockHeld as e:
                refused.append(e)

        thread = threading.Thread(target=waiter)
        thread.start()
        thread.join(10)
        assert len(refused) == 1 and refused[0].code == "lock_held"
        # It left its place: nobody is queued behind the holder.
        assert lock_state(raw, name)["queue_length"] == 0  # type: ignore[index]
    assert is_free(raw, name)


def test_fence_check(client: leasehold.Client, admin: leasehold.Client, name: str) -> None:
    with client.lock(name) as lease:
        check = client.check_fence(name, lease.fencing_token)
        assert check.current and check.lock == name and check.fencing_counter == lease.fencing_token
        assert not client.check_fence(name, lease.fencing_token - 1).current
    with client.lock(name) as later:
        assert not client.check_fence(name, lease.fencing_token).current
        assert client.check_fence(name, later.fencing_token).current
    assert later.fencing_token > lease.fencing_token


def test_timeouts_exceed_the_wait(keyed_url: str, keyed_admin_token: str, name: str) -> None:
    """A wait longer than the client's timeout: the HTTP timeout is the wait plus it."""
    with leasehold.Client(keyed_url, api_key=keyed_admin_token, timeout=1.0) as c:
        holder = c.acquire(name, ttl_ms=10000)
        timer = threading.Timer(1.8, holder.release)
        timer.start()
        started = time.monotonic()
        try:
            with c.lock(name, wait_ms=8000) as lease:
                waited = time.monotonic() - started
                assert lease.fencing_token > holder.fencing_token
        finally:
            timer.cancel()
            holder.release()
    assert waited > 1.0  # longer than the client's timeout, and no timeout happened
