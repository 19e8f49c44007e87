"""What ``lock()``, ``semaphore()`` and ``multilease()`` return: :class:`AsyncLeaseContext`,
whose block holds a lease (a new one, or one more level of the lease the same thread or task
holds on that lock).

The source of ``_sync/context.py``, which ``scripts/generate_sync.py`` makes from it
(unasync): edit this file, then regenerate.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional

from .. import _core as core
from .lease import AsyncLease

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncLeaseContext:
    """What ``lock()``, ``semaphore()`` and ``multilease()`` return: a context manager whose
    block holds the lease (``with ... as lease``). Reusable, one block at a time."""

    def __init__(
        self,
        client: AsyncClient,
        target: core.Target,
        body: dict[str, Any],
        wait_ms: Optional[int],
        reentry_body: Optional[dict[str, Any]],
        *,
        hear: core.Hear = None,
        expiring_slack_ms: Optional[int] = None,
    ) -> None:
        self._client = client
        self._hear = hear
        self._expiring_slack_ms = expiring_slack_ms
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
            lease, self._level = (
                await client._new_lease(
                    target,
                    self._body,
                    self._wait_ms,
                    hear=self._hear,
                    expiring_slack_ms=self._expiring_slack_ms,
                ),
                False,
            )
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
