"""The asyncio client: the same behaviour, with asyncio.Event and cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable
from typing import Any, Callable, TypeVar

import httpx
import pytest
from helpers import is_free, lease_state, lock_state, loss_line, report

import leasehold

T = TypeVar("T")


def run(main: Callable[[leasehold.AsyncClient], Awaitable[T]], url: str, **options: Any) -> T:
    async def wrapper() -> T:
        async with leasehold.AsyncClient(url, **options) as client:
            return await main(client)

    return asyncio.run(wrapper())


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def detached(coro: Awaitable[T]) -> asyncio.Future[T]:
    """A task that does not inherit the leases its creator holds (another holder)."""
    return contextvars.Context().run(asyncio.ensure_future, coro)


def test_acquire_wait_release(url: str, raw: httpx.Client, name: str) -> None:
    async def main(client: leasehold.AsyncClient) -> None:
        got: list[leasehold.AsyncLease] = []

        async def waiter() -> None:
            async with client.lock(name, wait_ms=6000, holder="waiter") as lease:
                got.append(lease)

        async with client.lock(name, ttl_ms=5000, holder="first") as first:
            assert isinstance(first.lost, asyncio.Event) and not first.lost.is_set()
            with pytest.raises(leasehold.LockHeld) as refused:
                await client.acquire(name, wait_ms=0)
            assert refused.value.holder == "first" and refused.value.retry_after is not None
            task = detached(waiter())
            await eventually(lambda: (lock_state(raw, name) or {}).get("waiting_count"), what="the waiter")
            assert not got
        await asyncio.wait_for(task, 10)
        assert got[0].fencing_token > first.fencing_token
        assert lease_state(raw, name, first.lease_id) == "released"
        assert lease_state(raw, name, got[0].lease_id) == "released"

    run(main, url)
    assert is_free(raw, name)


def test_reentry_in_a_task_and_the_tasks_it_creates(url: str, raw: httpx.Client, name: str) -> None:
    async def main(client: leasehold.AsyncClient) -> None:
        async with client.lock(name) as outer:
            async with client.lock(name) as inner:
                assert inner is outer and outer.reentry_count == 2

            async def child() -> int:
                # Created inside the block: it inherits the held lease and re-enters it.
                async with client.lock(name) as lease:
                    assert lease is outer
                    return lease.reentry_count

            assert await asyncio.ensure_future(child()) == 2
            assert outer.reentry_count == 1
            with pytest.raises(leasehold.NotReentrant):
                async with client.lock(name + "-x", kind="exclusive"):
                    async with client.lock(name + "-x", kind="exclusive"):
                        pass

    run(main, url)
    assert is_free(raw, name) and is_free(raw, name + "-x")


def test_semaphore_and_read_write(url: str, raw: httpx.Client, name: str) -> None:
    async def main(client: leasehold.AsyncClient) -> None:
        async with client.semaphore(name + "-s", limit=2, permits=2) as lease:
            assert lease.permits == 2
            with pytest.raises(leasehold.NoPermits):
                await client.acquire_semaphore(name + "-s", 2, wait_ms=100)
        r1 = await client.acquire(name, kind="read")
        async with client.lock(name, kind="read") as r2:
            assert r2.lease_id != r1.lease_id
            with pytest.raises(leasehold.LockHeld):
                await client.acquire(name, kind="write", wait_ms=100)
        await r1.release()
        async with client.lock(name, kind="write"):
            pass

    run(main, url)
    assert is_free(raw, name)


def test_loss_after_a_force_release_is_told_at_once(
    url: str, admin: leasehold.Client, raw: httpx.Client, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main(client: leasehold.AsyncClient) -> tuple[float, float, float]:
        with pytest.raises(leasehold.LeaseLost) as raised:
            async with client.lock(name, ttl_ms=30000) as lease:

                async def work_until_lost() -> None:  # the block's work, told on loss
                    await lease.lost.wait()
                    lost_at.append(time.monotonic())

                work = asyncio.ensure_future(work_until_lost())
                await asyncio.wait_for(lease._watching.wait(), 5)
                # The force release runs in a thread; the loop stays free to read the watch.
                sent_at = time.monotonic()
                await asyncio.get_running_loop().run_in_executor(None, admin.force_release, name)
                answered_at = time.monotonic()
                await asyncio.wait_for(work, 5)
                assert lease.lost_reason == "force_released"
        assert raised.value.reason == "force_released"
        return sent_at, answered_at, lost_at[0]

    lost_at: list[float] = []
    sent_at, answered_at, told_at = run(main, url)
    report(capsys, loss_line("asyncio, watch stream", sent_at, answered_at, told_at))
    assert told_at - answered_at < 1.0


def test_loss_without_the_watch_comes_with_the_next_heartbeat(
    url: str, admin: leasehold.Client, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ttl_ms = 900

    async def main(client: leasehold.AsyncClient) -> float:
        with pytest.raises(leasehold.LeaseLost):
            async with client.lock(name, ttl_ms=ttl_ms) as lease:
                await asyncio.get_running_loop().run_in_executor(None, admin.force_release, name)
                answered_at = time.monotonic()
                await asyncio.wait_for(lease.lost.wait(), 5)
                told_at = time.monotonic()
        return (told_at - answered_at) * 1000

    latency_ms = run(main, url, watch=False)
    report(capsys, f"loss latency (asyncio, heartbeat 410 only, TTL {ttl_ms} ms): {latency_ms:.1f} ms")
    assert latency_ms <= ttl_ms / 3 + 500


def test_a_heartbeat_keeps_the_lease_across_three_ttls(url: str, raw: httpx.Client, name: str) -> None:
    ttl_ms = 1500

    async def main(client: leasehold.AsyncClient) -> str:
        async with client.lock(name, ttl_ms=ttl_ms) as lease:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lease.lost.wait(), 3.5 * ttl_ms / 1000)
            assert lease_state(raw, name, lease.lease_id) == "held"
            with pytest.raises(leasehold.LockHeld):
                await client.acquire(name, wait_ms=0)
        return lease.lease_id

    lease_id = run(main, url)
    assert lease_state(raw, name, lease_id) == "released"


def test_a_cancelled_block_releases(url: str, raw: httpx.Client, name: str) -> None:
    async def main(client: leasehold.AsyncClient) -> str:
        held = asyncio.Event()
        ids: list[str] = []

        async def work() -> None:
            async with client.lock(name) as lease:
                ids.append(lease.lease_id)
                held.set()
                await asyncio.Event().wait()  # until cancelled

        task = asyncio.ensure_future(work())
        await asyncio.wait_for(held.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ids[0]

    lease_id = run(main, url)
    assert lease_state(raw, name, lease_id) == "released"
    assert is_free(raw, name)


@pytest.mark.parametrize("kind", ["reentrant", "fair"])
def test_a_cancelled_wait_leaves_nothing_behind(url: str, raw: httpx.Client, name: str, kind: str) -> None:
    async def main(client: leasehold.AsyncClient) -> None:
        async with client.lock(name, kind=kind):

            async def waiter() -> None:
                async with client.lock(name, kind=kind, wait_ms=20000):
                    raise AssertionError("must not get the lock")

            waiting = detached(waiter())  # another holder: it must not re-enter
            key = "queue_length" if kind == "fair" else "waiting_count"
            await eventually(lambda: (lock_state(raw, name) or {}).get(key), what="the waiter to wait")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await eventually(lambda: not (lock_state(raw, name) or {}).get(key), what="the waiter to leave")
            assert len(lock_state(raw, name)["holders"]) == 1  # type: ignore[index]

    run(main, url)
    assert is_free(raw, name)
