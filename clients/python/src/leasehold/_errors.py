"""The exceptions: one per problem family, each carrying the server's problem+json.

Every error the server answers is ``application/problem+json`` with ``type``, ``title``,
``status``, ``detail`` and a stable ``code``; :class:`ProblemError` carries all of it (extra
members such as ``holder`` or ``held_as`` are in :attr:`ProblemError.problem`), and the
subclasses let callers catch the cases they handle by type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

__all__ = [
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


class LeaseholdError(Exception):
    """Base class of every error this package raises."""


class TransportError(LeaseholdError):
    """The server could not be reached, or the connection broke, and retrying did not help
    within the time allowed. The underlying ``httpx`` error is the ``__cause__``."""


class ProblemError(LeaseholdError):
    """The server answered a problem (``application/problem+json``).

    ``code`` is the stable machine-readable code (``lock_held``, ``kind_conflict``, ...),
    ``status`` the HTTP status, ``problem`` the whole JSON object (extra members included).
    ``retry_after`` is in seconds when the server said when to try again (the problem's
    ``retry_after_ms``, else the ``Retry-After`` header), else ``None``.
    """

    def __init__(
        self,
        status: int,
        code: str,
        detail: str = "",
        *,
        title: str = "",
        type: str = "",
        problem: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title
        self.type = type or f"/problems/{code}"
        self.problem: dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after
        super().__init__(f"{status} {code}: {detail}" if detail else f"{status} {code}")

    def get(self, member: str, default: Any = None) -> Any:
        """One member of the problem (``held_as``, ``limit``, ``quota``, ...)."""
        return self.problem.get(member, default)


class LockHeld(ProblemError):
    """Not acquired within the wait: someone else holds the lock (``lock_held``), or a fair
    lock's queue did not reach us before the wait ran out.

    ``holder`` is the holder's label, ``lease_id`` its lease, ``holder_id`` the Redis field
    (a Redisson client shows as ``<uuid>:<thread>``), ``retry_after`` in seconds when the
    server could tell when the lock should be free. Why the wait: ``held_since``,
    ``held_for_ms`` and ``estimated_wait_ms`` (each ``None`` when the server did not say)."""

    @property
    def holder(self) -> Optional[str]:
        return self.problem.get("holder")

    @property
    def held_since(self) -> Optional[str]:
        """When the holding lease was granted (RFC 3339); ``None`` for a Redisson holder."""
        return _text(self.problem.get("held_since"))

    @property
    def held_for_ms(self) -> Optional[int]:
        """How long the holder has held the lock, in ms, when the server answered."""
        return _whole(self.problem.get("held_for_ms"))

    @property
    def estimated_wait_ms(self) -> Optional[int]:
        """The server's estimate of how long until the holder lets go, in ms, from the name's
        recent hold times; ``None`` until it has seen a few (three) holds of the name."""
        return _whole(self.problem.get("estimated_wait_ms"))

    @property
    def lease_id(self) -> Optional[str]:
        return self.problem.get("lease_id")

    @property
    def holder_id(self) -> Optional[str]:
        return self.problem.get("holder_id")


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _whole(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class LockDelay(LockHeld):
    """Nobody holds the lock, but its last lease ended other than by a release and asked for a
    lock-delay (``lock_delay``): no new lease until ``delayed_until`` (RFC 3339). A wait goes
    on through it."""

    @property
    def delayed_until(self) -> Optional[str]:
        return self.problem.get("delayed_until")


class NoPermits(LockHeld):
    """A semaphore had too few free permits when the wait ran out (``no_permits``)."""


class LeaseLost(ProblemError):
    """The lease no longer holds its lock (``lease_lost``, 410): it expired, was released
    (by someone with its token), force-released by an operator, or could not be renewed in
    time. ``reason`` says which: ``expired``, ``released``, ``force_released``, ``evicted``,
    ``left``, or ``unrenewable`` (this client could not renew it before it would expire).

    Raised when a ``with client.lock(...)`` block ends with its lease lost, by
    ``lease.check()``, and by calls made with a lease that has ended."""

    @property
    def reason(self) -> Optional[str]:
        return self.problem.get("reason")

    @property
    def member(self) -> Optional[str]:
        """A multilease's: the lock whose end ended it."""
        return self.problem.get("member")


