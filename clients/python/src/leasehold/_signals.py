"""Releasing on SIGTERM, and at interpreter exit.

By default SIGTERM kills a Python process on the spot: no ``finally``, no ``__exit__``, so a
lease would stay held until its TTL runs out. While this process holds a lease (taken by a
client with ``handle_sigterm=True``, the default), and only if SIGTERM still has its default
action, a handler turns SIGTERM into ``SystemExit(143)`` in the main thread, so ``with``
blocks unwind and release (an ``asyncio.run`` cancels its tasks, whose ``async with`` blocks
release). The default action comes back once no lease is held. Ctrl-C needs nothing: it is
``KeyboardInterrupt`` (or, under ``asyncio.run``, a cancellation) already.

Leases still held when the interpreter exits (taken with ``client.acquire()`` and never
released, or held by a daemon thread) are released by an ``atexit`` hook.
"""

from __future__ import annotations

import atexit
import signal
import threading
import weakref
from typing import Any, Optional

_lock = threading.Lock()
_holds = 0
_installed = False
_live: weakref.WeakSet[Any] = weakref.WeakSet()


def _on_sigterm(signum: int, frame: Optional[Any]) -> None:
    raise SystemExit(128 + signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def hold(handle_sigterm: bool) -> None:
    """A lease is now held (and, with ``handle_sigterm``, SIGTERM should release it)."""
    global _holds, _installed
    if not handle_sigterm:
        return
    with _lock:
        _holds += 1
        if _installed or not _main_thread() or not hasattr(signal, "SIGTERM"):
            return
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
                _installed = True
        except (ValueError, OSError):  # not the main interpreter, or no signals here
            pass


def unhold(handle_sigterm: bool) -> None:
    global _holds, _installed
    if not handle_sigterm:
        return
    with _lock:
        _holds = max(0, _holds - 1)
        if _holds or not _installed or not _main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _installed = False
        except (ValueError, OSError):
            pass


def track(lease: Any) -> None:
    """Remembers a sync lease, to release it at exit if nobody did."""
    _live.add(lease)


def forget(lease: Any) -> None:
    _live.discard(lease)


@atexit.register
def _release_at_exit() -> None:
    for lease in list(_live):
        try:
            lease._release_at_exit()
        except Exception:
            pass
