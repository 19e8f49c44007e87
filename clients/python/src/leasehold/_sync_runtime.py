"""What the blocking client runs on: the twin of ``_async_runtime`` for threads (the
generated ``_sync/`` imports this one under the same names)."""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

from . import _signals as signals

T = TypeVar("T")


class Cancelled(BaseException):
    """Never raised: threads are not cancelled, they see their lease's :class:`Stop`."""


#: A lease's ``lost``: a :class:`threading.Event`.
Event = threading.Event

#: Guards state the heartbeat and watch threads share with the caller's.
Mutex = threading.Lock


def sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def shield(work: T) -> T:
    """(A blocking call is never cut in half: it is already done.)"""
    return work


class Stop:
    """Set once a lease is over: its threads end at their next wait."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Waits up to ``seconds``; True when stopped meanwhile."""
        return self._event.wait(max(0.0, seconds))


class Worker:
    """A background loop: a daemon thread (it never keeps the process alive)."""

    def __init__(self, loop: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=loop, name=f"leasehold-{name}", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """(A thread cannot be cancelled: it ends at its next look at the lease's Stop, or,
        for a watch, when its stream ends, as the server ends it once the lease has.)"""

    def cancel_later(self, seconds: float) -> None:
        pass


def track(lease: Any) -> None:
    """Remembers a lease, to release it at interpreter exit if nobody did."""
    signals.track(lease)


def forget(lease: Any) -> None:
    signals.forget(lease)


def call_at_exit(release: Callable[[], Any]) -> None:
    """Releases a lease left held at interpreter exit."""
    release()
