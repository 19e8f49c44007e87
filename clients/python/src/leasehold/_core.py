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
  answer instead of acting twice. (A multilease's release carries none, as its route keeps
  no keys: a retry of one that went through answers 410 ``released``, taken as done.)
- A retry follows a dropped connection, a timeout, a 503 (Redis slow, instance stopping,
  too many waiters), a 504, a 408 or a 429 ``rate_limited``, after a short backoff (at
  least what ``Retry-After`` says), for as long as the call's time allows.
- An acquire's HTTP timeout is its remaining wait plus the client's ``timeout``.
"""

from __future__ import annotations

import getpass
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, TypeVar, Union

from ._errors import (
    LeaseLost,
    LockHeld,
    ProblemError,
    TicketExpired,
    TransportError,
    left_the_line,
    make_problem,
)
from ._in_line import Hear, InLine, Leader, OnInLine, hearing, tell
from ._wire import (
    ELECTIONS,
    LOCKS,
    MULTILEASES,
    SEMAPHORES,
    SIGNAL_KINDS,
    AcquireState,
    ElectionEvent,
    FenceCheck,
    Grant,
    Member,
    OnQueued,
    Queued,
    Revocation,
    Signal,
    Target,
    Ticket,
    acked,
    campaign_body,
    expiring_slack,
    lock_body,
    multilease_request,
    segment,
    semaphore_body,
)

T = TypeVar("T")

#: Where the client looks when no URL is given (as the ``leasehold`` CLI does).
DEFAULT_URL = "http://127.0.0.1:8080"
#: Seconds a request may take beyond the server-side wait it asked for, by default.
DEFAULT_TIMEOUT = 10.0
#: Pause before asking again when the server answered 409 before our wait was over (its
#: ``--max-wait-ms`` is shorter than the wait asked for).
REASK_PAUSE = 0.1
#: A wait_ms to ask for when the caller waits without limit; the server cuts it to its own
#: ``--max-wait-ms`` and we ask again.
FOREVER_WAIT_MS = 3_600_000
#: Longest pause between retries of one call (unless Retry-After asks for longer).
MAX_BACKOFF = 1.0


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
    if reply.status in (408, 502, 503, 504):
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
    hear: Hear = None,
) -> Plan[Grant]:
    """Takes a lease (or, with ``reentry_token``, one more level of that lease), waiting up
    to ``wait_s`` in all (``None``: without limit): re-asks when the server's own maximum
    wait is shorter, follows a fair lock's ticket until its turn (telling ``hear`` of each
    answer in line: ``on_queued``, or a campaign's ``on_in_line``), and retries what may be
    retried with one ``Idempotency-Key``. Raises :class:`LockHeld` (or ``NoPermits``) when the
    wait ran out, or the problem the server answered. An election's campaign is one too: its
    202 is a place in line, polled until it leads; a place lost is reported, never re-taken."""
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
            target.collection,
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
        if reply.status == 202 and target.waits_in_line:
            queue_first = False
            ticket = _ticket(reply.body)
            state.ticket = ticket
            tell(hear, reply.body)
            granted = yield from _wait_in_line(target, ticket, deadline, timeout, state, hear)
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
    hear: Hear,
) -> Plan[Optional[Grant]]:
    path = target.ticket_path(ticket.ticket_id)
    # A fair lock's ticket is polled with POST; an election's candidate with GET (its 200
    # says it leads, as a ticket's 201 does).
    method, granted = ("GET", (200, 201)) if target.resource == ELECTIONS else ("POST", (201,))
    while True:

        def build() -> Call:
            wait_ms = _wait_ms(deadline)
            return Call(
                method,
                path,
                timeout=wait_ms / 1000 + timeout,
                params={"wait_ms": wait_ms} if wait_ms else None,
                token=ticket.token,
            )

        reply = yield from request(build, max(deadline, now()) + timeout)
        if reply.status in granted:
            grant = Grant.parse(reply, ticket.token)
            state.grant = grant
            state.ticket = None
            return grant
        if reply.status == 202:
            queued = reply.body if isinstance(reply.body, dict) else {}
            ticket.position = queued.get("position", ticket.position)
            tell(hear, queued)
            if now() >= deadline:
                yield from leave(target, ticket, timeout)
                state.ticket = None
                raise left_the_line(ticket.position, queued)
            continue
        problem = reply.problem()
        if isinstance(problem, TicketExpired) and now() < deadline and target.resource == LOCKS:
            state.ticket = None
            return None
        state.ticket = None
        raise problem


def leave(target: Target, ticket: Ticket, timeout: float) -> Plan[None]:
    """Gives a place in line up. A fair lock's ticket granted meanwhile is a lease: the leave
    answers 410 then, and the lease is released. An election's candidate leaves the line, or
    resigns if its turn came meanwhile, with the same call."""
    path = target.ticket_path(ticket.ticket_id)
    reply = yield from request(lambda: Call("DELETE", path, timeout=timeout, token=ticket.token), now() + timeout)
    if reply.status == 410 and target.resource == LOCKS:
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
    # A multilease's release and a resignation keep no key: a retry of one that went through
    # answers 410 released, which is taken as done below.
    key = None if target.resource in (MULTILEASES, ELECTIONS) else new_key()
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
    elif outcome.status == 202 and target.waits_in_line and isinstance(outcome.body, dict):
        yield from leave(target, _ticket(outcome.body), timeout)


def _ticket(body: Any) -> Ticket:
    """A fair lock's ticket, or an election's candidate in line, from its 202."""
    queued = body if isinstance(body, dict) else {}
    place = queued.get("ticket_id") or queued["candidate_id"]
    return Ticket(str(place), str(queued["token"]), queued.get("position"))


def simple(call: Call, give_up_after: float, retry: bool = True) -> Plan[Any]:
    """One call (retried as :func:`request` does, unless not ``retry``: a call that could act
    twice); its JSON, or its problem raised."""
    if retry:
        reply = yield from request(lambda: call, now() + give_up_after)
    else:
        outcome = yield call
        assert outcome is not None
        if isinstance(outcome, Failure):
            raise TransportError(f"no answer from the server: {outcome.error!r}") from outcome.error
        reply = outcome
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


# The rest of the core, about keeping a held lease (renewal timing, the watch stream, reentry
# within a thread or task), is in _upkeep; the clients read all of it here (re-exported, as
# the _wire names above: pyproject.toml lets mypy see them so).
from ._upkeep import (  # noqa: E402
    HEARTBEAT_RETRY_PAUSE,
    HELD,
    WATCH_READ_TIMEOUT,
    WATCH_RETRY_PAUSE,
    Renewal,
    SSEParser,
    WatchVerdict,
    heartbeat_call,
    held_lease,
    judge_watch_problem,
    lost_event,
    pop_held,
    push_held,
    watch_loss,
    watch_path,
)
