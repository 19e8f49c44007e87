"""The sans-IO core, part two: keeping a held lease. When to heartbeat and when to give a
lease up (:class:`Renewal`), the watch stream's events and what a refused watch means, and
which leases this thread or task holds (for reentry). ``_core`` re-exports all of it.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, Optional

from ._errors import LeaseLost, NotFound, ProblemError, lost

if TYPE_CHECKING:
    from ._core import Call, Target

#: Longest pause between two heartbeats retried after a failure.
HEARTBEAT_RETRY_PAUSE = 1.0
#: Pause before opening a broken lease watch again (heartbeats go on meanwhile).
WATCH_RETRY_PAUSE = 1.0
#: The server sends a keep-alive comment on a watch every 15 s; a watch silent for this long
#: is taken for broken (a proxy dropped it) and opened again.
WATCH_READ_TIMEOUT = 45.0
# --- keeping a lease --------------------------------------------------------------------


class Renewal:
    """When to heartbeat, and until when the lease is surely ours.

    Expiry is tracked on our own monotonic clock, never from the server's ``expires_at``: a
    renewal *sent* at instant ``t`` keeps the lease until at least ``t + ttl``, because the
    server renews it after ``t``. Heartbeats go every TTL/3; a failed one is retried after
    a tenth of the TTL (at most a second);
    when renewals keep failing until only a margin of the lease is left (a sixth of the TTL,
    at least a second, at most a third of the TTL), the lease is given up for lost: past that
    instant someone else may hold the lock without us being told. A heartbeat that is due is
    always tried first (a thread or task woken late must not give up a lease it can renew).

    An operator's revocation moves the end: from then on the lease is given up (reason
    ``revoked``) at the revocation's deadline less the same margin (``revoked_at``), and the
    heartbeats' answers, whose ``ttl_ms`` stops at the deadline, leave the TTL the margin and
    the heartbeat interval are counted from as it was."""

    def __init__(self, ttl_ms: int, renewed_at: float) -> None:
        self.ttl = ttl_ms / 1000
        self.until = renewed_at + self.ttl
        self.next_heartbeat = renewed_at + self.ttl / 3
        #: When a revocation ends the lease (monotonic; None without one).
        self.revoked_at: Optional[float] = None

    def renewed(self, ttl_ms: int, sent_at: float, revoked: bool = False) -> None:
        """A renewal answered; ``revoked``: its answer carried a revocation, so its
        ``ttl_ms`` is what is left until the deadline, not the lease's TTL."""
        if revoked:
            self.until = sent_at + ttl_ms / 1000
            self.revoke(self.until)
        else:
            self.ttl = ttl_ms / 1000
            self.until = sent_at + self.ttl
        self.next_heartbeat = sent_at + self.ttl / 3

    def revoke(self, ends_at: float) -> None:
        """A revocation ends the lease at ``ends_at`` (monotonic) at the latest."""
        self.revoked_at = ends_at if self.revoked_at is None else min(self.revoked_at, ends_at)

    @property
    def revoked(self) -> bool:
        """The revocation's deadline, not the lack of renewals, is what gives the lease up."""
        return self.revoked_at is not None and self.revoked_at <= self.until

    def failed(self, at: float) -> None:
        self.next_heartbeat = at + min(self.ttl / 10, HEARTBEAT_RETRY_PAUSE)

    @property
    def margin(self) -> float:
        # At most a third: a short lease (under 3 s) still leaves its first heartbeat a third of
        # the TTL to answer; with half, a 900 ms lease gave it 150 ms and a loaded machine
        # lost leases that were never in danger.
        return min(max(self.ttl / 6, 1.0), self.ttl / 3)

    @property
    def give_up_at(self) -> float:
        ends = self.until if self.revoked_at is None else min(self.until, self.revoked_at)
        return ends - self.margin

    @property
    def request_timeout(self) -> float:
        """A heartbeat must not hang past the next one: it is retried instead."""
        return min(max(self.ttl / 3, 0.5), 10.0)

    def heartbeat_timeout(self, at: float) -> Optional[float]:
        """How long a heartbeat sent at ``at`` may take: until the give-up instant (or, once
        past it, until the lease's expiry), so that a failure is known in time; ``None``
        when the lease has surely expired already."""
        if at >= self.until:
            return None
        answer_by = self.give_up_at if at < self.give_up_at else self.until
        return max(0.05, min(self.request_timeout, answer_by - at))

    def stale(self, at: float) -> bool:
        """The acquire's answer took long enough (it waited) that one heartbeat should pin
        the expiry down again before the work starts."""
        return at - (self.until - self.ttl) > self.ttl / 10


