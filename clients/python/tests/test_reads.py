"""What the server tells beyond a grant, read through the client: the live names page by
page, a force release that lifts a lock-delay, a multilease's locks hidden from a reader,
RedLock's nodes and validity on the grant and every renewal, and a grant or renewal that
stands on its Redis primary alone (``degraded``)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import wait_until

import leasehold


def test_list_locks_pages_through_the_live_names(client: leasehold.Client, name: str) -> None:
    leases = [client.acquire(f"{name}-{i}", wait_ms=0) for i in range(3)]
    try:
        page = client.list_locks(name)
        assert [entry["name"] for entry in page["locks"]] == [f"{name}-{i}" for i in range(3)]
        assert all(entry["holders"] == 1 for entry in page["locks"])
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            page = client.list_locks(name, cursor=cursor, limit=1)
            seen += [entry["name"] for entry in page["locks"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == [f"{name}-{i}" for i in range(3)]
    finally:
        for lease in leases:
            lease.release()


def test_a_force_release_of_a_free_lock_in_its_lock_delay_lifts_it(
    client: leasehold.Client, admin: leasehold.Client, name: str
) -> None:
    lease = client.acquire(name, ttl_ms=30000, wait_ms=0, lock_delay_ms=30000)
    first = admin.force_release(name, reason="python client test")
    assert first["released"] and len(first["removed"]) == 1 and not first.get("delay_lifted")
    assert lease.lost.wait(10), "the holder was not told"
    lease.release()
    assert client.inspect_lock(name)["delayed_until"]
    second = admin.force_release(name, reason="python client test")
    assert second["released"] and second["delay_lifted"] and second["removed"] == []
    client.acquire(name, wait_ms=0).release()


@pytest.fixture
def holder_key(keyed_url: str, keyed_admin_token: str) -> Iterator[str]:
    """An API key that may take any name, on the keyed server."""
    with httpx.Client(base_url=keyed_url, headers={"authorization": f"Bearer {keyed_admin_token}"}) as http:
        r = http.post("/v1/admin/keys", json={"name": "py-" + secrets.token_hex(4), "roles": ["client"]})
        assert r.status_code == 201, r.text
        body = r.json()
        yield body["secret"]
        http.delete(f"/v1/admin/keys/{body['key']['id']}")


def test_a_reader_sees_a_multilease_without_the_locks_its_key_may_not_name(
    keyed_url: str, holder_key: str, key_secret: str, name: str
) -> None:
    visible, hidden = f"jobs:{name}", f"payroll-{name}"
    with (
        leasehold.Client(keyed_url, api_key=holder_key) as holder,
        leasehold.Client(keyed_url, api_key=key_secret) as reader,
    ):
        with holder.multilease([visible, hidden]) as lease:
            membership = reader.inspect_lock(visible)["holders"][0]["multilease"]
            assert membership == {"lease_id": lease.lease_id, "locks": [visible], "hidden_locks": 1}
            seen = reader.inspect_lease(visible, lease.members[0].lease_id)
            assert seen["multilease"]["hidden_locks"] == 1


def test_a_redlock_lease_says_its_nodes_and_validity_on_every_renewal(redlock_url: str, name: str) -> None:
    ttl_ms = 1500
    with leasehold.Client(redlock_url) as client:
        with client.lock(name, ttl_ms=ttl_ms, kind="redlock") as lease:
            assert lease.kind == "redlock" and lease.nodes_acked == 3
            assert 0 < (lease.validity_ms or 0) < ttl_ms
            assert client.inspect_lock(name)["kind"] == "redlock"
            # Past two TTLs it holds by its renewals (every 500 ms), whose answers replaced
            # the grant's.
            time.sleep(2 * ttl_ms / 1000)
            lease.check()
            assert lease.nodes_acked == 3 and 0 < (lease.validity_ms or 0) < ttl_ms


class StandIn:
    """A server that answers grants and renewals marked degraded (only Sentinel and Cluster
    deployments degrade), and 404 to the watch, so the heartbeats alone keep the lease."""

    def __init__(self) -> None:
        self.beats = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if method == "POST" and path == "/v1/locks/d/leases":
            return self.json(201, grant("l1", "d", replicas_acked=0, degraded="no_replica"))
        if method == "POST" and path == "/v1/multileases":
            members = [
                {"lock": "a", "kind": "reentrant", "lease_id": "a1", "fencing_token": 3, "replicas_acked": 2},
                {"lock": "b", "kind": "reentrant", "lease_id": "b1", "fencing_token": 4, "replicas_acked": 1,
                 "degraded": "not_replicated"},
            ]  # fmt: skip
            return self.json(201, {**grant("m1", "", replicas_acked=None), "members": members})
        if method == "POST" and path.endswith("/heartbeat"):
            self.beats += 1
            return self.json(200, grant("l1", "d", replicas_acked=1, degraded="not_replicated"))
        if method == "DELETE":
            return self.json(200, {"lease_id": "l1", "lock": "d", "released": True, "reentry_count": 0, "locks": []})
        problem = {
            "type": "/problems/not_found",
            "title": "No such resource",
            "status": 404,
            "detail": "",
            "code": "not_found",
        }
        return httpx.Response(404, headers={"content-type": "application/problem+json"}, content=json.dumps(problem))

    @staticmethod
    def json(status: int, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(status, json=body)


def grant(lease_id: str, lock: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"lease_id": lease_id, "token": "lht_t", "lock": lock, "kind": "reentrant", "holder": None}
    body.update(fencing_token=1, reentry_count=1, ttl_ms=900, expires_at="2030-01-01T00:00:00Z")
    return {**body, **{k: v for k, v in extra.items() if v is not None}}


def test_a_degraded_grant_and_renewal_show_on_the_lease() -> None:
    stand_in = StandIn()
    transport = httpx.MockTransport(stand_in)
    with leasehold.Client("http://stand-in", transport=transport, handle_sigterm=False) as client:
        with client.lock("d", ttl_ms=900, wait_ms=0) as lease:
            assert (lease.degraded, lease.replicas_acked) == ("no_replica", 0)
            wait_until(lambda: stand_in.beats and lease.degraded == "not_replicated", 3, "a renewal's answer")
            assert lease.replicas_acked == 1
        with client.multilease(["a", "b"], ttl_ms=900, wait_ms=0) as multi:
            assert (multi.replicas_acked, multi.degraded) == (1, "not_replicated")
            assert [m.degraded for m in multi.members] == [None, "not_replicated"]


def test_a_degraded_grant_shows_on_the_async_lease_too() -> None:
    async def run() -> None:
        transport = httpx.MockTransport(StandIn())
        async with leasehold.AsyncClient("http://stand-in", transport=transport, handle_sigterm=False) as client:
            async with client.lock("d", ttl_ms=900, wait_ms=0) as lease:
                assert (lease.degraded, lease.replicas_acked) == ("no_replica", 0)

    asyncio.run(run())
