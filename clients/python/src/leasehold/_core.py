"""What the synchronous and the asyncio client share: the protocol, free of I/O.

Every operation that may take more than one request (an acquire that re-asks, polls a fair
lock's ticket or retries a 503; a release that retries) is written once, as a generator that
yields the next step (a :class:`Call` to send or a :class:`Sleep`) and is sent back what came
of it (a :class:`Reply`, or a :class:`Failure` when the request never got an answer). The
sync client drives these plans with blocking httpx calls, the async client with awaits, so
both follow the same rules:

- Only requests that are safe to send twice are retried: reads, heartbeats, ticket polls and
  leaves, and acquires, reentries and releases, which always carry an ``Idempotency-Key``
  (the same one on every retry of one call), so the server answers a retry with its first
  answer instead of acting twice.
- A retry follows a dropped connection, a timeout, a 503 (Redis slow, instance stopping,
  too many waiters), a 504, a 408 or a 429 ``rate_limited``, after a short backoff (at
  least what ``Retry-After`` says), for as long as the call's time allows.
- An acquire's HTTP timeout is its remaining wait plus the client's ``timeout``.
"""

from __future__ import annotations

import contextvars
import getpass
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, TypeVar, Union
from urllib.parse import quote

from ._errors import (
    LeaseLost,
    LockHeld,
    NotFound,
    ProblemError,
    TicketExpired,
    TransportError,
    make_problem,
)

T = TypeVar("T")

#: Where the client looks when no URL is given (as the ``leasehold`` CLI does).
DEFAULT_URL = "http://127.0.0.1:8080"
#: Seconds a request may take beyond the server-side wait it asked for, by default.
DEFAULT_TIMEOUT = 10.0
#: Pause before asking again when the server answered 409 before our wait was over (its
#: ``--max-wait-ms`` is shorter than the wait asked for).
REASK_PAUSE = 0.1
#: Longest pause between two heartbeats retried after a failure.
HEARTBEAT_RETRY_PAUSE = 1.0
#: Pause before opening a broken lease watch again (heartbeats go on meanwhile).
WATCH_RETRY_PAUSE = 1.0
#: The server sends a keep-alive comment on a watch every 15 s; a watch silent for this long
#: is taken for broken (a proxy dropped it) and opened again.
WATCH_READ_TIMEOUT = 45.0
#: A wait_ms to ask for when the caller waits without limit; the server cuts it to its own
#: ``--max-wait-ms`` and we ask again.
FOREVER_WAIT_MS = 3_600_000
#: Longest pause between retries of one call (unless Retry-After asks for longer).
MAX_BACKOFF = 1.0

LOCKS = "locks"
SEMAPHORES = "semaphores"

LOCK_KINDS = ("reentrant", "exclusive", "fair", "read", "write", "redlock")


def now() -> float:
    return time.monotonic()


def new_key() -> str:
    """A fresh ``Idempotency-Key``."""
    return str(uuid.uuid4())


def default_holder() -> str:
    """``user@host (pid N)``: what operators see as the holder when none is given."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (some containers)
        user = "python"
    label = f"{user}@{socket.gethostname()} (pid {os.getpid()})"
    return label[:200]


def segment(name: str) -> str:
    return quote(str(name), safe="")


def resolve_url(url: Optional[str]) -> str:
    url = url or os.environ.get("LEASEHOLD_SERVER") or DEFAULT_URL
    if not (url.startswith("http://") or url.startswith("https://")):
        raise ValueError(f"the server URL must start with http:// or https://, not {url!r}")
    return url.rstrip("/")


def resolve_api_key(api_key: Optional[str]) -> Optional[str]:
    if api_key is None:
        api_key = os.environ.get("LEASEHOLD_API_KEY")
    return api_key or None


# --- steps of a plan ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One HTTP request to make. ``timeout`` bounds each phase (connect, send, read)."""

    method: str
    path: str
    timeout: float
    params: Optional[dict[str, Any]] = None
    json: Any = None
    token: Optional[str] = None
    idempotency_key: Optional[str] = None

    def headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, application/problem+json"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        if self.idempotency_key is not None:
            headers["idempotency-key"] = self.idempotency_key
        return headers


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any
    sent_at: float

    def problem(self) -> ProblemError:
        return make_problem(self.status, self.body, self.headers.get("retry-after"))