def heartbeat_call(target: Target, lease_id: str, token: str, timeout: float, term: Optional[int] = None) -> Call:
    """A lease's heartbeat. A leader's names its ``term`` (``?term=N``): should Redis have lost
    the grant and put the candidate back in line, the server answers 410 instead of leading it
    into a new term the client would take for the old one."""
    from ._core import Call

    params = None if term is None else {"term": int(term)}
    return Call("POST", f"{target.lease_path(lease_id)}/heartbeat", timeout=timeout, params=params, token=token)


def watch_path(target: Target, lease_id: str) -> str:
    return f"{target.lease_path(lease_id)}/watch"


class WatchVerdict:
    """What to do after a watch request answered a problem instead of a stream."""

    LOST = "lost"
    STOP = "stop"
    RETRY = "retry"


def judge_watch_problem(problem: ProblemError) -> tuple[str, float]:
    """(verdict, pause). Lost when the lease has ended; stop watching (heartbeats carry on)
    when the server has no watch route or refuses the credential; otherwise retry later."""
    if isinstance(problem, LeaseLost):
        return WatchVerdict.LOST, 0.0
    if isinstance(problem, NotFound):
        if problem.code == "lease_not_found":
            return WatchVerdict.LOST, 0.0
        return WatchVerdict.STOP, 0.0
    if problem.status in (401, 403, 405):
        return WatchVerdict.STOP, 0.0
    pause = WATCH_RETRY_PAUSE
    if problem.retry_after is not None:
        pause = max(pause, min(problem.retry_after, 30.0))
    return WatchVerdict.RETRY, pause


class SSEParser:
    """Server-sent events, line by line: returns (event, data) when an event is complete.
    ``last_id`` is the last ``id:`` the stream sent (what ``Last-Event-ID`` resumes from)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self.last_id: Optional[str] = None

    def feed(self, line: str) -> Optional[tuple[str, str]]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            event = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None


def lost_event(data: str) -> dict[str, Any]:
    import json

    try:
        event = json.loads(data)
    except ValueError:
        event = {}
    return event if isinstance(event, dict) else {}


def watch_loss(data: str, target: Target, lease_id: str) -> LeaseLost:
    """The loss an ``event: lost`` tells; a multilease's names the lock that ended it."""
    event = lost_event(data)
    reason = str(event.get("reason") or "lost")
    member = event.get("lock") if target.resource == "multileases" else None
    return lost(
        reason,
        f"the server reports the lease {reason.replace('_', ' ')}",
        lease_id,
        target.name,
        member=str(member) if member else None,
    )


# --- reentry within one thread or task ----------------------------------------------------

# The leases this thread (or asyncio task) holds through ``client.lock()`` blocks, by
# (client, name): a nested ``lock()`` of the same name re-enters the lease, as a Redisson
# RLock does in one thread. A new thread starts with nothing held; a task starts with what
# the task that created it held.
HELD: contextvars.ContextVar[tuple[tuple[tuple[int, str], Any], ...]] = contextvars.ContextVar(
    "leasehold_held", default=()
)


def held_lease(client_id: int, name: str) -> Any:
    for (cid, held_name), lease in reversed(HELD.get()):
        if cid == client_id and held_name == name:
            return lease
    return None


def push_held(client_id: int, name: str, lease: Any) -> contextvars.Token[Any]:
    return HELD.set(HELD.get() + (((client_id, name), lease),))


def pop_held(token: contextvars.Token[Any], lease: Any) -> None:
    try:
        HELD.reset(token)
    except ValueError:  # left in another context than it was entered in
        HELD.set(tuple(entry for entry in HELD.get() if entry[1] is not lease))
