"""The client: :class:`AsyncClient`, a Leasehold server to take leases from.

The source of ``_sync/client.py``, which ``scripts/generate_sync.py`` makes from it (unasync):
edit this file, then regenerate. The protocol itself (retries, waits, fair tickets, what to
give back) is in ``_core``, free of I/O; this drives its plans with HTTP calls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

import httpx

from .. import _async_runtime as rt
from .. import _core as core
from .._version import __version__
from . import election
from .context import AsyncLeaseContext
from .election import AsyncCampaign, AsyncTerm
from .lease import AsyncLease

log = logging.getLogger("leasehold")
log.addHandler(logging.NullHandler())

T = TypeVar("T")

#: One lock of a multilease: its name (a reentrant lock), or ``(name, kind)``.
MultiLock = Union[str, "tuple[str, str]"]


def _http_limits() -> httpx.Limits:
    # Unbounded connections: every lease keeps one open for its watch. Idle connections stay
    # 50 s, under the server's 60 s idle timeout, so heartbeats (every TTL/3) reuse them.
    return httpx.Limits(max_connections=None, max_keepalive_connections=32, keepalive_expiry=50.0)


class AsyncClient:
    """A Leasehold server. Share one (per process, or per event loop for the asyncio one).

    ``url`` defaults to ``$LEASEHOLD_SERVER``, then ``http://127.0.0.1:8080``; ``api_key`` to
    ``$LEASEHOLD_API_KEY`` (sent in ``Leasehold-Key``; pass ``""`` for none). ``timeout`` is
    how long (seconds) a request may take beyond the server-side wait it asks for, and how
    long a call keeps retrying a 503 or a dropped connection. ``watch=False`` leaves loss
    detection to heartbeats alone (for proxies that cut server-sent events).
    ``handle_sigterm`` (default on) makes SIGTERM unwind and release while leases are held.
    ``http2=True`` needs the ``leasehold[http2]`` extra. ``transport`` (an httpx transport)
    is passed on to httpx, as are ``verify`` and ``headers``. ``expiring_slack_ms``: when the
    leases' watches tell ``expiring`` (that long before the end with no renewal since; default
    a third of the TTL, at most half of it); ``lock()`` may set its own."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = core.DEFAULT_TIMEOUT,
        watch: bool = True,
        handle_sigterm: bool = True,
        http2: bool = False,
        verify: Any = True,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        expiring_slack_ms: Optional[int] = None,
    ) -> None:
        self.url = core.resolve_url(url)
        self._expiring_slack_ms = core.expiring_slack(expiring_slack_ms)
        self._timeout = float(timeout)
        self._watch = watch
        self._handle_sigterm = handle_sigterm
        all_headers = {"user-agent": f"leasehold-python/{__version__}"}
        api_key = core.resolve_api_key(api_key)
        if api_key:
            all_headers["leasehold-key"] = api_key
        all_headers.update(headers or {})
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=all_headers,
            http2=http2,
            verify=verify,
            limits=_http_limits(),
            timeout=self._timeout,
            transport=transport,
        )

    # --- plumbing ---

    async def aclose(self) -> None:
        """Closes the connections. Leases still held keep their lock until their TTL."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"leasehold.{type(self).__name__}({self.url!r})"

    async def _send(self, call: core.Call) -> core.Outcome:
        sent = core.now()
        try:
            response = await self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                headers=call.headers(),
                timeout=httpx.Timeout(call.timeout, connect=min(call.timeout, self._timeout)),
            )
        except httpx.TransportError as e:
            return core.Failure(e, sent)
        return core.Reply(response.status_code, response.headers, core.parse_body(response.content), sent)

    async def _drive(self, plan: core.Plan[T]) -> T:
        outcome: Optional[core.Outcome] = None
        while True:
            try:
                step = plan.send(outcome)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if isinstance(step, core.Sleep):
                await rt.sleep(step.seconds)
                outcome = None
            else:
                outcome = await self._send(step)

    async def _shielded(self, plan: core.Plan[Any], what: str) -> None:
        """Runs a plan that gives something back, to its end even if the caller is cancelled
        meanwhile (it then goes on in the background)."""
        try:
            await rt.shield(self._drive(plan))
        except rt.Cancelled:
            raise
        except Exception as e:  # the lease then ends with its TTL
            log.warning("could not %s: %s", what, e)

    async def _take(
        self,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        reentry_of: Optional[AsyncLease] = None,
        hear: core.Hear = None,
    ) -> core.Grant:
        """Runs an acquire (or reentry) plan; cut short, it gives back what it got."""
        state = core.AcquireState()
        wait_s = None if wait_ms is None else wait_ms / 1000
        token = reentry_of._token if reentry_of is not None else None
        try:
            return await self._drive(core.acquire(target, body, wait_s, self._timeout, state, token, hear))
        except BaseException:
            cleanup = core.abandon(target, state, self._timeout)
            if cleanup is not None:
                try:
                    await self._shielded(cleanup, "give back an acquire cut short")
                except rt.Cancelled:
                    pass  # goes on in the background; the first exception is what counts
            raise

    async def _new_lease(
        self,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        *,
        hear: core.Hear = None,
        expiring_slack_ms: Optional[int] = None,
    ) -> AsyncLease:
        grant = await self._take(target, body, wait_ms, hear=hear)
        lease = (AsyncTerm if target.resource == core.ELECTIONS else AsyncLease)(self, target, grant)
        if expiring_slack_ms is not None:
            lease._expiring_slack_ms = expiring_slack_ms
        try:
            await lease._start()
        except BaseException:
            await lease._abort()
            raise
        return lease

    # --- locks, semaphores, multileases ---

    async def acquire(
        self,
        name: str,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        kind: str = "reentrant",
        holder: Optional[str] = None,
        *,
        policy: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        lock_delay_ms: Optional[int] = None,
        on_queued: core.OnQueued = None,
        expiring_slack_ms: Optional[int] = None,
    ) -> AsyncLease:
        """Takes a new lease on the lock ``name`` and keeps it alive until ``release()`` (or
        the end of a ``with lease:`` block). Prefer :meth:`lock`, which releases by itself
        and re-enters in nested blocks.

        ``wait_ms``: how long to wait for the lock in all (``None``: without limit; ``0``: not
        at all). ``kind``: ``reentrant``, ``exclusive``, ``fair``, ``read``, ``write`` or
        ``redlock``. ``policy``: for read/write locks, ``readers_first`` (default) or
        ``fifo``. ``holder``: a label for people (default ``user@host (pid N)``).
        ``lock_delay_ms``: should the lease end other than by a release, the lock refuses new
        leases that long (:class:`LockDelay`). ``on_queued``: while a fair lock waits in line,
        called with a :class:`Queued` (``position``, ``estimated_wait_ms``, ``held_by``,
        ``held_for_ms``) for each answer in line, from the waiting thread or task (keep it
        quick; what it raises is logged, and the wait goes on). ``expiring_slack_ms``: this
        lease's watch tells ``expiring`` that long before its end with no renewal since
        (default: the client's, else a third of the TTL).

        Raises :class:`LockHeld` when the wait runs out, and the typed problem otherwise."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata, lock_delay_ms)
        slack = core.expiring_slack(expiring_slack_ms)
        target = core.Target(core.LOCKS, name)
        hear = core.hearing(on_queued, core.Queued.parse, "on_queued")
        return await self._new_lease(target, body, wait_ms, hear=hear, expiring_slack_ms=slack)

    def lock(
        self,
        name: str,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        kind: str = "reentrant",
        holder: Optional[str] = None,
        *,
        policy: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        lock_delay_ms: Optional[int] = None,
        on_queued: core.OnQueued = None,
        expiring_slack_ms: Optional[int] = None,
    ) -> AsyncLeaseContext:
        """``with client.lock(name) as lease:`` holds the lock for the block: the lease is
        renewed every TTL/3 and watched for loss (``lease.lost`` is set the moment it is
        lost), and released when the block ends, however it ends. A block that ends with its
        lease lost raises :class:`LeaseLost`. Not acquired within ``wait_ms``:
        :class:`LockHeld`.

        A nested ``lock()`` of the same name by the same thread or task, on this client,
        re-enters the lease (one more level, released when the inner block ends; the same
        lease and fencing token), as a Redisson ``RLock`` does; for ``kind="exclusive"`` the
        server refuses that (:class:`NotReentrant`), and for read/write it is a downgrade
        (write, then read) or a refused upgrade (:class:`UpgradeRefused`). Arguments as for
        :meth:`acquire`."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata, lock_delay_ms)
        reentry = core.lock_body(None, None, kind, policy, None, None)  # keeps the lease's TTL and delay
        slack = core.expiring_slack(expiring_slack_ms)
        target = core.Target(core.LOCKS, name)
        hear = core.hearing(on_queued, core.Queued.parse, "on_queued")
        return AsyncLeaseContext(self, target, body, wait_ms, reentry, hear=hear, expiring_slack_ms=slack)

    async def acquire_semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        *,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        holder: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> AsyncLease:
        """Takes ``permits`` of the ``limit`` permits of the semaphore ``name`` (every party
        must name the same ``limit``), kept alive until released. Raises :class:`NoPermits`
        (a :class:`LockHeld`) when too few are free when the wait runs out."""
        body = core.semaphore_body(limit, permits, ttl_ms, holder or core.default_holder(), metadata)
        return await self._new_lease(core.Target(core.SEMAPHORES, name), body, wait_ms)

    def semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        *,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        holder: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> AsyncLeaseContext:
        """``with client.semaphore(name, limit, permits) as lease:``: as :meth:`lock`, for
        permits of a semaphore (a nested block takes more permits; it does not re-enter)."""
        body = core.semaphore_body(limit, permits, ttl_ms, holder or core.default_holder(), metadata)
        return AsyncLeaseContext(self, core.Target(core.SEMAPHORES, name), body, wait_ms, None)

    async def acquire_multilease(
        self,
        locks: Sequence[MultiLock],
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        holder: Optional[str] = None,
        *,
        metadata: Optional[Mapping[str, Any]] = None,
        lock_delay_ms: Optional[int] = None,
    ) -> AsyncLease:
        """Takes every lock of ``locks`` as one lease, all or nothing, kept alive until
        released. Prefer :meth:`multilease`. Arguments as for :meth:`multilease`."""
        target, body = core.multilease_request(locks, ttl_ms, holder or core.default_holder(), metadata, lock_delay_ms)
        return await self._new_lease(target, body, wait_ms)

    def multilease(
        self,
        locks: Sequence[MultiLock],
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        holder: Optional[str] = None,
        *,
        metadata: Optional[Mapping[str, Any]] = None,
        lock_delay_ms: Optional[int] = None,
    ) -> AsyncLeaseContext:
        """``with client.multilease(["orders", ("stock", "write")]) as lease:`` holds every
        lock as one lease for the block, all or nothing (a name is a reentrant lock; ``(name,
        kind)`` picks the kind). One heartbeat renews them all, and the loss of any lock is the
        loss of the whole (``lease.lost``; :class:`LeaseLost` with its ``member``). Each lock
        has its own fencing token: ``lease.members``. Not all free within ``wait_ms``:
        :class:`LockHeld` whose ``members`` names each lock refused; nothing is held then.
        ``lock_delay_ms`` applies to every lock."""
        target, body = core.multilease_request(locks, ttl_ms, holder or core.default_holder(), metadata, lock_delay_ms)
        return AsyncLeaseContext(self, target, body, wait_ms, None)

    # --- elections ---

    def campaign(
        self,
        name: str,
        value: str,
        *,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = None,
        holder: Optional[str] = None,
        lock_delay_ms: Optional[int] = None,
        on_in_line: core.OnInLine = None,
    ) -> AsyncCampaign:
        """``with client.campaign("scheduler", value=addr) as term:`` runs the block while
        this client leads the election ``name``, publishing ``value`` to observers. Entering
        waits in line (first come, first served; the place is kept by polling) until this
        candidate leads, for ``wait_ms`` at most (``None``: without limit; then
        :class:`LockHeld`, and the line is left). In the block, the term is heartbeat every
        TTL/3 and watched: ``term.number`` is the term (a fencing token), ``term.lost`` is set
        the moment the term is lost, and the block then ends in :class:`LeaseLost`; a lost
        term is never campaigned for again behind the caller's back. The block's end resigns
        (the next candidate leads at once), however it ends. ``lock_delay_ms``: should the
        term end other than by a resignation, nobody leads for that long. ``on_in_line``: while
        the candidate waits in line, called with an :class:`InLine` (``position``, ``leader``,
        ``estimated_wait_ms``) for each answer in line, never after it leads, from the waiting
        thread or task (keep it quick; what it raises is logged, and the wait goes on)."""
        body = core.campaign_body(value, ttl_ms, holder or core.default_holder(), lock_delay_ms)
        hear = core.hearing(on_in_line, core.InLine.parse, "on_in_line")
        return AsyncCampaign(self, core.Target(core.ELECTIONS, name), body, wait_ms, None, hear=hear)

    def observe(self, name: str, *, last_event_id: Optional[str] = None) -> AsyncIterator[core.ElectionEvent]:
        """``for event in client.observe("scheduler"):`` the election's state now, then every
        change, in order: :class:`ElectionEvent` ``leader`` (a new term or a new value) and
        ``vacant`` (nobody leads). Never ends by itself: a dropped connection is opened again
        with ``Last-Event-ID`` (the last event's ``id``, or ``last_event_id`` to start
        from), so no term is skipped; ``resync`` says the server's log no longer reached back
        that far. Stop iterating (close the iterator) to close the stream."""
        return election.observe(self, name, last_event_id)

    async def leader(self, name: str) -> dict[str, Any]:
        """``GET /v1/elections/{name}``: ``leader`` (``candidate_id``, ``term``, ``value``,
        ``holder``, ``since``, ``expires_at``; ``None`` when nobody leads), ``term`` (the last
        handed out) and ``candidates`` (the first in line)."""
        return await self._get(f"/v1/elections/{core.segment(name)}")

    async def check_term(self, name: str, term: int) -> dict[str, Any]:
        """Whether ``term`` is the election's current leader's (``current``), and the last term
        handed out (``last_term``); stale as soon as it is answered, as a fence check is."""
        path = f"/v1/elections/{core.segment(name)}/fence/check"
        call = core.Call("POST", path, timeout=self._timeout, json={"term": int(term)})
        body: dict[str, Any] = await self._drive(core.simple(call, self._timeout))
        return body

    async def end_term(self, name: str, reason: Optional[str] = None) -> dict[str, Any]:
        """Admin: ends the election's current term (its leader is told it lost it; the next
        candidate leads with a higher term). Never retried, as :meth:`force_release`."""
        params = {"reason": reason} if reason else None
        path = f"/v1/admin/elections/{core.segment(name)}"
        call = core.Call("DELETE", path, timeout=self._timeout, params=params)
        return await self._drive(core.simple(call, self._timeout, retry=False))

    # --- reads and admin ---

    async def check_fence(self, name: str, fencing_token: int) -> core.FenceCheck:
        """Asks whether a lease holding the lock ``name`` right now carries
        ``fencing_token`` (what a resource that cannot store tokens asks before a write)."""
        return await self._drive(core.fence_check(name, fencing_token, self._timeout))

    async def inspect_lock(self, name: str) -> dict[str, Any]:
        """``GET /v1/locks/{name}``: holders, queue, waiters, fencing counter (JSON). A
        multilease member's holder has ``multilease``: its locks, and ``hidden_locks`` (those
        the caller's key may not see, counted); ``kind`` is ``redlock`` for a RedLock lock."""
        return await self._get(f"/v1/locks/{core.segment(name)}")

    async def inspect_semaphore(self, name: str) -> dict[str, Any]:
        """``GET /v1/semaphores/{name}``: limit, used, available, holders (JSON)."""
        return await self._get(f"/v1/semaphores/{core.segment(name)}")

    async def inspect_lease(self, name: str, lease_id: str, *, semaphore: bool = False) -> dict[str, Any]:
        """``GET`` one lease: its ``state`` (held, released, expired, force_released), ..."""
        resource = core.SEMAPHORES if semaphore else core.LOCKS
        return await self._get(core.Target(resource, name).lease_path(lease_id))

    async def inspect_multilease(self, lease_id: str) -> dict[str, Any]:
        """``GET /v1/multileases/{id}``: its locks, ``state``, and ``lost_member`` once lost."""
        return await self._get(core.Target(core.MULTILEASES, "").lease_path(lease_id))

    async def list_locks(
        self, prefix: str = "", *, cursor: Optional[str] = None, limit: Optional[int] = None
    ) -> dict[str, Any]:
        """``GET /v1/locks``: a page of the live locks and semaphores whose names start with
        ``prefix`` (``locks``: name, kind, holders, ...), and ``next_cursor`` to pass as
        ``cursor`` for the next page (``None`` after the last). ``limit``: about how many
        names a page holds (the server's default is 100)."""
        params: dict[str, Any] = {"prefix": prefix} if prefix else {}
        if cursor is not None:
            params["cursor"] = cursor
        if limit is not None:
            params["limit"] = int(limit)
        call = core.Call("GET", "/v1/locks", timeout=self._timeout, params=params or None)
        body: dict[str, Any] = await self._drive(core.simple(call, self._timeout))
        return body

    async def force_release(self, name: str, reason: Optional[str] = None) -> dict[str, Any]:
        """Admin: frees the lock ``name`` from every holder (``removed``), or, when nobody
        holds it, lifts its lock-delay (``delay_lifted``); needs the admin token or an admin
        key as ``api_key``. Its holders are told their lease is lost. Never retried: a retry
        could remove the next holder."""
        params = {"reason": reason} if reason else None
        call = core.Call("DELETE", f"/v1/admin/locks/{core.segment(name)}", timeout=self._timeout, params=params)
        return await self._drive(core.simple(call, self._timeout, retry=False))

    async def revoke(
        self,
        name: str,
        grace_ms: int,
        reason: Optional[str] = None,
        lease_id: Optional[str] = None,
    ) -> dict[str, Any]:
        """Admin: asks the holders of the lock ``name`` (or only the lease ``lease_id``) to let
        go within ``grace_ms`` (at most an hour): each is told (``revocation_requested`` on its
        watch, ``lease.revocation``), its heartbeats extend it no further than the deadline,
        and a lease not released by then is evicted (its holder loses it, reason ``revoked``).
        Returns ``lock`` and ``leases`` (``lease_id``, ``holder``, ``fencing_token``,
        ``revocation``, and ``again``: true for a lease asked already, whose first deadline
        stands). Raises :class:`NotFound` (``lock_not_found`` when nobody holds the name,
        ``lease_not_found``), :class:`InvalidRequest`. Needs the admin token or an admin key as
        ``api_key``. Never retried, as :meth:`force_release`."""
        body: dict[str, Any] = {"grace_ms": int(grace_ms)}
        if reason is not None:
            body["reason"] = reason
        if lease_id is not None:
            body["lease_id"] = lease_id
        path = f"/v1/admin/locks/{core.segment(name)}/revoke"
        call = core.Call("POST", path, timeout=self._timeout, json=body)
        return await self._drive(core.simple(call, self._timeout, retry=False))

    async def _get(self, path: str) -> dict[str, Any]:
        call = core.Call("GET", path, timeout=self._timeout)
        body: dict[str, Any] = await self._drive(core.simple(call, self._timeout))
        return body
