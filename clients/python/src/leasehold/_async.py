"""The asyncio client: :class:`AsyncClient`, :class:`AsyncLease`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Optional, TypeVar

import httpx

from . import _core as core
from . import _signals as signals
from ._errors import LeaseLost, ProblemError, TransportError, lost, make_problem
from ._sync import UNRENEWABLE, _http_limits
from ._version import __version__

log = logging.getLogger("leasehold")

T = TypeVar("T")


class AsyncClient:
    """A Leasehold server, for asyncio code. Arguments as for :class:`leasehold.Client`.
    Use one per event loop; close it with ``await client.aclose()`` or ``async with``."""

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
        return f"leasehold.AsyncClient({self.url!r})"

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
                await asyncio.sleep(step.seconds)
                outcome = None
            else:
                outcome = await self._send(step)

    async def _shielded(self, plan: core.Plan[Any], what: str) -> None:
        """Runs a plan that gives something back, to its end even if we are cancelled
        meanwhile (it then goes on in the background)."""
        try:
            await asyncio.shield(self._drive(plan))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the lease then ends with its TTL
            log.warning("could not %s: %s", what, e)

    async def _take(
        self,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        reentry_of: Optional[AsyncLease] = None,
    ) -> core.Grant:
        state = core.AcquireState()
        wait_s = None if wait_ms is None else wait_ms / 1000
        token = reentry_of._token if reentry_of is not None else None
        try:
            return await self._drive(core.acquire(target, body, wait_s, self._timeout, state, token))
        except BaseException:
            cleanup = core.abandon(target, state, self._timeout)
            if cleanup is not None:
                try:
                    await self._shielded(cleanup, "give back an acquire cut short")
                except asyncio.CancelledError:
                    pass  # goes on in the background; the first exception is what counts
            raise

    async def _new_lease(self, target: core.Target, body: dict[str, Any], wait_ms: Optional[int]) -> AsyncLease:
        grant = await self._take(target, body, wait_ms)
        lease = AsyncLease(self, target, grant)
        try:
            await lease._start()
        except BaseException:
            await lease._abort()
            raise
        return lease

    # --- locks and semaphores ---

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
    ) -> AsyncLease:
        """As :meth:`leasehold.Client.acquire`; release with ``await lease.release()`` or
        ``async with lease:``."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata)
        return await self._new_lease(core.Target(core.LOCKS, name), body, wait_ms)

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
    ) -> AsyncLeaseContext:
        """``async with client.lock(name) as lease:`` as :meth:`leasehold.Client.lock`, with
        ``lease.lost`` an :class:`asyncio.Event`. A nested ``lock()`` of the same name in
        the same task (or a task it created) re-enters the lease. A cancelled block (or a
        cancelled wait for the lock) releases (or gives up) before the cancellation goes on."""
        body = core.lock_body(ttl_ms, holder or core.default_holder(), kind, policy, metadata)
        reentry = core.lock_body(None, None, kind, policy, None)  # keeps the lease's TTL
        return AsyncLeaseContext(self, core.Target(core.LOCKS, name), body, wait_ms, reentry)

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
        """``async with client.semaphore(name, limit, permits) as lease:``."""
        body = core.semaphore_body(limit, permits, ttl_ms, holder or core.default_holder(), metadata)
        return AsyncLeaseContext(self, core.Target(core.SEMAPHORES, name), body, wait_ms, None)

    # Multileases: see the note in _sync.py.

    # --- reads and admin ---

    async def check_fence(self, name: str, fencing_token: int) -> core.FenceCheck:
        return await self._drive(core.fence_check(name, fencing_token, self._timeout))

    async def inspect_lock(self, name: str) -> dict[str, Any]:
        return await self._get(f"/v1/locks/{core.segment(name)}")

    async def inspect_semaphore(self, name: str) -> dict[str, Any]:
        return await self._get(f"/v1/semaphores/{core.segment(name)}")

    async def inspect_lease(self, name: str, lease_id: str, *, semaphore: bool = False) -> dict[str, Any]:
        resource = core.SEMAPHORES if semaphore else core.LOCKS
        return await self._get(core.Target(resource, name).lease_path(lease_id))

    async def force_release(self, name: str, reason: Optional[str] = None) -> dict[str, Any]:
        params = {"reason": reason} if reason else None
        call = core.Call("DELETE", f"/v1/admin/locks/{core.segment(name)}", timeout=self._timeout, params=params)
        return await self._drive(core.simple(call, self._timeout))

    async def _get(self, path: str) -> dict[str, Any]:
        call = core.Call("GET", path, timeout=self._timeout)
        body: dict[str, Any] = await self._drive(core.simple(call, self._timeout))
        return body