@dataclass
class Failure:
    """The request got no answer: it could not connect, the connection broke, or it timed
    out. It may or may not have reached the server."""

    error: BaseException
    sent_at: float


Outcome = Union[Reply, Failure]
Step = Union[Call, Sleep]
Plan = Generator[Step, Optional[Outcome], T]


def parse_body(content: bytes) -> Any:
    import json

    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return {"detail": content[:200].decode("utf-8", "replace")}


# --- retries ------------------------------------------------------------------------------


def _retryable(reply: Reply) -> bool:
    if reply.status in (408, 503, 504):
        return True
    if reply.status == 429:
        body = reply.body if isinstance(reply.body, Mapping) else {}
        return body.get("code") == "rate_limited"
    return False


def backoff(attempt: int) -> float:
    base = min(MAX_BACKOFF, 0.05 * (2**attempt))
    return float(base / 2 + random.random() * base / 2)


def request(build: Callable[[], Call], give_up_at: float) -> Plan[Reply]:
    """Sends the call that ``build`` makes, retrying answers that say nothing happened (503,
    504, 408, 429 ``rate_limited``) and requests that got no answer, until ``give_up_at``
    (monotonic). Returns the last answer (which may be a retryable one, when time ran out);
    raises :class:`TransportError` when the last attempt got no answer."""
    attempt = 0
    while True:
        outcome = yield build()
        assert outcome is not None
        if isinstance(outcome, Reply):
            if not _retryable(outcome):
                return outcome
            delay = backoff(attempt)
            retry_after = outcome.problem().retry_after
            if retry_after is not None:
                delay = max(delay, retry_after)
            if now() + delay >= give_up_at:
                return outcome
        else:
            delay = backoff(attempt)
            if now() + delay >= give_up_at:
                raise TransportError(f"no answer from the server: {outcome.error!r}") from outcome.error
        yield Sleep(delay)
        attempt += 1


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

    @classmethod
    def parse(cls, reply: Reply, token: Optional[str] = None) -> Grant:
        body = reply.body if isinstance(reply.body, dict) else {}
        return cls(
            lease_id=str(body["lease_id"]),
            token=body.get("token") or token,
            lock=str(body.get("lock", "")),
            kind=str(body.get("kind", "")),
            holder=body.get("holder"),
            fencing_token=int(body["fencing_token"]),
            reentry_count=int(body.get("reentry_count", 1)),
            ttl_ms=int(body["ttl_ms"]),
            expires_at=body.get("expires_at"),
            permits=body.get("permits"),
            sent_at=reply.sent_at,
            raw=body,
        )


@dataclass
class Ticket:
    ticket_id: str
    token: str
    position: Optional[int]


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
    """What a lease is on: a lock or a semaphore (multileases will be a third resource)."""

    resource: str
    name: str

    @property
    def base(self) -> str:
        return f"/v1/{self.resource}/{segment(self.name)}"

    def lease_path(self, lease_id: str) -> str:
        return f"{self.base}/leases/{segment(lease_id)}"


