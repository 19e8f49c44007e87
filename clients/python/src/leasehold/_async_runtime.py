"""What the asyncio client runs on: events, a stop signal, sleeps, background loops.

``_async/`` is written against this module and ``_sync/`` is generated from it (``unasync``,
see ``scripts/generate_sync.py``) against ``_sync_runtime``, its twin for threads: the
names are the same, and every coroutine here is a plain function there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: What a cancelled loop raises (and must let through).
Cancelled = asyncio.CancelledError

#: A lease's ``lost``: an :class:`asyncio.Event`.
Event = asyncio.Event


def Mutex() -> contextlib.AbstractContextManager[Any]:  # noqa: N802 (a class in _sync_runtime)
    """Guards state the background loops share: nothing to guard on one event loop."""
    return contextlib.nullcontext()


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def shield(work: Awaitable[T]) -> T:
    """Runs ``work`` to its end even if the caller is cancelled meanwhile (it then goes on in
    the background): a release must not be cut in half."""
    return await asyncio.shield(work)


class Stop:
    """Set once a lease is over: its loops end at their next wait."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, seconds: float) -> bool:
        """Waits up to ``seconds``; True when stopped meanwhile."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass
        return self._event.is_set()


class Worker:
    """A background loop (a task of the running event loop)."""

    def __init__(self, loop: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._task: asyncio.Task[None] = asyncio.ensure_future(loop())

    def cancel(self) -> None:
        """Ends it now (unless it is the one asking: it is ending by itself then)."""
        if self._task is not asyncio.current_task() and not self._task.done():
            self._task.cancel()

    def cancel_later(self, seconds: float) -> None:
        """Ends it in ``seconds`` if it has not ended by itself by then (a watch after our own
        release, which the server ends with its last event: its connection is then reused)."""
        if not self._task.done():
            asyncio.get_running_loop().call_later(seconds, self.cancel)


def track(lease: Any) -> None:
    """Leases left held at interpreter exit: an event loop cannot be driven from ``atexit``,
    so an asyncio lease is not tracked (``asyncio.run`` cancels its tasks, and ``async with``
    releases)."""


def forget(lease: Any) -> None:
    pass


def call_at_exit(release: Callable[[], Any]) -> None:
    """(Never called: asyncio leases are not tracked for ``atexit``, see :func:`track`.)"""
