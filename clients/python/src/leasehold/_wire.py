"""What requests and answers hold, free of I/O: a grant (and a multilease's members), a fair
lock's ticket, a fence check, where a lease lives (:class:`Target`), and the request bodies.
``_core`` re-exports all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union
from urllib.parse import quote

if TYPE_CHECKING:
    from datetime import datetime

    from ._core import Call, Reply

LOCKS = "locks"
SEMAPHORES = "semaphores"
MULTILEASES = "multileases"
ELECTIONS = "elections"


def segment(name: str) -> str:
    return quote(str(name), safe="")


# --- grants, tickets, fence checks -------------------------------------------------------


@dataclass
class Grant:
    """A lease as the server granted it (201) or re-entered it (200)."""

    lease_id: str
    token: Optional[str]
    lock: str
    kind: str
    holder: Optional[str]
    fencing_token: int
    reentry_count: int
    ttl_ms: int
    expires_at: Optional[str]
    permits: Optional[int]
    #: When the request that (re)started the lease's TTL was sent (monotonic).
    sent_at: float
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    #: A multilease's locks (else empty).
    members: list[Member] = field(default_factory=list)
    replicas_acked: Optional[int] = None
    nodes_acked: Optional[int] = None
    validity_ms: Optional[int] = None
    degraded: Optional[str] = None

    @classmethod
    def parse(cls, reply: Reply, token: Optional[str] = None) -> Grant:
        body = reply.body if isinstance(reply.body, dict) else {}
        replicas, nodes, validity, degraded = acked(body)
        # A multilease's grant has members instead of one lock, kind and fencing token; an
        # election's candidate has its candidate_id and term instead of a lease_id and token.
        election = "candidate_id" in body and "lease_id" not in body
        return cls(
            lease_id=str(body["candidate_id"] if election else body["lease_id"]),
            token=body.get("token") or token,
            lock=str(body.get("lock", "")),
            kind="election" if election else str(body.get("kind", "")),
            holder=body.get("holder"),
            fencing_token=int(body.get("term" if election else "fencing_token", 0)),
            reentry_count=int(body.get("reentry_count", 1)),
            ttl_ms=int(body["ttl_ms"]),
            expires_at=body.get("expires_at"),
            permits=body.get("permits"),
            sent_at=reply.sent_at,
            raw=body,
            members=[Member.parse(m) for m in body.get("members") or [] if isinstance(m, dict)],
            replicas_acked=replicas,
            nodes_acked=nodes,
            validity_ms=validity,
            degraded=degraded,
        )


@dataclass(frozen=True)
class Member:
    """One lock of a held multilease: its own lease on the lock, and its fencing token, which
    goes with every write to the resource that lock protects."""

    lock: str
    kind: str
    lease_id: str
    fencing_token: int
    #: Redis replicas that acknowledged this member's grant (None when none are required).
    replicas_acked: Optional[int] = None
    #: Set when this member's grant stands on its Redis primary alone, so a failover could
    #: lose it: ``no_replica`` (its shard has no replica a failover could promote) or
    #: ``not_replicated`` (too few replicas acknowledged a heartbeat in time).
    degraded: Optional[str] = None
    #: An operator's revocation of this member's lock, once told (by the watch or a heartbeat's
    #: answer); the multilease ends by the earliest deadline of its members'.
    revocation: Optional[Revocation] = None

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Member:
        acked = body.get("replicas_acked")
        degraded = body.get("degraded")
        return cls(
            lock=str(body["lock"]),
            kind=str(body.get("kind", "")),
            lease_id=str(body["lease_id"]),
            fencing_token=int(body["fencing_token"]),
            replicas_acked=int(acked) if isinstance(acked, int) else None,
            degraded=degraded if isinstance(degraded, str) else None,
            revocation=Revocation.parse(body.get("revocation")),
        )


def acked(body: Mapping[str, Any]) -> tuple[Optional[int], Optional[int], Optional[int], Optional[str]]:
    """(replicas_acked, nodes_acked, validity_ms, degraded) of a grant or renewal; a
    multilease's replicas and degraded mark are its weakest member's."""

    def number(value: Any) -> Optional[int]:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def text(value: Any) -> Optional[str]:
        return value if isinstance(value, str) else None

    replicas, degraded = number(body.get("replicas_acked")), text(body.get("degraded"))
    members = [m for m in body.get("members") or [] if isinstance(m, Mapping)]
    counts = [n for n in (number(m.get("replicas_acked")) for m in members) if n is not None]
    if counts:
        replicas = min(counts)
    degraded = degraded or next((d for d in (text(m.get("degraded")) for m in members) if d), None)
    return replicas, number(body.get("nodes_acked")), number(body.get("validity_ms")), degraded


@dataclass
class Ticket:
    ticket_id: str
    token: str
    position: Optional[int]


@dataclass(frozen=True)
class Queued:
    """Where a fair lock's waiter stands, as each answer in line tells it (``on_queued``):
    ``position`` (1: next), ``estimated_wait_ms`` (the server's estimate of the wait until its
    turn; ``None`` until the server has seen a few holds of the name), ``held_by`` (the holding
    lease's label) and ``held_for_ms`` (how long it has held the lock)."""

    position: Optional[int]
    estimated_wait_ms: Optional[int] = None
    held_by: Optional[str] = None
    held_for_ms: Optional[int] = None

    @classmethod
    def parse(cls, body: Any) -> Queued:
        body = body if isinstance(body, Mapping) else {}

        def number(value: Any) -> Optional[int]:
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        held_by = body.get("held_by")
        return cls(
            position=number(body.get("position")),
            estimated_wait_ms=number(body.get("estimated_wait_ms")),
            held_by=held_by if isinstance(held_by, str) else None,
            held_for_ms=number(body.get("held_for_ms")),
        )


#: What ``on_queued`` is: called with each :class:`Queued` while a fair lock's acquire waits.
OnQueued = Optional[Callable[[Queued], Any]]


def expiring_slack(value: Optional[int]) -> Optional[int]:
    """An ``expiring_slack_ms`` option, checked: ``None`` (the server's default, a third of the
    TTL) or a positive whole number of ms (the server takes at most half the TTL)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expiring_slack_ms must be a positive whole number of ms (or None), not {value!r}")
    return value


@dataclass(frozen=True)
class FenceCheck:
    """The answer of ``check_fence``: ``current`` is true when a lease holding the lock right
    now carries ``fencing_token`` (when the server read it; see the README's race note)."""

    lock: str
    fencing_token: int
    current: bool
    fencing_counter: int


@dataclass
class AcquireState:
    """What an acquire in progress owns on the server, so that an acquire cut short (an
    exception, a cancellation, Ctrl-C) can give it back: a fair lock's ticket, or a grant
    not yet handed to the caller."""

    ticket: Optional[Ticket] = None
    grant: Optional[Grant] = None
    reentry: bool = False
    #: While an acquire request is out without an answer: the same request, not waiting.
    #: Cut short then, the server may have acted on it (a grant or a ticket answered to a
    #: client that was gone); sending it again with its key tells what it did.
    replay: Optional[Call] = None


@dataclass(frozen=True)
class Target:
    """Where a lease lives on the server, decided once when it is acquired: a lock, a
    semaphore, several locks as one (a multilease), or an election's candidate (its term
    once it leads). The branches on ``resource`` say what each can do."""

    resource: str
    #: The lock's, semaphore's or election's name; a multilease's locks, joined by commas.
    name: str

    @property
    def base(self) -> str:
        return f"/v1/{self.resource}/{segment(self.name)}"

    @property
    def collection(self) -> str:
        """Where it is acquired (POST), and its leases' ids go under."""
        if self.resource == MULTILEASES:
            return "/v1/multileases"
        if self.resource == ELECTIONS:
            return f"{self.base}/candidates"
        return f"{self.base}/leases"

    def lease_path(self, lease_id: str) -> str:
        return f"{self.collection}/{segment(lease_id)}"

    def ticket_path(self, ticket_id: str) -> str:
        """A place in line: a fair lock's ticket (polled with POST), an election's candidate
        (polled with GET: the same URL as its term's)."""
        if self.resource == ELECTIONS:
            return self.lease_path(ticket_id)
        return f"{self.base}/tickets/{segment(ticket_id)}"

    @property
    def waits_in_line(self) -> bool:
        """A 202 to its acquire is a place in line (a fair lock's ticket, a candidate)."""
        return self.resource in (LOCKS, ELECTIONS)


def lock_body(
    ttl_ms: Optional[int],
    holder: Optional[str],
    kind: Optional[str],
    policy: Optional[str],
    metadata: Optional[Mapping[str, Any]],
    lock_delay_ms: Optional[int] = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if ttl_ms is not None:
        body["ttl_ms"] = int(ttl_ms)
    if holder is not None:
        body["holder"] = holder
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if kind is not None:
        body["kind"] = kind
    if policy is not None:
        body["policy"] = policy
    if lock_delay_ms:
        body["lock_delay_ms"] = int(lock_delay_ms)
    return body


def multilease_request(
    locks: Sequence[Union[str, tuple[str, str]]],
    ttl_ms: Optional[int],
    holder: Optional[str],
    metadata: Optional[Mapping[str, Any]],
    lock_delay_ms: Optional[int],
) -> tuple[Target, dict[str, Any]]:
    """Where a multilease of ``locks`` (names, or ``(name, kind)``) lives, and its body."""
    asked: list[dict[str, Any]] = []
    for lock in locks:
        if isinstance(lock, str):
            asked.append({"name": lock})
        else:
            name, kind = lock
            asked.append({"name": name, "kind": kind})
    if not asked:
        raise ValueError("a multilease needs at least one lock")
    body = lock_body(ttl_ms, holder, None, None, metadata, lock_delay_ms)
    body["locks"] = asked
    return Target(MULTILEASES, ",".join(lock["name"] for lock in asked)), body


def campaign_body(
    value: str, ttl_ms: Optional[int], holder: Optional[str], lock_delay_ms: Optional[int]
) -> dict[str, Any]:
    body: dict[str, Any] = {"value": str(value)}
    if ttl_ms is not None:
        body["ttl_ms"] = int(ttl_ms)
    if holder is not None:
        body["holder"] = holder
    if lock_delay_ms:
        body["lock_delay_ms"] = int(lock_delay_ms)
    return body


@dataclass(frozen=True)
class ElectionEvent:
    """One change an election's observer is told (``client.observe``): ``kind`` is
    ``leader`` (a new term, or a new value in the same term: ``value``, ``holder``,
    ``since``), ``vacant`` (nobody leads; ``term`` is the last one) or ``resync`` (the server
    no longer reaches back to where a resumed stream left off: terms may have been missed).
    ``id`` is its place in the election's terms log (sent back as ``Last-Event-ID``)."""

    kind: str
    term: int
    value: Optional[str] = None
    holder: Optional[str] = None
    since: Optional[str] = None
    candidate_id: Optional[str] = None
    id: Optional[str] = None

    @classmethod
    def parse(cls, kind: str, data: str, event_id: Optional[str]) -> ElectionEvent:
        import json

        try:
            body = json.loads(data) if data else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        return cls(
            kind=kind,
            term=int(body.get("term") or 0),
            value=body.get("value"),
            holder=body.get("holder"),
            since=body.get("since"),
            candidate_id=body.get("candidate_id"),
            id=event_id,
        )


@dataclass(frozen=True)
class Revocation:
    """An operator's request that the holder let go (``POST /v1/admin/.../revoke``): why
    (``reason``, empty when none was given), who asked (``requested_by``), when
    (``requested_at``), and the ``deadline`` (RFC 3339 times, as the server sent them) by which
    the lease ends unless released first."""

    reason: str
    requested_by: Optional[str]
    requested_at: str
    deadline: str

    @classmethod
    def parse(cls, body: Any) -> Optional[Revocation]:
        if not isinstance(body, Mapping) or not isinstance(body.get("deadline"), str):
            return None
        reason, by = body.get("reason"), body.get("requested_by")
        return cls(
            reason=reason if isinstance(reason, str) else "",
            requested_by=by if isinstance(by, str) else None,
            requested_at=str(body.get("requested_at") or body["deadline"]),
            deadline=str(body["deadline"]),
        )

    @classmethod
    def of_heartbeat(cls, body: Mapping[str, Any]) -> list[tuple[Revocation, Optional[str]]]:
        """The revocations a heartbeat's answer carries, each with its member's lock when it is
        a member's: a multilease's answer has none at top level but one on each member revoked
        (each is returned, with its lock for the signal to name, as the watch's does)."""
        revocation = cls.parse(body.get("revocation"))
        if revocation is not None:
            return [(revocation, None)]
        told: list[tuple[Revocation, Optional[str]]] = []
        for member in body.get("members") or []:
            revocation = cls.parse(member.get("revocation")) if isinstance(member, Mapping) else None
            if revocation is not None:
                lock = member.get("lock")
                told.append((revocation, lock if isinstance(lock, str) else None))
        return told

    def ends_before(self, other: Revocation) -> bool:
        """Its deadline is earlier than ``other``'s (the server's clock for both): of a
        multilease's members' revocations, the one that ends it."""
        mine, theirs = _instant(self.deadline), _instant(other.deadline)
        return mine is not None and (theirs is None or mine < theirs)

    def seconds_left(self) -> float:
        """Seconds from now to the deadline, at most the grace the server gave (``deadline`` −
        ``requested_at``, both its own clock): a clock of ours that runs behind the server's
        does not move the end later than that. At least 0."""
        from datetime import datetime, timezone

        deadline, requested = _instant(self.deadline), _instant(self.requested_at)
        if deadline is None:
            return 0.0
        left = (deadline - datetime.now(timezone.utc)).total_seconds()
        if requested is not None:
            left = min(left, (deadline - requested).total_seconds())
        return max(0.0, left)


def _instant(text: str) -> Optional[datetime]:
    """An RFC 3339 time the server sent, or None when it does not parse."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


#: The watch stream's events before the loss (``lost`` is the loss itself, not a signal).
SIGNAL_KINDS = ("expiring", "renewed", "degraded", "recovered", "contended", "revocation_requested")


@dataclass(frozen=True)
class Signal:
    """One thing a held lease's watch stream told before its end (``lease.on_signal``):
    ``kind`` is ``expiring`` (``remaining_ms``, ``valid_until``: heartbeat now, or stop
    before then), ``renewed`` (``valid_until``), ``degraded`` (``since``, ``valid_until``: the
    server cannot reach Redis), ``recovered`` (``valid_until``), ``contended`` (``waiters``:
    how many wait for the name now) or ``revocation_requested`` (``revocation``: an operator
    asks the holder to let go by its ``deadline``). ``lock`` names the lock (a multilease's
    member); ``id`` is the event's place in the stream (``None`` when a heartbeat's answer told
    the revocation). Times are RFC 3339 text, as the server sent them."""

    kind: str
    lease_id: Optional[str] = None
    lock: Optional[str] = None
    remaining_ms: Optional[int] = None
    valid_until: Optional[str] = None
    since: Optional[str] = None
    waiters: Optional[int] = None
    revocation: Optional[Revocation] = None
    id: Optional[str] = None

    @classmethod
    def parse(cls, kind: str, data: str, event_id: Optional[str]) -> Signal:
        import json

        try:
            body = json.loads(data) if data else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}

        def number(value: Any) -> Optional[int]:
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        def text(value: Any) -> Optional[str]:
            return value if isinstance(value, str) else None

        return cls(
            kind=kind,
            lease_id=text(body.get("lease_id")),
            lock=text(body.get("lock")),
            remaining_ms=number(body.get("remaining_ms")),
            valid_until=text(body.get("valid_until")),
            since=text(body.get("since")),
            waiters=number(body.get("waiters")),
            revocation=Revocation.parse(body.get("revocation")),
            id=event_id,
        )


def semaphore_body(
    limit: int,
    permits: int,
    ttl_ms: Optional[int],
    holder: Optional[str],
    metadata: Optional[Mapping[str, Any]],
) -> dict[str, Any]:
    body: dict[str, Any] = {"limit": int(limit), "permits": int(permits)}
    if ttl_ms is not None:
        body["ttl_ms"] = int(ttl_ms)
    if holder is not None:
        body["holder"] = holder
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return body
