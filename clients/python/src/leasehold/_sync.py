"""The synchronous client: :class:`Client`, :class:`Lease`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Optional, TypeVar

import httpx

from . import _core as core
from . import _signals as signals
from ._errors import LeaseholdError, LeaseLost, ProblemError, TransportError, lost, make_problem
from ._version import __version__

log = logging.getLogger("leasehold")
log.addHandler(logging.NullHandler())

UNRENEWABLE = "the lease could not be renewed before it would expire; someone else may hold the lock now"

T = TypeVar("T")


def _http_limits() -> httpx.Limits:
    # Unbounded connections: every lease keeps one open for its watch. Idle connections stay
    # 50 s, under the server's 60 s idle timeout, so heartbeats (every TTL/3) reuse them.
    return httpx.Limits(max_connections=None, max_keepalive_connections=32, keepalive_expiry=50.0)


class Client:
    """A Leasehold server, for blocking code (threads). Thread-safe; share one per process.

    ``url`` defaults to ``$LEASEHOLD_SERVER``, then ``http://127.0.0.1:8080``; ``api_key`` to
    ``$LEASEHOLD_API_KEY`` (sent in ``Leasehold-Key``; pass ``""`` for none). ``timeout`` is
    how long (seconds) a request may take beyond the server-side wait it asks for, and how
    long a call keeps retrying a 503 or a dropped connection. ``watch=False`` leaves loss
    detection to heartbeats alone (for proxies that cut server-sent events).
    ``handle_sigterm`` (default on) makes SIGTERM unwind and release while leases are held.
    ``http2=True`` needs the ``leasehold[http2]`` extra. ``transport`` (an httpx transport)
    is passed on to httpx, as are ``verify`` and ``headers``."""

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
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self.url = core.resolve_url(url)
        self._timeout = float(timeout)
        self._watch = watch
        self._handle_sigterm = handle_sigterm
        all_headers = {"user-agent": f"leasehold-python/{__version__}"}
        api_key = core.resolve_api_key(api_key)
        if api_key:
            all_headers["leasehold-key"] = api_key
        all_headers.update(headers or {})
        self._http = httpx.Client(
            base_url=self.url,
            headers=all_headers,
            http2=http2,
            verify=verify,
            limits=_http_limits(),
            timeout=self._timeout,
            transport=transport,
        )

    # --- plumbing ---

    def close(self) -> None:
        """Closes the connections. Leases still held keep their lock until their TTL."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"leasehold.Client({self.url!r})"

    def _send(self, call: core.Call) -> core.Outcome:
        sent = core.now()
        try:
            response = self._http.request(
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

    def _drive(self, plan: core.Plan[T]) -> T:
        outcome: Optional[core.Outcome] = None
        while True:
            try:
                step = plan.send(outcome)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if isinstance(step, core.Sleep):
                time.sleep(step.seconds)
                outcome = None
            else:
                outcome = self._send(step)

    def _take(
        self,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        reentry_of: Optional[Lease] = None,
    ) -> core.Grant:
        """Runs an acquire (or reentry) plan; cut short, it gives back what it got."""
        state = core.AcquireState()
        wait_s = None if wait_ms is None else wait_ms / 1000
        token = reentry_of._token if reentry_of is not None else None
        try:
            return self._drive(core.acquire(target, body, wait_s, self._timeout, state, token))
        except BaseException:
            cleanup = core.abandon(target, state, self._timeout)
            if cleanup is not None:
                try:
                    self._drive(cleanup)
                except Exception as e:  # the lease then ends with its TTL
                    log.warning("could not give back an acquire cut short: %s", e)
            raise

    def _new_lease(self, target: core.Target, body: dict[str, Any], wait_ms: Optional[int]) -> Lease:
        grant = self._take(target, body, wait_ms)
        try:
            return Lease(self, target, grant)
        except BaseException:
            try:
                self._drive(core.release(target, grant.lease_id, grant.token or "", self._timeout, all_levels=True))
            except Exception:
                pass
            raise

    # --- locks and semaphores ---

    def acquire(
        self,
        name: str,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        kind: str = "reentrant",
        holder: Optional[str] = None,
        *,
        policy: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> Lease:
        """Takes a new lease on the lock ``name`` and keeps it alive until
        :meth:`Lease.release` (or the end of a ``with lease:`` block). Prefer :meth:`lock`,
        which releases by itself and re-enters in nested blocks.

        ``wait_ms``: how long to wait for the lock in all (``None``: without limit; ``0``: not
        at all). ``kind``: ``reentrant``, ``exclusive``, ``fair``, ``read`` or ``write``.
        ``policy``: for read/write locks, ``readers_first`` (default) or ``fifo``.
        ``holder``: a label for people (default ``user@host (pid N)``).

        Raises :class:`LockHeld` when the wait runs out, and the typed problem otherwise."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata)
        return self._new_lease(core.Target(core.LOCKS, name), body, wait_ms)

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
    ) -> LeaseContext:
        """``with client.lock(name) as lease:`` holds the lock for the block: the lease is
        renewed every TTL/3 and watched for loss (``lease.lost`` is set the moment it is
        lost), and released when the block ends, however it ends. A block that ends with its
        lease lost raises :class:`LeaseLost`. Not acquired within ``wait_ms``:
        :class:`LockHeld`.

        A nested ``lock()`` of the same name by the same thread, on this client, re-enters
        the lease (one more level, released when the inner block ends; the same lease and
        fencing token), as a Redisson ``RLock`` does; for ``kind="exclusive"`` the server
        refuses that (:class:`NotReentrant`), and for read/write it is a downgrade (write,
        then read) or a refused upgrade (:class:`UpgradeRefused`). Arguments as for
        :meth:`acquire`."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata)
        reentry = core.lock_body(None, None, kind, policy, None)  # keeps the lease's TTL
        target = core.Target(core.LOCKS, name)
        return LeaseContext(self, target, body, wait_ms, reentry)

    def acquire_semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        *,
        ttl_ms: Optional[int] = 30000,
        wait_ms: Optional[int] = 30000,
        holder: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> Lease:
        """Takes ``permits`` of the ``limit`` permits of the semaphore ``name`` (every party
        must name the same ``limit``), kept alive until released. Raises :class:`NoPermits`
        (a :class:`LockHeld`) when too few are free when the wait runs out."""
        body = core.semaphore_body(limit, permits, ttl_ms, holder or core.default_holder(), metadata)
        return self._new_lease(core.Target(core.SEMAPHORES, name), body, wait_ms)

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
    ) -> LeaseContext:
        """``with client.semaphore(name, limit, permits) as lease:``: as :meth:`lock`, for
        permits of a semaphore (a nested block takes more permits; it does not re-enter)."""
        body = core.semaphore_body(limit, permits, ttl_ms, holder or core.default_holder(), metadata)
        return LeaseContext(self, core.Target(core.SEMAPHORES, name), body, wait_ms, None)

    # Multileases (several locks in one lease) will get their own resource in core.Target
    # and their own context here once the server has them.

    # --- reads and admin ---

    def check_fence(self, name: str, fencing_token: int) -> core.FenceCheck:
        """Asks whether a lease holding the lock ``name`` right now carries
        ``fencing_token`` (what a resource that cannot store tokens asks before a write)."""
        return self._drive(core.fence_check(name, fencing_token, self._timeout))

    def inspect_lock(self, name: str) -> dict[str, Any]:
        """``GET /v1/locks/{name}``: holders, queue, waiters, fencing counter (JSON)."""
        return self._get(f"/v1/locks/{core.segment(name)}")

    def inspect_semaphore(self, name: str) -> dict[str, Any]:
        """``GET /v1/semaphores/{name}``: limit, used, available, holders (JSON)."""
        return self._get(f"/v1/semaphores/{core.segment(name)}")

    def inspect_lease(self, name: str, lease_id: str, *, semaphore: bool = False) -> dict[str, Any]:
        """``GET`` one lease: its ``state`` (held, released, expired, force_released), ..."""
        resource = core.SEMAPHORES if semaphore else core.LOCKS
        return self._get(core.Target(resource, name).lease_path(lease_id))

    def force_release(self, name: str, reason: Optional[str] = None) -> dict[str, Any]:
        """Admin: frees the lock ``name`` from every holder (needs the admin token or an admin
        key as ``api_key``). Its holders are told their lease is lost."""
        params = {"reason": reason} if reason else None
        call = core.Call("DELETE", f"/v1/admin/locks/{core.segment(name)}", timeout=self._timeout, params=params)
        return self._drive(core.simple(call, self._timeout))

    def _get(self, path: str) -> dict[str, Any]:
        call = core.Call("GET", path, timeout=self._timeout)
        body: dict[str, Any] = self._drive(core.simple(call, self._timeout))
        return body


class Lease:
    """A lease this client holds and keeps alive: it heartbeats every TTL/3 and watches the
    lease's event stream, in two daemon threads, until released or lost.

    ``lost`` is a :class:`threading.Event`, set the moment the lease is known lost (the
    watch stream says so, a heartbeat answers 410, or renewals failed until the lease was
    about to expire); ``lost_reason`` then says why. :meth:`check` raises
    :class:`LeaseLost` once it is set. ``fencing_token`` goes with every write to the
    resource the lock protects."""

    def __init__(self, client: Client, target: core.Target, grant: core.Grant) -> None:
        self._client = client
        self._target = target
        self.name: str = target.name
        self.lease_id: str = grant.lease_id
        self.fencing_token: int = grant.fencing_token
        self.kind: str = grant.kind
        self.holder: Optional[str] = grant.holder
        self.permits: Optional[int] = grant.permits
        self.reentry_count: int = grant.reentry_count
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._watching = threading.Event()  # set once a watch stream is open (for tests)
        self._token: str = grant.token or ""
        self._loss: Optional[LeaseLost] = None
        self._mutex = threading.Lock()
        self._renewal = core.Renewal(grant.ttl_ms, grant.sent_at)
        self._stop = threading.Event()
        self._releasing = False
        self._ended = False
        if self._renewal.stale(core.now()):
            # The acquire waited: pin the expiry down with one heartbeat before work starts.
            self._heartbeat_once(raise_errors=True)
        signals.hold(client._handle_sigterm)
        signals.track(self)
        label = f"{target.name}/{self.lease_id[:8]}"
        self._threads = [threading.Thread(target=self._keep, name=f"leasehold-heartbeat-{label}", daemon=True)]
        if client._watch:
            self._threads.append(threading.Thread(target=self._watch, name=f"leasehold-watch-{label}", daemon=True))
        for thread in self._threads:
            thread.start()

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

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease has been lost; call it between steps."""
        if self.lost.is_set():
            raise self._loss_error()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._ended else "held")
        return f"<leasehold.Lease {self.name!r} lease_id={self.lease_id} fencing_token={self.fencing_token} {state}>"

    # --- release ---

    def release(self) -> None:
        """Releases the lease (every level) and stops keeping it. Idempotent. Never raises
        for a lost lease (see :attr:`lost`); a release the server could not be reached for
        is logged, and the lock is then held until the TTL runs out."""
        with self._mutex:
            if self._ended or self._releasing:
                return
            self._releasing = True
        self._stop.set()
        try:
            if self._loss is None or self.lost_reason == "unrenewable":
                self._client._drive(
                    core.release(self._target, self.lease_id, self._token, self._client._timeout, all_levels=True)
                )
        except LeaseLost as e:
            self._lose(e, releasing=True)
        except (ProblemError, TransportError) as e:
            log.warning("could not release lease %s of %r (held until its TTL ends): %s", self.lease_id, self.name, e)
        finally:
            self._end()

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()
        self._raise_if_lost(exc)

    # --- internals ---

    def _end(self) -> None:
        with self._mutex:
            self._ended = True
        self._stop.set()
        signals.forget(self)
        signals.unhold(self._client._handle_sigterm)

    def _finished(self) -> bool:
        return self._ended or self._releasing or self.lost.is_set()

    def _release_at_exit(self) -> None:
        if not self._finished():
            self.release()

    def _loss_error(self) -> LeaseLost:
        loss = self._loss
        if loss is None:
            return lost("unknown", "the lease was lost", self.lease_id, self.name)
        return type(loss)(loss.status, loss.code, loss.detail, title=loss.title, type=loss.type, problem=loss.problem)

    def _raise_if_lost(self, exc: Optional[BaseException]) -> None:
        if not self.lost.is_set():
            return
        if isinstance(exc, LeaseLost):
            return  # already on its way out
        if exc is None or isinstance(exc, Exception):
            raise self._loss_error()

    def _lose(self, error: LeaseLost, releasing: bool = False) -> None:
        with self._mutex:
            if self.lost.is_set() or (self._releasing and not releasing) or self._ended:
                return
            self._loss = error
            self.lost_reason = error.reason or "lost"
        self._stop.set()
        self.lost.set()
        log.warning("lease %s of %r lost: %s", self.lease_id, self.name, error.detail)

    def _heartbeat_once(self, raise_errors: bool = False, timeout: Optional[float] = None) -> bool:
        """One heartbeat; True when the lease goes on (renewed, or a retryable failure)."""
        if timeout is None:
            with self._mutex:
                timeout = self._renewal.request_timeout
        outcome = self._client._send(core.heartbeat_call(self._target, self.lease_id, self._token, timeout))
        if isinstance(outcome, core.Reply) and outcome.status == 200:
            body = outcome.body if isinstance(outcome.body, dict) else {}
            with self._mutex:
                self._renewal.renewed(int(body.get("ttl_ms", self.ttl_ms)), outcome.sent_at)
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

    def _keep(self) -> None:
        try:
            while True:
                with self._mutex:
                    wake = min(self._renewal.next_heartbeat, self._renewal.give_up_at)
                if self._stop.wait(max(0.0, wake - core.now())):
                    return
                at = core.now()
                with self._mutex:
                    due = at >= self._renewal.next_heartbeat
                    timeout = self._renewal.heartbeat_timeout(at)
                if due and timeout is not None and not self._heartbeat_once(timeout=timeout):
                    return  # lost (410)
                with self._mutex:
                    give_up = core.now() >= self._renewal.give_up_at
                if give_up:
                    self._lose(lost("unrenewable", UNRENEWABLE, self.lease_id, self.name))
                    return
        except Exception:  # never die silently: the lease is then lost to us
            log.exception("leasehold heartbeat thread failed")
            self._lose(lost("unrenewable", "the heartbeat thread failed", self.lease_id, self.name))

    def _watch(self) -> None:
        client = self._client
        path = core.watch_path(self._target, self.lease_id)
        headers = {"authorization": f"Bearer {self._token}", "accept": "text/event-stream"}
        timeout = httpx.Timeout(client._timeout, read=core.WATCH_READ_TIMEOUT)
        while not self._stop.is_set():
            pause = core.WATCH_RETRY_PAUSE
            try:
                with client._http.stream("GET", path, headers=headers, timeout=timeout) as response:
                    if response.status_code == 200:
                        self._watching.set()
                        parser = core.SSEParser()
                        lines = response.iter_lines()
                        for line in lines:
                            event = parser.feed(line)
                            if event is None or event[0] != "lost":
                                continue
                            data = core.lost_event(event[1])
                            reason = str(data.get("reason") or "lost")
                            self._lose(
                                lost(
                                    reason,
                                    f"the server reports the lease {reason.replace('_', ' ')}",
                                    self.lease_id,
                                    self.name,
                                )
                            )
                            for _ in lines:  # the stream ends here: read its end, to reuse the connection
                                pass
                            return
                    else:
                        response.read()
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
            except Exception:
                log.exception("leasehold watch thread failed; heartbeats carry on")
                return
            self._stop.wait(pause)

    def _reenter(self, body: dict[str, Any], wait_ms: Optional[int]) -> None:
        try:
            grant = self._client._take(self._target, body, wait_ms, reentry_of=self)
        except LeaseLost as e:
            self._lose(e)
            raise
        with self._mutex:
            self.reentry_count = grant.reentry_count
            self._renewal.renewed(grant.ttl_ms, grant.sent_at)

    def _release_level(self, mode: Optional[str]) -> None:
        if self._finished():
            return
        try:
            body = self._client._drive(
                core.release(
                    self._target, self.lease_id, self._token, self._client._timeout, all_levels=False, mode=mode
                )
            )
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


class LeaseContext:
    """What :meth:`Client.lock` and :meth:`Client.semaphore` return: a context manager whose
    block holds the lease (``with ... as lease``). Reusable, one block at a time."""

    def __init__(
        self,
        client: Client,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        reentry_body: Optional[dict[str, Any]],
    ) -> None:
        self._client = client
        self._target = target
        self._body = body
        self._wait_ms = wait_ms
        self._reentry_body = reentry_body
        self._lease: Optional[Lease] = None
        self._level = False
        self._held_token: Any = None

    def __enter__(self) -> Lease:
        if self._lease is not None:
            raise RuntimeError("this lock() is already in use; call client.lock() again for another block")
        client, target = self._client, self._target
        held: Optional[Lease] = None
        if self._reentry_body is not None:
            held = core.held_lease(id(client), target.name)
        if held is not None and self._reentry_body is not None and not held._finished():
            held._reenter(self._reentry_body, self._wait_ms)
            lease, self._level = held, True
        else:
            lease, self._level = client._new_lease(target, self._body, self._wait_ms), False
        self._lease = lease
        if self._reentry_body is not None:
            self._held_token = core.push_held(id(client), target.name, lease)
        return lease

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        if self._held_token is not None:
            core.pop_held(self._held_token, lease)
            self._held_token = None
        if self._level:
            kind = (self._reentry_body or {}).get("kind")
            lease._release_level(kind if kind in ("read", "write") else None)
        else:
            lease.release()
        lease._raise_if_lost(exc)


__all__ = ["Client", "Lease", "LeaseContext", "LeaseholdError"]
