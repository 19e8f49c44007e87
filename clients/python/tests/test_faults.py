"""Lost answers: a 503 or a dropped connection in front of a request the server carried out
is retried with the same Idempotency-Key, and the server's replay makes it count once."""

from __future__ import annotations

import asyncio
from typing import Optional

import httpx
import pytest
from helpers import is_free, lease_state, lock_state
from proxy import FaultyProxy

import leasehold


def _first(method: str, prefix: str, action: str) -> object:
    """A fault: `action` for the first request of `method` whose path starts with `prefix`."""
    done: dict[str, bool] = {}

    def fault(m: str, path: str) -> Optional[str]:
        if m == method and path.split("?")[0] == prefix and not done:
            done["yes"] = True
            return action
        return None

    return fault


@pytest.mark.parametrize("action", ["503", "drop"])
def test_a_lost_acquire_answer_is_retried_without_a_double_grant(
    url: str, raw: httpx.Client, name: str, action: str
) -> None:
    path = f"/v1/locks/{name}/leases"
    with FaultyProxy(url, _first("POST", path, action)) as proxy:  # type: ignore[arg-type]
        with leasehold.Client(proxy.url) as client:
            with client.lock(name, ttl_ms=5000) as lease:
                first, retry = proxy.requests("POST", path)
                # The server granted the first request; its answer never reached the client.
                assert first.action == action and first.upstream_status == 201
                assert first.json()["lease_id"] == lease.lease_id
                # The retry carried the same key and was answered with the first grant.
                assert first.headers["idempotency-key"] == retry.headers["idempotency-key"]
                assert retry.upstream_status == 201
                assert retry.upstream_headers.get("idempotent-replayed") == "true"
                # Exactly one lease holds the lock: ours, at one level.
                holders = lock_state(raw, name)["holders"]  # type: ignore[index]
                assert [h["lease_id"] for h in holders] == [lease.lease_id]
                assert holders[0]["reentry_count"] == 1
            assert not lease.lost.is_set()
    assert lease_state(raw, name, lease.lease_id) == "released"
    assert is_free(raw, name)


@pytest.mark.parametrize("action", ["503", "drop"])
def test_a_lost_reentry_answer_adds_one_level_only(url: str, raw: httpx.Client, name: str, action: str) -> None:
    path = f"/v1/locks/{name}/leases"
    calls = {"n": 0}

    def fault(method: str, p: str) -> Optional[str]:
        if method == "POST" and p.split("?")[0] == path:
            calls["n"] += 1
            if calls["n"] == 2:  # the reentry
                return action
        return None

    with FaultyProxy(url, fault) as proxy:
        with leasehold.Client(proxy.url) as client:
            with client.lock(name) as lease:
                with client.lock(name):
                    assert lease.reentry_count == 2
                    assert lock_state(raw, name)["holders"][0]["reentry_count"] == 2  # type: ignore[index]
                assert lock_state(raw, name)["holders"][0]["reentry_count"] == 1  # type: ignore[index]
    assert is_free(raw, name)


@pytest.mark.parametrize("action", ["503", "drop"])
def test_a_lost_release_answer_is_retried(url: str, raw: httpx.Client, name: str, action: str) -> None:
    with FaultyProxy(url) as proxy:
        with leasehold.Client(proxy.url) as client:
            with client.lock(name) as outer:
                with client.lock(name):
                    # Lose the answer of the inner block's release (one level): the retry
                    # must not release a second level.
                    proxy.fault = _first("DELETE", f"/v1/locks/{name}/leases/{outer.lease_id}", action)  # type: ignore[assignment]
                state = lock_state(raw, name)
                assert state is not None and state["held"], "a retried level release released twice"
                assert state["holders"][0]["reentry_count"] == 1
                deletes = proxy.requests("DELETE", f"/v1/locks/{name}/leases/")
                assert len(deletes) == 2 and deletes[0].action == action
                assert deletes[0].headers["idempotency-key"] == deletes[1].headers["idempotency-key"]
                # The replay is the first answer (a level released, one left). (The server
                # sends no Idempotent-Replayed header on release replays, unlike acquires.)
                assert deletes[0].json() == deletes[1].json()
            assert not outer.lost.is_set()
    assert is_free(raw, name)


