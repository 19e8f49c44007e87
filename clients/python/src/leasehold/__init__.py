"""Leasehold's official Python client.

    import leasehold

    client = leasehold.Client("http://127.0.0.1:8080")
    with client.lock("nightly-report") as lease:
        run_report(fencing_token=lease.fencing_token)

The lease is renewed while the block runs, watched for loss (``lease.lost`` is set the moment
it is lost, and the block then ends in :class:`LeaseLost`), and released however the block
ends. :class:`AsyncClient` does the same for asyncio (``async with client.lock(...)``).
``client.campaign(name, value=...)`` leads an election the same way (a :class:`Term`; while it
waits in line, ``on_in_line=`` hears each :class:`InLine`), and ``client.observe(name)`` follows
who leads.
"""

from ._async.client import AsyncClient
from ._async.context import AsyncLeaseContext
from ._async.election import AsyncCampaign, AsyncTerm
from ._async.lease import AsyncLease
from ._core import ElectionEvent, FenceCheck, InLine, Leader, Member, Queued, Revocation, Signal
from ._errors import (
    PROBLEM_CODES,
    Conflict,
    Forbidden,
    InvalidRequest,
    KindConflict,
    LeaseholdError,
    LeaseLost,
    LimitMismatch,
    LockDelay,
    LockHeld,
    NoPermits,
    NotFound,
    NotReentrant,
    ProblemError,
    RateLimited,
    TicketExpired,
    TransportError,
    Unauthorized,
    Unavailable,
    UpgradeRefused,
)
from ._sync.client import Client
from ._sync.context import LeaseContext
from ._sync.election import Campaign, Term
from ._sync.lease import Lease
from ._version import __version__

__all__ = [
    "__version__",
    "Client",
    "Lease",
    "LeaseContext",
    "AsyncClient",
    "AsyncLease",
    "AsyncLeaseContext",
    "Term",
    "Campaign",
    "AsyncTerm",
    "AsyncCampaign",
    "ElectionEvent",
    "FenceCheck",
    "InLine",
    "Leader",
    "Member",
    "Queued",
    "Revocation",
    "Signal",
    "PROBLEM_CODES",
    "LeaseholdError",
    "TransportError",
    "ProblemError",
    "LockHeld",
    "LockDelay",
    "NoPermits",
    "LeaseLost",
    "TicketExpired",
    "Conflict",
    "KindConflict",
    "NotReentrant",
    "UpgradeRefused",
    "LimitMismatch",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "RateLimited",
    "Unavailable",
]