def lock_body(
    ttl_ms: Optional[int],
    holder: Optional[str],
    kind: Optional[str],
    policy: Optional[str],
    metadata: Optional[Mapping[str, Any]],
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
    return body


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


def _wait_ms(deadline: float) -> int:
    if deadline == math.inf:
        return FOREVER_WAIT_MS
    return max(0, math.ceil((deadline - now()) * 1000))


def acquire(
    target: Target,
    body: dict[str, Any],
    wait_s: Optional[float],
    timeout: float,
    state: AcquireState,
    reentry_token: Optional[str] = None,
) -> Plan[Grant]:
    """Takes a lease (or, with ``reentry_token``, one more level of that lease), waiting up
    to ``wait_s`` in all (``None``: without limit): re-asks when the server's own maximum
    wait is shorter, follows a fair lock's ticket until its turn, and retries what may be
    retried with one ``Idempotency-Key``. Raises :class:`LockHeld` (or ``NoPermits``) when the
    wait ran out, or the problem the server answered."""
    deadline = math.inf if wait_s is None else now() + max(0.0, wait_s)
    state.reentry = reentry_token is not None
    key = new_key()
    # A new fair lease asks without waiting, and waits by polling its ticket: the server
    # (as of this client's 0.1.0) answers a fair acquire that carries an Idempotency-Key and
    # waits on a held lock 422 idempotency_key_reused, its own first use of the key.
    queue_first = reentry_token is None and body.get("kind") == "fair"

    def build() -> Call:
        wait_ms = 0 if queue_first else _wait_ms(deadline)
        return Call(
            "POST",
            f"{target.base}/leases",
            timeout=wait_ms / 1000 + timeout,
            params={"wait_ms": wait_ms} if wait_ms else None,
            json=body,
            token=reentry_token,
            idempotency_key=key,
        )

    while True:
        state.replay = replace(build(), params=None, timeout=timeout)
        reply = yield from request(build, deadline + timeout)
        state.replay = None
        if reply.status in (200, 201):
            grant = Grant.parse(reply, reentry_token)
            state.grant = grant
            return grant
        if reply.status == 202 and target.resource == LOCKS:
            queue_first = False
            queued = reply.body if isinstance(reply.body, dict) else {}
            ticket = Ticket(str(queued["ticket_id"]), str(queued["token"]), queued.get("position"))
            state.ticket = ticket
            granted = yield from _wait_in_line(target, ticket, deadline, timeout, state)
            if granted is not None:
                return granted
            # The ticket expired (a poll came too late): queue again, with a new key.
            key = new_key()
            queue_first = True
            continue
        problem = reply.problem()
        if isinstance(problem, LockHeld) and reentry_token is None:
            if now() + REASK_PAUSE < deadline:
                yield Sleep(REASK_PAUSE)
                continue
        raise problem


def _wait_in_line(
    target: Target,
    ticket: Ticket,
    deadline: float,
    timeout: float,
    state: AcquireState,
) -> Plan[Optional[Grant]]:
    path = f"{target.base}/tickets/{segment(ticket.ticket_id)}"
    while True:

        def build() -> Call:
            wait_ms = _wait_ms(deadline)
            return Call(
                "POST",
                path,
                timeout=wait_ms / 1000 + timeout,
                params={"wait_ms": wait_ms} if wait_ms else None,
                token=ticket.token,
            )

        reply = yield from request(build, max(deadline, now()) + timeout)
        if reply.status == 201:
            grant = Grant.parse(reply, ticket.token)
            state.grant = grant
            state.ticket = None
            return grant
        if reply.status == 202:
            queued = reply.body if isinstance(reply.body, dict) else {}
            ticket.position = queued.get("position", ticket.position)
            if now() >= deadline:
                yield from leave(target, ticket, timeout)
                state.ticket = None
                raise LockHeld(
                    409,
                    "lock_held",
                    f"still queued for the fair lock (position {ticket.position}) when the wait ran out",
                    title="The lock is held by another lease",
                    problem={
                        "type": "/problems/lock_held",
                        "status": 409,
                        "code": "lock_held",
                        "position": ticket.position,
                    },
                )
            continue
        problem = reply.problem()
        if isinstance(problem, TicketExpired) and now() < deadline:
            state.ticket = None
            return None
        state.ticket = None
        raise problem


def leave(target: Target, ticket: Ticket, timeout: float) -> Plan[None]:
    """Gives a fair lock's place in line up. A ticket granted meanwhile is a lease: the leave
    answers 410 then, and the lease is released."""
    path = f"{target.base}/tickets/{segment(ticket.ticket_id)}"
    reply = yield from request(lambda: Call("DELETE", path, timeout=timeout, token=ticket.token), now() + timeout)
    if reply.status == 410:
        try:
            yield from release(target, ticket.ticket_id, ticket.token, timeout, all_levels=True)
        except LeaseLost:
            pass  # it had left the queue already


def release(
    target: Target,
    lease_id: str,
    token: str,
    timeout: float,
    *,
    all_levels: bool,
    mode: Optional[str] = None,
) -> Plan[Optional[dict[str, Any]]]:
    """Releases every level (``all_levels``) or one (of ``mode``, for read/write leases).
    Returns the answer, or ``None`` when the lease had been released already (a retry whose
    first attempt went through). Raises :class:`LeaseLost` when the lease had ended another
    way, and other problems as they come."""
    params: dict[str, Any] = {}
    if target.resource == LOCKS:
        if all_levels:
            params["all"] = "true"
        if mode is not None:
            params["mode"] = mode
    key = new_key()
    reply = yield from request(
        lambda: Call(
            "DELETE",
            target.lease_path(lease_id),
            timeout=timeout,
            params=params or None,
            token=token,
            idempotency_key=key,
        ),
        now() + timeout,
    )
    if reply.status == 200:
        return reply.body if isinstance(reply.body, dict) else {}
    problem = reply.problem()
    if isinstance(problem, LeaseLost) and problem.reason == "released":
        return None
    raise problem


def abandon(target: Target, state: AcquireState, timeout: float) -> Optional[Plan[Any]]:
    """The plan that gives back what an acquire cut short owns, if anything: a grant it
    received, the ticket it waits with, or whatever its unanswered request got."""
    grant, ticket, replay = state.grant, state.ticket, state.replay
    state.grant = state.ticket = state.replay = None
    if grant is not None and grant.token is not None:
        return _give_back(target, grant, state.reentry, timeout)
    if ticket is not None:
        return leave(target, ticket, timeout)
    if replay is not None:
        return _replay_and_give_back(target, replay, state.reentry, timeout)
    return None


def _give_back(target: Target, grant: Grant, reentry: bool, timeout: float) -> Plan[Any]:
    if reentry:
        mode = grant.kind if grant.kind in ("read", "write") else None
        return release(target, grant.lease_id, grant.token or "", timeout, all_levels=False, mode=mode)
    return release(target, grant.lease_id, grant.token or "", timeout, all_levels=True)


def _replay_and_give_back(target: Target, call: Call, reentry: bool, timeout: float) -> Plan[None]:
    """Sends an acquire that got no answer again, with its key and no wait: a grant (or a
    ticket) the first one got is answered again, and given back. (A first request that got
    nothing runs again and may get the lock now: then that is given back.)"""
    outcome = yield call
    if not isinstance(outcome, Reply):
        return
    if outcome.status in (200, 201):
        try:
            yield from _give_back(target, Grant.parse(outcome, call.token), reentry, timeout)
        except LeaseLost:
            pass
    elif outcome.status == 202 and target.resource == LOCKS and isinstance(outcome.body, dict):
        body = outcome.body
        yield from leave(target, Ticket(str(body["ticket_id"]), str(body["token"]), body.get("position")), timeout)


def simple(call: Call, give_up_after: float) -> Plan[Any]:
    """One call (retried as :func:`request` does); its JSON, or its problem raised."""
    reply = yield from request(lambda: call, now() + give_up_after)
    if 200 <= reply.status < 300:
        return reply.body
    raise reply.problem()


def fence_check(name: str, fencing_token: int, timeout: float) -> Plan[FenceCheck]:
    body = yield from simple(
        Call(
            "POST",
            f"/v1/locks/{segment(name)}/fence/check",
            timeout=timeout,
            json={"fencing_token": int(fencing_token)},
        ),
        timeout,
    )
    return FenceCheck(
        lock=str(body["lock"]),
        fencing_token=int(body["fencing_token"]),
        current=bool(body["current"]),
        fencing_counter=int(body["fencing_counter"]),
    )


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
    always tried first (a thread or task woken late must not give up a lease it can renew)."""

    def __init__(self, ttl_ms: int, renewed_at: float) -> None:
        self.ttl = ttl_ms / 1000
        self.until = renewed_at + self.ttl
        self.next_heartbeat = renewed_at + self.ttl / 3

    def renewed(self, ttl_ms: int, sent_at: float) -> None:
        self.ttl = ttl_ms / 1000
        self.until = sent_at + self.ttl
        self.next_heartbeat = sent_at + self.ttl / 3

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
        return self.until - self.margin

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


def heartbeat_call(target: Target, lease_id: str, token: str, timeout: float) -> Call:
    return Call("POST", f"{target.lease_path(lease_id)}/heartbeat", timeout=timeout, token=token)


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
    """Server-sent events, line by line: returns (event, data) when an event is complete."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

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
        return None


def lost_event(data: str) -> dict[str, Any]:
    import json

    try:
        event = json.loads(data)
    except ValueError:
        event = {}
    return event if isinstance(event, dict) else {}


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