class AsyncLease:
    """As :class:`leasehold.Lease`, kept alive by two tasks of the event loop; ``lost`` is
    an :class:`asyncio.Event`."""

    def __init__(self, client: AsyncClient, target: core.Target, grant: core.Grant) -> None:
        self._client = client
        self._target = target
        self.name: str = target.name
        self.lease_id: str = grant.lease_id
        self.fencing_token: int = grant.fencing_token
        self.kind: str = grant.kind
        self.holder: Optional[str] = grant.holder
        self.permits: Optional[int] = grant.permits
        self.reentry_count: int = grant.reentry_count
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._watching = asyncio.Event()  # set once a watch stream is open (for tests)
        self._token: str = grant.token or ""
        self._loss: Optional[LeaseLost] = None
        self._renewal = core.Renewal(grant.ttl_ms, grant.sent_at)
        self._releasing = False
        self._ended = False
        self._tasks: list[asyncio.Task[None]] = []
        self._holding = False

    async def _start(self) -> None:
        if self._renewal.stale(core.now()):
            await self._heartbeat_once(raise_errors=True)
        signals.hold(self._client._handle_sigterm)
        self._holding = True
        self._tasks.append(asyncio.ensure_future(self._keep()))
        if self._client._watch:
            self._tasks.append(asyncio.ensure_future(self._watch()))

    async def _abort(self) -> None:
        await self._client._shielded(
            core.release(self._target, self.lease_id, self._token, self._client._timeout, all_levels=True),
            "release a lease cut short",
        )
        self._end()

    # --- what users read ---

    @property
    def token(self) -> str:
        return self._token

    @property
    def ttl_ms(self) -> int:
        return int(self._renewal.ttl * 1000)

    @property
    def expires_in(self) -> float:
        return max(0.0, self._renewal.until - core.now())

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease has been lost."""
        if self.lost.is_set():
            raise self._loss_error()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._ended else "held")
        return (
            f"<leasehold.AsyncLease {self.name!r} lease_id={self.lease_id} fencing_token={self.fencing_token} {state}>"
        )

    # --- release ---

    async def release(self) -> None:
        """Releases the lease (every level) and stops keeping it. Idempotent; never raises
        for a lost lease. Runs to its end even when the caller is cancelled meanwhile."""
        if self._ended or self._releasing:
            return
        self._releasing = True
        self._stop_tasks(keep_watch=True)
        try:
            if self._loss is None or self.lost_reason == "unrenewable":
                await asyncio.shield(
                    self._client._drive(
                        core.release(self._target, self.lease_id, self._token, self._client._timeout, all_levels=True)
                    )
                )
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

    def _stop_tasks(self, keep_watch: bool = False) -> None:
        """Cancels the heartbeat task, and the watch task unless ``keep_watch``: after our
        own release the watch ends by itself (the server says ``lost``, reason
        ``released``), which keeps its connection for reuse; it is cancelled if it has not
        ended a few seconds later."""
        current = asyncio.current_task()
        for i, task in enumerate(self._tasks):
            if task is current or task.done():
                continue
            if keep_watch and i == 1:
                asyncio.get_running_loop().call_later(core.WATCH_RETRY_PAUSE * 5, task.cancel)
            else:
                task.cancel()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if not self._releasing:  # release() has stopped them already
            self._stop_tasks()
        if self._holding:
            self._holding = False
            signals.unhold(self._client._handle_sigterm)

    def _finished(self) -> bool:
        return self._ended or self._releasing or self.lost.is_set()

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

    def _lose(self, error: LeaseLost, releasing: bool = False) -> None:
        if self.lost.is_set() or (self._releasing and not releasing) or self._ended:
            return
        self._loss = error
        self.lost_reason = error.reason or "lost"
        self.lost.set()
        self._stop_tasks()
        log.warning("lease %s of %r lost: %s", self.lease_id, self.name, error.detail)

    async def _heartbeat_once(self, raise_errors: bool = False, timeout: Optional[float] = None) -> bool:
        if timeout is None:
            timeout = self._renewal.request_timeout
        call = core.heartbeat_call(self._target, self.lease_id, self._token, timeout)
        outcome = await self._client._send(call)
        if isinstance(outcome, core.Reply) and outcome.status == 200:
            body = outcome.body if isinstance(outcome.body, dict) else {}
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
        self._renewal.failed(core.now())
        return True

    async def _keep(self) -> None:
        try:
            while True:
                wake = min(self._renewal.next_heartbeat, self._renewal.give_up_at)
                await asyncio.sleep(max(0.0, wake - core.now()))
                at = core.now()
                timeout = self._renewal.heartbeat_timeout(at)
                if at >= self._renewal.next_heartbeat and timeout is not None:
                    if not await self._heartbeat_once(timeout=timeout):
                        return  # lost (410)
                if core.now() >= self._renewal.give_up_at:
                    self._lose(lost("unrenewable", UNRENEWABLE, self.lease_id, self.name))
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("leasehold heartbeat task failed")
            self._lose(lost("unrenewable", "the heartbeat task failed", self.lease_id, self.name))

    async def _watch(self) -> None:
        client = self._client
        path = core.watch_path(self._target, self.lease_id)
        headers = {"authorization": f"Bearer {self._token}", "accept": "text/event-stream"}
        timeout = httpx.Timeout(client._timeout, read=core.WATCH_READ_TIMEOUT)
        while not (self._releasing or self._ended):
            pause = core.WATCH_RETRY_PAUSE
            try:
                async with client._http.stream("GET", path, headers=headers, timeout=timeout) as response:
                    if response.status_code == 200:
                        self._watching.set()
                        parser = core.SSEParser()
                        lines = response.aiter_lines()
                        async for line in lines:
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
                pass
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("leasehold watch task failed; heartbeats carry on")
                return
            await asyncio.sleep(pause)

    async def _reenter(self, body: dict[str, Any], wait_ms: Optional[int]) -> None:
        try:
            grant = await self._client._take(self._target, body, wait_ms, reentry_of=self)
        except LeaseLost as e:
            self._lose(e)
            raise
        self.reentry_count = grant.reentry_count
        self._renewal.renewed(grant.ttl_ms, grant.sent_at)

    async def _release_level(self, mode: Optional[str]) -> None:
        if self._finished():
            return
        try:
            body = await asyncio.shield(
                self._client._drive(
                    core.release(
                        self._target, self.lease_id, self._token, self._client._timeout, all_levels=False, mode=mode
                    )
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
            self.reentry_count = int(body.get("reentry_count", self.reentry_count - 1))


class AsyncLeaseContext:
    """What :meth:`AsyncClient.lock` and :meth:`AsyncClient.semaphore` return: ``async
    with ... as lease``. Reusable, one block at a time."""

    def __init__(
        self,
        client: AsyncClient,
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
        self._lease: Optional[AsyncLease] = None
        self._level = False
        self._held_token: Any = None

    async def __aenter__(self) -> AsyncLease:
        if self._lease is not None:
            raise RuntimeError("this lock() is already in use; call client.lock() again for another block")
        client, target = self._client, self._target
        held: Optional[AsyncLease] = None
        if self._reentry_body is not None:
            held = core.held_lease(id(client), target.name)
        if held is not None and self._reentry_body is not None and not held._finished():
            await held._reenter(self._reentry_body, self._wait_ms)
            lease, self._level = held, True
        else:
            lease, self._level = await client._new_lease(target, self._body, self._wait_ms), False
        self._lease = lease
        if self._reentry_body is not None:
            self._held_token = core.push_held(id(client), target.name, lease)
        return lease

    async def __aexit__(
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
            await lease._release_level(kind if kind in ("read", "write") else None)
        else:
            await lease.release()
        lease._raise_if_lost(exc)
