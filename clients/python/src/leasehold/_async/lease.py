"""A held lease, kept alive and watched: :class:`AsyncLease` (``context.py`` holds one for a
``with`` block).

The source of ``_sync/lease.py``, which ``scripts/generate_sync.py`` makes from it (unasync):
edit this file, then regenerate. It runs on ``_async_runtime``; the generated twin on
``_sync_runtime`` (threads where this has tasks).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional

import httpx

from .. import _async_runtime as rt
from .. import _core as core
from .. import _signals as signals
from .._errors import LeaseLost, ProblemError, TransportError, lost, make_problem

if TYPE_CHECKING:
    from .client import AsyncClient

log = logging.getLogger("leasehold")

UNRENEWABLE = "the lease could not be renewed before it would expire; someone else may hold the lock now"
REVOKED = "an operator revoked the lease"


class AsyncLease:
    """A lease this client holds and keeps alive: it heartbeats every TTL/3 and watches the
    lease's event stream, in the background, until released or lost.

    ``lost`` is set the moment the lease is known lost (the watch stream says so, a
    heartbeat answers 410, or renewals failed until the lease was about to expire);
    ``lost_reason`` then says why. :meth:`check` raises :class:`LeaseLost` once it is set.
    ``fencing_token`` goes with every write to the resource the lock protects; a
    multilease has one per lock, in ``members``.

    What the watch stream tells before a loss comes to :meth:`on_signal`'s callbacks (a
    :class:`Signal`: ``expiring``, ``renewed``, ``degraded``, ``recovered``, ``contended``,
    ``revocation_requested``). An operator's revocation sets ``revocation`` and
    ``revocation_requested``: release before ``revocation.deadline``; otherwise the lease is
    given up as lost (reason ``revoked``) at the deadline less the loss margin."""

    def __init__(self, client: AsyncClient, target: core.Target, grant: core.Grant) -> None:
        self._client = client
        self._target = target
        self.name: str = target.name
        self.lease_id: str = grant.lease_id
        self.fencing_token: int = grant.fencing_token
        self.kind: str = "multilease" if target.resource == core.MULTILEASES else grant.kind
        self.holder: Optional[str] = grant.holder
        self.permits: Optional[int] = grant.permits
        self.reentry_count: int = grant.reentry_count
        #: A multilease's locks, each with its own lease and fencing token (else empty).
        self.members: list[core.Member] = grant.members
        #: Redis replicas that acknowledged the last grant or renewal (None when none are
        #: required); RedLock nodes that did; how long (ms) a RedLock answer could be relied on;
        #: why it stands on its Redis primary alone, if it does (``no_replica``,
        #: ``not_replicated``). A multilease's: its weakest member's.
        self.replicas_acked: Optional[int] = grant.replicas_acked
        self.nodes_acked: Optional[int] = grant.nodes_acked
        self.validity_ms: Optional[int] = grant.validity_ms
        self.degraded: Optional[str] = grant.degraded
        self.lost = rt.Event()
        self.lost_reason: Optional[str] = None
        #: An operator's request to let go (``None`` until one comes), and its event. Of a
        #: multilease's members' revocations, the one with the earliest deadline (the first
        #: told of equal ones): the one that ends it; each member shows its own (``members``).
        self.revocation: Optional[core.Revocation] = None
        self.revocation_requested = rt.Event()
        self._revoked_member: Optional[str] = None  # a multilease's: whose revocation is kept
        self._revocations_told: set[tuple[str, str]] = set()  # (lock, deadline): told once
        self._listeners: list[Callable[[core.Signal], Any]] = []
        self._last_event_id: Optional[str] = None
        #: When the watch tells ``expiring`` (ms before the end; None: the server's default).
        self._expiring_slack_ms: Optional[int] = client._expiring_slack_ms
        self._gave_up = False  # lost by our own rule (the lease may still stand: release it)
        self._watching = rt.Event()  # set once a watch stream is open (for tests)
        self._token: str = grant.token or ""
        self._loss: Optional[LeaseLost] = None
        self._mutex = rt.Mutex()
        self._renewal = core.Renewal(grant.ttl_ms, grant.sent_at)
        self._stop = rt.Stop()
        self._releasing = False
        self._ended = False
        self._holding = False
        self._workers: list[rt.Worker] = []
        self._enforcer: Optional[rt.Worker] = None  # gives a revoked lease up in time

    async def _start(self) -> None:
        if self._renewal.stale(core.now()):
            # The acquire waited: pin the expiry down with one heartbeat before work starts.
            await self._heartbeat_once(raise_errors=True)
        signals.hold(self._client._handle_sigterm)
        self._holding = True
        rt.track(self)
        label = f"{self.name}/{self.lease_id[:8]}"
        self._workers.append(rt.Worker(self._keep, f"heartbeat-{label}"))
        if self._client._watch:
            self._workers.append(rt.Worker(self._watch, f"watch-{label}"))

    async def _abort(self) -> None:
        """Gives back a lease whose start was cut short (its first heartbeat failed, or the
        caller was cancelled)."""
        call = core.release(self._target, self.lease_id, self._token, self._client._timeout, all_levels=True)
        await self._client._shielded(call, "release a lease cut short")
        self._end()

    # --- what users read ---

    @property
    def token(self) -> str:
        """The lease's bearer token (a secret: it proves the lease)."""
        return self._token

    @property
    def ttl_ms(self) -> int:
        return int(self._renewal.ttl * 1000)

    @property
    def expires_in(self) -> float:
        """Seconds the lease is surely still ours (from the last renewal sent), at least 0."""
        with self._mutex:
            return max(0.0, self._renewal.until - core.now())

    def on_signal(self, callback: Callable[[core.Signal], Any]) -> Callable[[], None]:
        """Calls ``callback(signal)`` for each :class:`Signal` the lease's watch stream tells
        from now on (and for a revocation a heartbeat's answer tells first), from the keeper's
        thread (or task): it should be quick, and must not block on the lease. Returns a
        function that removes the callback. An exception it raises is logged."""
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease has been lost; call it between steps."""
        if self.lost.is_set():
            raise self._loss_error()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._ended else "held")
        kind = type(self).__name__
        return f"<leasehold.{kind} {self.name!r} lease_id={self.lease_id} fencing_token={self.fencing_token} {state}>"

    # --- release ---

    async def release(self) -> None:
        """Releases the lease (every level, every lock of a multilease) and stops keeping it.
        Idempotent. Never raises for a lost lease (see :attr:`lost`); a release the server
        could not be reached for is logged, and the lock is then held until the TTL runs out.
        Runs to its end even when the caller is cancelled meanwhile."""
        with self._mutex:
            if self._ended or self._releasing:
                return
            self._releasing = True
        self._stop.set()
        self._stop_workers(keep_watch=True)
        # A lost multilease is released all the same: the server then gives its other locks
        # back at once (and answers 410), instead of at the end of their TTL.
        give_back = self._target.resource == core.MULTILEASES
        try:
            # A term whose heartbeat answered another term: the candidate leads that one now.
            # A lease we gave up ourselves (unrenewable, or a revocation's deadline near) may
            # still stand: give it back for the next holder.
            if self._loss is None or self._gave_up or self.lost_reason in ("unrenewable", "term_changed") or give_back:
                call = core.release(self._target, self.lease_id, self._token, self._client._timeout, all_levels=True)
                await rt.shield(self._client._drive(call))
        except LeaseLost as e:
            self._lose(e, releasing=True)
        except (ProblemError, TransportError) as e:
            log.warning("could not release lease %s of %r (held until its TTL ends): %s", self.lease_id, self.name, e)
        finally:
            self._end()

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.release()
        self._raise_if_lost(exc)

    # --- internals ---

    def _stop_workers(self, keep_watch: bool = False) -> None:
        """Ends the heartbeat loop, and the watch unless ``keep_watch``: after our own
        release the watch ends by itself (the server says ``lost``, reason ``released``),
        which keeps its connection for reuse; it is ended if it has not a few seconds later."""
        for i, worker in enumerate(self._workers):
            if keep_watch and i == 1:
                worker.cancel_later(core.WATCH_RETRY_PAUSE * 5)
            else:
                worker.cancel()
        if self._enforcer is not None:
            self._enforcer.cancel()

    def _end(self) -> None:
        with self._mutex:
            if self._ended:
                return
            self._ended = True
        self._stop.set()
        if not self._releasing:  # release() has stopped them already
            self._stop_workers()
        rt.forget(self)
        if self._holding:
            self._holding = False
            signals.unhold(self._client._handle_sigterm)

    def _finished(self) -> bool:
        return self._ended or self._releasing or self.lost.is_set()

    def _release_at_exit(self) -> None:
        """From ``atexit`` (blocking leases only: see ``_signals``)."""
        if not self._finished():
            rt.call_at_exit(self.release)

    def _loss_error(self) -> LeaseLost:
        loss = self._loss
        if loss is None:
            return lost("unknown", "the lease was lost", self.lease_id, self.name)
        return type(loss)(loss.status, loss.code, loss.detail, title=loss.title, type=loss.type, problem=loss.problem)

    def _raise_if_lost(self, exc: Optional[BaseException]) -> None:
        if not self.lost.is_set() or isinstance(exc, LeaseLost):
            return
        if exc is None or isinstance(exc, Exception):
            raise self._loss_error()

    def _lose(self, error: LeaseLost, releasing: bool = False, gave_up: bool = False) -> None:
        with self._mutex:
            if self.lost.is_set() or (self._releasing and not releasing) or self._ended:
                return
            self._loss = error
            self.lost_reason = error.reason or "lost"
            self._gave_up = gave_up
        self._stop.set()
        self.lost.set()
        self._stop_workers()
        log.warning("lease %s of %r lost: %s", self.lease_id, self.name, error.detail)

    def _renewed(self, body: dict[str, Any], sent_at: float) -> None:
        told = core.Revocation.of_heartbeat(body)
        with self._mutex:
            self._renewal.renewed(int(body.get("ttl_ms", self.ttl_ms)), sent_at, revoked=bool(told))
            self.replicas_acked, self.nodes_acked, self.validity_ms, self.degraded = core.acked(body)
        for revocation, member in told:
            # Its ttl_ms stops at the (earliest) deadline: the end is known on our own clock. A
            # multilease's are its members': each signal names that lock, as the watch's does.
            signal = core.Signal("revocation_requested", self.lease_id, member or self.name, revocation=revocation)
            self._revoked(revocation, None, signal)

    def _revoked(self, revocation: core.Revocation, ends_at: Optional[float], signal: core.Signal) -> None:
        """An operator asked for the lease back (a heartbeat's answer told it, or the watch's
        ``signal``): it is given up at ``ends_at`` (the deadline on our clock) less the margin,
        unless released first. Keeps the revocation with the earliest deadline (a multilease's
        members may each have one); tells each once, whichever told it first."""
        lock = signal.lock or self.name
        with self._mutex:
            if ends_at is not None:
                self._renewal.revoke(ends_at)
            new = (lock, revocation.deadline) not in self._revocations_told
            self._revocations_told.add((lock, revocation.deadline))
            if self.revocation is None or revocation.ends_before(self.revocation):
                self.revocation, self._revoked_member = revocation, lock
            if any(m.lock == lock and m.revocation is None for m in self.members):
                self.members = [replace(m, revocation=revocation) if m.lock == lock else m for m in self.members]
            if self._enforcer is None and not self._finished():
                self._enforcer = rt.Worker(self._enforce_revocation, f"revocation-{self.name}/{self.lease_id[:8]}")
        if new:
            self.revocation_requested.set()
            self._tell(signal)

    def _revoked_loss(self) -> LeaseLost:
        """The loss of a lease given up before its revocation's deadline, naming a
        multilease's member whose revocation ended it."""
        with self._mutex:
            revocation, member = self.revocation, self._revoked_member if self.members else None
        whose = "" if member is None else f" (the revocation of member {member!r})"
        deadline = "" if revocation is None else f" {revocation.deadline}"
        detail = f"{REVOKED}{whose} and it was not released before its deadline{deadline}, less the margin"
        return lost("revoked", detail, self.lease_id, self.name, member=member)

    def _tell(self, signal: core.Signal) -> None:
        if self._finished():
            return
        for callback in list(self._listeners):
            try:
                callback(signal)
            except Exception:
                log.exception("a signal callback of lease %s of %r failed", self.lease_id, self.name)

    def _signal(self, kind: str, data: str, event_id: Optional[str]) -> None:
        """One signal of the watch stream."""
        signal = core.Signal.parse(kind, data, event_id)
        if kind == "revocation_requested" and signal.revocation is not None:
            self._revoked(signal.revocation, core.now() + signal.revocation.seconds_left(), signal)
        else:
            self._tell(signal)

    async def _enforce_revocation(self) -> None:
        """Gives the lease up (reason ``revoked``) at the revocation's deadline less the margin,
        unless it ends first. A later, earlier bound (a heartbeat's answer) is seen in time: the
        wait is cut in steps of a quarter of the margin."""
        while True:
            with self._mutex:
                at, step = self._renewal.give_up_at, self._renewal.margin / 4
                revoked = self._renewal.revoked
            left = at - core.now()
            if left <= 0:
                if revoked:
                    self._lose(self._revoked_loss(), gave_up=True)
                return  # else the keeper gives it up (unrenewable)
            if await self._stop.wait(min(left, step)):
                return

    async def _heartbeat_once(self, raise_errors: bool = False, timeout: Optional[float] = None) -> bool:
        """One heartbeat; True when the lease goes on (renewed, or a retryable failure)."""
        if timeout is None:
            with self._mutex:
                timeout = self._renewal.request_timeout
        term = self.fencing_token if self._target.resource == core.ELECTIONS else None
        outcome = await self._client._send(
            core.heartbeat_call(self._target, self.lease_id, self._token, timeout, term=term)
        )
        if isinstance(outcome, core.Reply) and outcome.status == 200:
            body = outcome.body if isinstance(outcome.body, dict) else {}
            answered = body.get("term")
            if term is not None and isinstance(answered, int) and answered != term:
                # Never adopt a new term silently: the held one is over (release resigns the new).
                error = lost(
                    "term_changed",
                    f"the heartbeat of term {term} answered term {answered}",
                    self.lease_id,
                    self.name,
                )
                if raise_errors:
                    raise error
                self._lose(error)
                return False
            self._renewed(body, outcome.sent_at)
            return True
        if isinstance(outcome, core.Reply):
            problem = outcome.problem()
            if isinstance(problem, LeaseLost) or problem.code == "lease_not_found":
                error = (
                    problem
                    if isinstance(problem, LeaseLost)
                    else lost("expired", problem.detail, self.lease_id, self.name)
                )
                if raise_errors:
                    raise error
                self._lose(error)
                return False
            if raise_errors:
                raise problem
        elif raise_errors:
            raise TransportError(f"no answer to the heartbeat: {outcome.error!r}") from outcome.error
        with self._mutex:
            self._renewal.failed(core.now())
        return True

    async def _keep(self) -> None:
        """Heartbeats every TTL/3; gives the lease up when renewals fail until its margin."""
        try:
            while True:
                with self._mutex:
                    wake = min(self._renewal.next_heartbeat, self._renewal.give_up_at)
                if await self._stop.wait(wake - core.now()):
                    return
                at = core.now()
                with self._mutex:
                    due = at >= self._renewal.next_heartbeat
                    timeout = self._renewal.heartbeat_timeout(at)
                if due and timeout is not None and not await self._heartbeat_once(timeout=timeout):
                    return  # lost (410)
                with self._mutex:
                    give_up = core.now() >= self._renewal.give_up_at
                if give_up:
                    with self._mutex:
                        revoked = self._renewal.revoked
                    if revoked:
                        self._lose(self._revoked_loss(), gave_up=True)
                    else:
                        self._lose(lost("unrenewable", UNRENEWABLE, self.lease_id, self.name), gave_up=True)
                    return
        except rt.Cancelled:
            raise
        except Exception:  # never die silently: the lease is then lost to us
            log.exception("leasehold heartbeat loop failed")
            self._lose(lost("unrenewable", "the heartbeat loop failed", self.lease_id, self.name))

    async def _watch(self) -> None:
        """Follows the watch stream: tells a loss at once; opens it again when it breaks."""
        client = self._client
        path = core.watch_path(self._target, self.lease_id)
        timeout = httpx.Timeout(client._timeout, read=core.WATCH_READ_TIMEOUT)
        slack = self._expiring_slack_ms
        params = None if slack is None else {"expiring_slack_ms": slack}  # on every reopening too
        while not self._stop.is_set():
            pause = core.WATCH_RETRY_PAUSE
            headers = {"authorization": f"Bearer {self._token}", "accept": "text/event-stream"}
            if self._last_event_id is not None:
                # The server goes on counting, and tells again what still stands.
                headers["last-event-id"] = self._last_event_id
            try:
                async with client._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code == 200:
                        self._watching.set()
                        parser = core.SSEParser()
                        lines = response.aiter_lines()
                        async for line in lines:
                            event = parser.feed(line)
                            if event is None:
                                continue
                            if parser.last_id is not None:
                                self._last_event_id = parser.last_id
                            if event[0] in core.SIGNAL_KINDS:
                                self._signal(event[0], event[1], parser.last_id)
                                continue
                            if event[0] != "lost":
                                continue
                            self._lose(core.watch_loss(event[1], self._target, self.lease_id))
                            async for _ in lines:  # the stream ends here: read its end, to reuse the connection
                                pass
                            return
                    else:
                        await response.aread()
                        problem = make_problem(
                            response.status_code, core.parse_body(response.content), response.headers.get("retry-after")
                        )
                        verdict, pause = core.judge_watch_problem(problem)
                        if verdict == core.WatchVerdict.LOST:
                            self._lose(
                                problem
                                if isinstance(problem, LeaseLost)
                                else lost("expired", problem.detail, self.lease_id, self.name)
                            )
                            return
                        if verdict == core.WatchVerdict.STOP:
                            log.info("not watching lease %s (%s); heartbeats carry on", self.lease_id, problem)
                            return
            except httpx.TransportError:
                pass  # broken or silent: open it again
            except rt.Cancelled:
                raise
            except Exception:
                log.exception("leasehold watch loop failed; heartbeats carry on")
                return
            if await self._stop.wait(pause):
                return

    async def _reenter(self, body: dict[str, Any], wait_ms: Optional[int]) -> None:
        try:
            grant = await self._client._take(self._target, body, wait_ms, reentry_of=self)
        except LeaseLost as e:
            self._lose(e)
            raise
        with self._mutex:
            self.reentry_count = grant.reentry_count
            self._renewal.renewed(grant.ttl_ms, grant.sent_at)

    async def _release_level(self, mode: Optional[str]) -> None:
        if self._finished():
            return
        call = core.release(
            self._target, self.lease_id, self._token, self._client._timeout, all_levels=False, mode=mode
        )
        try:
            body = await rt.shield(self._client._drive(call))
        except LeaseLost as e:
            self._lose(e)
            return
        except (ProblemError, TransportError) as e:
            log.warning("could not release a level of lease %s of %r: %s", self.lease_id, self.name, e)
            return
        if body is None or body.get("released"):
            self._end()
        else:
            with self._mutex:
                self.reentry_count = int(body.get("reentry_count", self.reentry_count - 1))
