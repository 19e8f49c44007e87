"""A client generated from Leasehold's OpenAPI document (by openapi-python-client, see
.ci/openapi-client) takes, heartbeats, fence-checks and releases a lease on a running server,
and reads a problem answer as the document says. Usage: openapi_client_test.py BASE_URL"""

import sys
import uuid

from leasehold_client import AuthenticatedClient, Client
from leasehold_client.api.leases import (
    acquire_lock,
    heartbeat_lock_lease,
    inspect_lock_lease,
    release_lock_lease,
)
from leasehold_client.api.locks import check_fence, inspect_lock
from leasehold_client.models import (
    AcquireBody,
    FenceCheckBody,
    GrantBody,
    HeartbeatBody,
    Problem,
    ReleaseBody,
    RenewalBody,
)


def main(base: str) -> None:
    lock = f"generated-client-{uuid.uuid4().hex[:8]}"
    anonymous = Client(base_url=base, raise_on_unexpected_status=True)

    # A new lease needs no token. The generator types acquire's client as authenticated (its
    # security is "none, or a lease token" and it keeps only the second); any client works.
    granted = acquire_lock.sync_detailed(
        lock,
        client=anonymous,
        body=AcquireBody(ttl_ms=30_000, holder="openapi-python-client"),
        wait_ms=0,
    )
    assert granted.status_code == 201, granted
    grant = granted.parsed
    assert isinstance(grant, GrantBody), grant
    assert grant.token and grant.fencing_token > 0 and grant.wait_ms == 0, grant

    holder = AuthenticatedClient(
        base_url=base, token=grant.token, raise_on_unexpected_status=True
    )
    renewed = heartbeat_lock_lease.sync_detailed(
        lock, grant.lease_id, client=holder, body=HeartbeatBody(ttl_ms=20_000)
    )
    assert renewed.status_code == 200, renewed
    assert isinstance(renewed.parsed, RenewalBody) and renewed.parsed.ttl_ms == 20_000
    # The bodies are optional: a heartbeat without one keeps the lease's TTL.
    renewed = heartbeat_lock_lease.sync_detailed(lock, grant.lease_id, client=holder)
    assert renewed.status_code == 200, renewed
    assert isinstance(renewed.parsed, RenewalBody) and renewed.parsed.ttl_ms == 20_000

    # An acquire without a body takes the server's defaults.
    other = f"{lock}-bare"
    bare = acquire_lock.sync_detailed(other, client=anonymous, wait_ms=0)
    assert bare.status_code == 201, bare
    assert isinstance(bare.parsed, GrantBody) and bare.parsed.token, bare
    release_lock_lease.sync_detailed(
        other,
        bare.parsed.lease_id,
        client=AuthenticatedClient(base_url=base, token=bare.parsed.token),
        all_=True,
    )

    fence = check_fence.sync(
        lock, client=anonymous, body=FenceCheckBody(fencing_token=grant.fencing_token)
    )
    assert fence is not None and fence.current, fence
    state = inspect_lock.sync(lock, client=anonymous)
    assert state is not None and state.held and state.holders[0].lease_id == grant.lease_id

    # Someone else is refused: a problem document with its code.
    refused = acquire_lock.sync_detailed(
        lock, client=anonymous, body=AcquireBody(holder="someone-else"), wait_ms=0
    )
    assert refused.status_code == 409, refused
    assert isinstance(refused.parsed, Problem) and refused.parsed.code == "lock_held"

    released = release_lock_lease.sync_detailed(
        lock, grant.lease_id, client=holder, all_=True
    )
    assert released.status_code == 200, released
    assert isinstance(released.parsed, ReleaseBody) and released.parsed.released

    lease = inspect_lock_lease.sync(lock, grant.lease_id, client=anonymous)
    assert lease is not None and lease.state == "released", lease
    stale = check_fence.sync(
        lock, client=anonymous, body=FenceCheckBody(fencing_token=grant.fencing_token)
    )
    assert stale is not None and not stale.current, stale
    print(f"generated client: acquired, heartbeated, fence-checked and released {lock}")


if __name__ == "__main__":
    main(sys.argv[1])