def test_failing_heartbeats_give_the_lease_up_before_it_expires(url: str, raw: httpx.Client, name: str) -> None:
    """Heartbeats answered 503 (the server unreachable, say): the lease is reported lost while
    it still holds on the server, a margin before it would expire, so the work stops before
    anyone else can get the lock."""

    def fault(method: str, path: str) -> Optional[str]:
        return "503" if path.endswith("/heartbeat") else None

    with FaultyProxy(url, fault) as proxy:
        with leasehold.Client(proxy.url, watch=False) as client:
            with pytest.raises(leasehold.LeaseLost) as raised:
                with client.lock(name, ttl_ms=1500) as lease:
                    assert lease.lost.wait(5)
                    assert lease_state(raw, name, lease.lease_id) == "held"
    assert raised.value.reason == "unrenewable"
    assert len(proxy.requests("POST", f"/v1/locks/{name}/leases/{lease.lease_id}/heartbeat")) >= 2
    # The client still released it on the way out.
    assert lease_state(raw, name, lease.lease_id) == "released"


def test_keep_alive(url: str, name: str) -> None:
    """Ten lock blocks (acquire, watch, release each) reuse a few connections."""
    with FaultyProxy(url) as proxy:
        with leasehold.Client(proxy.url) as client:
            for _ in range(10):
                with client.lock(name) as lease:
                    assert lease._watching.wait(5)
        requests = len(proxy.exchanges)
        assert requests >= 30
        assert proxy.connections <= 4, f"{proxy.connections} connections for {requests} requests"


def test_async_lost_acquire_answer_is_retried(url: str, raw: httpx.Client, name: str) -> None:
    path = f"/v1/locks/{name}/leases"

    async def main() -> str:
        with FaultyProxy(url, _first("POST", path, "503")) as proxy:  # type: ignore[arg-type]
            async with leasehold.AsyncClient(proxy.url) as client:
                async with client.lock(name) as lease:
                    first, retry = proxy.requests("POST", path)
                    assert first.json()["lease_id"] == lease.lease_id
                    assert first.headers["idempotency-key"] == retry.headers["idempotency-key"]
                    assert retry.upstream_headers.get("idempotent-replayed") == "true"
                    holders = lock_state(raw, name)["holders"]  # type: ignore[index]
                    assert [h["lease_id"] for h in holders] == [lease.lease_id]
                return lease.lease_id

    lease_id = asyncio.run(main())
    assert lease_state(raw, name, lease_id) == "released"


@pytest.mark.parametrize("kind", ["reentrant", "fair"])
def test_a_cancelled_acquire_whose_answer_was_lost_gives_back_what_it_got(
    url: str, raw: httpx.Client, name: str, kind: str
) -> None:
    """The server grants (or queues) but the client is cancelled before the answer comes: the
    client asks again with the same key, learns what it got, and gives it back, instead of
    leaving a lease nobody holds until its TTL (or a ticket in the queue)."""
    path = f"/v1/locks/{name}/leases"

    async def main() -> None:
        with FaultyProxy(url, _first("POST", path, "hold")) as proxy:  # type: ignore[arg-type]
            async with leasehold.AsyncClient(proxy.url) as client, leasehold.AsyncClient(url) as direct:
                blocker = await direct.acquire(name, kind=kind) if kind == "fair" else None
                task = asyncio.ensure_future(client.acquire(name, kind=kind, ttl_ms=30000))
                await asyncio.get_running_loop().run_in_executor(None, proxy.holding.wait, 10)
                # The server has acted: a lease, or a ticket behind the blocker.
                state = lock_state(raw, name)
                assert state is not None
                if kind == "fair":
                    assert state["queue_length"] == 1
                else:
                    assert len(state["holders"]) == 1
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                first, replay = proxy.requests("POST", path)[:2]
                assert first.action == "hold"
                assert replay.headers["idempotency-key"] == first.headers["idempotency-key"]
                # The same grant (or ticket) again. (A replayed 202 carries no
                # Idempotent-Replayed header, unlike a replayed 201.)
                id_field = "ticket_id" if kind == "fair" else "lease_id"
                assert replay.json()[id_field] == first.json()[id_field]
                state = lock_state(raw, name)
                if kind == "fair":
                    assert state is not None and state["queue_length"] == 0
                    assert blocker is not None
                    await blocker.release()
                else:
                    assert state is None or not state["held"]

    asyncio.run(main())
    assert is_free(raw, name)