class TicketExpired(ProblemError):
    """A fair lock's ticket was not polled in time (``ticket_expired``)."""


class Conflict(ProblemError):
    """Another 409: the request conflicts with the lock's state (``mode_not_held``,
    ``reentry_too_deep``, ``ticket_pending``, ...) or with the API keys (``key_name_taken``,
    ``too_many_keys``)."""


class KindConflict(Conflict):
    """The name is in use as another kind (``kind_conflict``); ``held_as`` says which."""

    @property
    def held_as(self) -> Optional[str]:
        return self.problem.get("held_as")


class NotReentrant(Conflict):
    """An exclusive lock asked for again by its own holder (``not_reentrant``)."""


class UpgradeRefused(Conflict):
    """A read holder asked for the write lock (``upgrade_refused``)."""


class LimitMismatch(Conflict):
    """A semaphore asked for with another ``limit`` than its own (``limit_mismatch``)."""

    @property
    def limit(self) -> Optional[int]:
        return self.problem.get("limit")


class InvalidRequest(ProblemError):
    """The request was refused as malformed or out of bounds (400, 413, 415, 422:
    ``invalid_ttl``, ``invalid_lock_name``, ``invalid_body``, ...)."""


class Unauthorized(ProblemError):
    """401: a missing or unusable credential (``api_key_required``, ``api_key_invalid``,
    ``token_missing``, ...)."""


class Forbidden(ProblemError):
    """403: the credential does not allow this (``name_not_allowed``, ``role_missing``,
    ``token_mismatch``, ``admin_token_invalid``, ``quota_above_ceiling``, ...)."""


class NotFound(ProblemError):
    """404: ``lock_not_found``, ``lease_not_found``, ``key_not_found``, ``not_found``."""


class RateLimited(ProblemError):
    """429: ``rate_limited`` or ``quota_exceeded`` (``quota`` names which)."""


class Unavailable(ProblemError):
    """5xx, after the retries this client makes: ``redis_unavailable``, ``shutting_down``,
    ``too_many_waiters``, ``queue_full``, ``request_timeout``, ``no_quorum``, ``internal``..."""


#: The class each code the server can answer is raised as: the cases callers handle by type
#: have their own, the rest their family's. Its keys are the server's problem codes (the
#: parity test holds them to the served /openapi.json), so no known code falls to a guess.
_BY_CODE: dict[str, type[ProblemError]] = {
    "lock_held": LockHeld,
    "lock_delay": LockDelay,
    "no_permits": NoPermits,
    "lease_lost": LeaseLost,
    "ticket_expired": TicketExpired,
    "kind_conflict": KindConflict,
    "not_reentrant": NotReentrant,
    "upgrade_refused": UpgradeRefused,
    "limit_mismatch": LimitMismatch,
    **dict.fromkeys(
        ["mode_not_held", "ticket_pending", "reentry_too_deep", "key_name_taken", "too_many_keys"], Conflict
    ),
    **dict.fromkeys(["lease_not_found", "lock_not_found", "key_not_found", "not_found"], NotFound),
    **dict.fromkeys(
        ["token_missing", "token_malformed", "admin_token_required", "api_key_required", "api_key_invalid"],
        Unauthorized,
    ),
    **dict.fromkeys(
        [
            "token_mismatch",
            "admin_token_invalid",
            "admin_disabled",
            "role_missing",
            "name_not_allowed",
            "tenant_not_allowed",
            "cross_origin",
            "host_not_allowed",
            "quota_above_ceiling",
        ],
        Forbidden,
    ),
    **dict.fromkeys(
        [
            "invalid_lock_name",
            "invalid_ttl",
            "invalid_lock_delay",
            "invalid_body",
            "malformed_json",
            "unsupported_media_type",
            "payload_too_large",
            "invalid_query",
            "invalid_idempotency_key",
            "idempotency_key_reused",
            "method_not_allowed",
            "reason_too_long",
            "body_timeout",
            "redlock_disabled",
        ],
        InvalidRequest,
    ),
    **dict.fromkeys(["rate_limited", "quota_exceeded"], RateLimited),
    **dict.fromkeys(
        [
            "redis_unavailable",
            "redis_full",
            "not_replicated",
            "shutting_down",
            "too_many_watches",
            "internal",
            "too_many_waiters",
            "queue_full",
            "too_many_connections",
            "request_timeout",
            "no_quorum",
        ],
        Unavailable,
    ),
}

