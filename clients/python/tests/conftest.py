"""Fixtures: the servers test.sh started, clients on them, unique lock names, and helpers."""

from __future__ import annotations

import os
import re
import secrets
import uuid
from collections.abc import Iterator

import httpx
import pytest

import leasehold


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run the tests with clients/python/test.sh", returncode=2)
    return value


@pytest.fixture(scope="session")
def url() -> str:
    return _env("LEASEHOLD_TEST_URL")


@pytest.fixture(scope="session")
def admin_token() -> str:
    return _env("LEASEHOLD_TEST_ADMIN_TOKEN")


@pytest.fixture(scope="session")
def keyed_url() -> str:
    return _env("LEASEHOLD_TEST_KEYED_URL")


@pytest.fixture(scope="session")
def keyed_admin_token() -> str:
    return _env("LEASEHOLD_TEST_KEYED_ADMIN_TOKEN")


@pytest.fixture(scope="session")
def redlock_url() -> str:
    """A server with three RedLock nodes of its own (``kind="redlock"``)."""
    return _env("LEASEHOLD_TEST_REDLOCK_URL")


@pytest.fixture(scope="session")
def redlock_admin_token() -> str:
    """The RedLock server's admin token (each server has its own), for a revocation there."""
    return _env("LEASEHOLD_TEST_REDLOCK_ADMIN_TOKEN")


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEASEHOLD_API_KEY", raising=False)
    monkeypatch.delenv("LEASEHOLD_SERVER", raising=False)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name no other test uses."""
    base = re.sub(r"[^A-Za-z0-9._:-]", "-", request.node.name)[:150]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(url: str) -> Iterator[leasehold.Client]:
    with leasehold.Client(url) as c:
        yield c


@pytest.fixture
def admin(url: str, admin_token: str) -> Iterator[leasehold.Client]:
    """A client with the admin token as its key (force releases)."""
    with leasehold.Client(url, api_key=admin_token) as c:
        yield c


@pytest.fixture
def raw(url: str) -> Iterator[httpx.Client]:
    """Plain HTTP to the main server, to look at what the client did."""
    with httpx.Client(base_url=url, timeout=10) as c:
        yield c


@pytest.fixture
def key_secret(keyed_url: str, keyed_admin_token: str) -> Iterator[str]:
    """An API key (client and reader roles, names ``jobs:*`` only) on the keyed server."""
    with httpx.Client(base_url=keyed_url, headers={"authorization": f"Bearer {keyed_admin_token}"}) as http:
        r = http.post(
            "/v1/admin/keys",
            json={"name": "py-" + secrets.token_hex(4), "roles": ["client", "reader"], "patterns": ["jobs:*"]},
        )
        assert r.status_code == 201, r.text
        body = r.json()
        yield body["secret"]
        http.delete(f"/v1/admin/keys/{body['key']['id']}")
