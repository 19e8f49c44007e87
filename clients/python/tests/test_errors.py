"""Every problem the server answers comes out as a typed exception carrying its code."""

from __future__ import annotations

import secrets

import httpx
import pytest

import leasehold


def test_problems_are_typed(client: leasehold.Client, name: str) -> None:
    with pytest.raises(leasehold.InvalidRequest) as e:
        client.acquire(name, ttl_ms=1)
    assert e.value.code == "invalid_ttl" and e.value.status == 422
    assert e.value.type == "/problems/invalid_ttl" and e.value.title and e.value.detail

    with pytest.raises(leasehold.InvalidRequest) as e:
        client.acquire("no spaces allowed")
    assert e.value.code == "invalid_lock_name"

    with pytest.raises(leasehold.InvalidRequest) as e:
        client.acquire(name, kind="mutex")
    assert e.value.code == "invalid_body"

    with pytest.raises(leasehold.NotFound) as nf:
        client.inspect_lock(name)
    assert nf.value.code == "lock_not_found" and nf.value.status == 404

    with client.lock(name, kind="fair"):
        with pytest.raises(leasehold.KindConflict) as kc:
            client.acquire(name, kind="read", wait_ms=0)
        assert kc.value.code == "kind_conflict" and kc.value.held_as == "fair"
        assert isinstance(kc.value, leasehold.Conflict) and isinstance(kc.value, leasehold.ProblemError)
        assert kc.value.get("held_as") == "fair"

        with pytest.raises(leasehold.LockHeld) as held:
            client.acquire(name, kind="fair", wait_ms=0)
        # A fair lock's queue: the client left its place when the wait ran out.
        assert held.value.code == "lock_held"


def test_every_error_is_a_leasehold_error(client: leasehold.Client, name: str) -> None:
    for cls in (
        leasehold.LockHeld,
        leasehold.NoPermits,
        leasehold.LeaseLost,
        leasehold.KindConflict,
        leasehold.Unavailable,
        leasehold.TransportError,
    ):
        assert issubclass(cls, leasehold.LeaseholdError)


def test_admin_errors(url: str, client: leasehold.Client, name: str) -> None:
    with pytest.raises(leasehold.Unauthorized) as e:
        client.force_release(name)
    assert e.value.code == "admin_token_required" and e.value.status == 401
    with leasehold.Client(url, api_key="wrong-" + secrets.token_hex(16)) as wrong:
        with pytest.raises(leasehold.ProblemError) as p:
            wrong.force_release(name)
    assert p.value.status in (401, 403)


def test_an_unreachable_server_is_a_transport_error() -> None:
    with leasehold.Client("http://127.0.0.1:9", timeout=0.3) as c:
        with pytest.raises(leasehold.TransportError) as e:
            c.acquire("anything", wait_ms=0)
    assert isinstance(e.value.__cause__, httpx.TransportError)


def test_urls_must_be_http() -> None:
    with pytest.raises(ValueError):
        leasehold.Client("ftp://example.com")


def test_api_keys(keyed_url: str, key_secret: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with leasehold.Client(keyed_url, api_key=key_secret) as c:
        with c.lock("jobs:nightly", ttl_ms=2000) as lease:
            assert c.inspect_lock("jobs:nightly")["holders"][0]["lease_id"] == lease.lease_id
        with pytest.raises(leasehold.Forbidden) as e:
            c.acquire("elsewhere")
        assert e.value.code == "name_not_allowed"

    # Once a key exists, callers without one are refused.
    with leasehold.Client(keyed_url, api_key="") as anonymous:
        with pytest.raises(leasehold.Unauthorized) as u:
            anonymous.acquire("jobs:x")
        assert u.value.code == "api_key_required"
    with leasehold.Client(keyed_url, api_key="lhk_" + "0" * 43) as wrong:
        with pytest.raises(leasehold.Unauthorized) as u:
            wrong.acquire("jobs:x")
        assert u.value.code == "api_key_invalid"

    # The key (and the server) can come from the environment, as for the leasehold CLI.
    monkeypatch.setenv("LEASEHOLD_API_KEY", key_secret)
    monkeypatch.setenv("LEASEHOLD_SERVER", keyed_url)
    with leasehold.Client() as from_env:
        with from_env.lock("jobs:env") as lease:
            assert lease.fencing_token > 0


def test_api_keys_async(keyed_url: str, key_secret: str) -> None:
    import asyncio

    async def main() -> None:
        async with leasehold.AsyncClient(keyed_url, api_key=key_secret) as c:
            async with c.lock("jobs:async") as lease:
                assert lease.fencing_token > 0
            with pytest.raises(leasehold.Forbidden):
                await c.acquire("elsewhere")

    asyncio.run(main())