#: Every problem code this client knows: the server's, when this client was released.
PROBLEM_CODES: tuple[str, ...] = tuple(_BY_CODE)

_BY_STATUS: dict[int, type[ProblemError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: InvalidRequest,
    409: Conflict,
    410: LeaseLost,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
    504: Unavailable,
}


def problem_class(status: int, code: str) -> type[ProblemError]:
    """The exception class for a problem: by its code, else by its status."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status) or ProblemError


def make_problem(
    status: int,
    body: Optional[Mapping[str, Any]],
    retry_after_header: Optional[str] = None,
) -> ProblemError:
    """The typed exception for an answer with this status and (parsed) body."""
    problem: dict[str, Any] = dict(body) if isinstance(body, Mapping) else {}
    code = str(problem.get("code") or f"http_{status}")
    retry_after: Optional[float] = None
    retry_ms = problem.get("retry_after_ms")
    if isinstance(retry_ms, (int, float)) and not isinstance(retry_ms, bool):
        retry_after = max(0.0, retry_ms / 1000.0)
    elif retry_after_header:
        try:
            retry_after = max(0.0, float(retry_after_header))
        except ValueError:
            retry_after = None
    cls = problem_class(status, code)
    return cls(
        status,
        code,
        str(problem.get("detail") or ""),
        title=str(problem.get("title") or ""),
        type=str(problem.get("type") or ""),
        problem=problem,
        retry_after=retry_after,
    )


def left_the_line(position: Optional[int], last: Any) -> LockHeld:
    """The :class:`LockHeld` of a wait that ran out in line (a fair lock's queue, an
    election's): the last answer in line (``last``) says who held the lock and for how long."""
    queued: Mapping[str, Any] = last if isinstance(last, Mapping) else {}
    problem: dict[str, Any] = {"type": "/problems/lock_held", "status": 409, "code": "lock_held", "position": position}
    for ours, theirs in (
        ("holder", "held_by"),
        ("held_for_ms", "held_for_ms"),
        ("estimated_wait_ms", "estimated_wait_ms"),
    ):
        if queued.get(theirs) is not None:
            problem[ours] = queued[theirs]
    detail = f"still in line (position {position}) when the wait ran out; left the line"
    return LockHeld(409, "lock_held", detail, title="The lock is held by another lease", problem=problem)


def lost(
    reason: str,
    detail: str,
    lease_id: Optional[str] = None,
    lock: Optional[str] = None,
    member: Optional[str] = None,
) -> LeaseLost:
    """A :class:`LeaseLost` for a loss this client learned without a problem answer (the
    watch stream's ``lost`` event, or renewals failing until the lease would expire)."""
    problem: dict[str, Any] = {
        "type": "/problems/lease_lost",
        "title": "The lease no longer holds the lock",
        "status": 410,
        "detail": detail,
        "code": "lease_lost",
        "reason": reason,
    }
    if lease_id is not None:
        problem["lease_id"] = lease_id
    if lock is not None:
        problem["lock"] = lock
    if member is not None:
        problem["member"] = member
    return LeaseLost(410, "lease_lost", detail, title=problem["title"], problem=problem)
