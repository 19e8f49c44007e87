"""Where a waiter stands in line, told to the caller while it waits (clients/PROTOCOL.md, "Why
the wait"): a campaign's candidate (:class:`InLine`, ``on_in_line``) as a fair lock's ticket
(:class:`Queued`, ``on_queued``). The acquire plan hears each answer in line's body
(:data:`Hear`); :func:`hearing` turns the caller's hook into that, and keeps what it raises
from the wait. ``_core`` re-exports all of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")


def _number(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Leader:
    """An election's leader as a candidate in line sees it: its ``term``, the ``value`` it
    publishes, its ``holder`` label, ``candidate_id``, ``since`` and ``expires_at``."""

    term: int
    value: Optional[str] = None
    holder: Optional[str] = None
    candidate_id: Optional[str] = None
    since: Optional[str] = None
    expires_at: Optional[str] = None

    @classmethod
    def parse(cls, body: Any) -> Optional[Leader]:
        """``None`` when nobody leads (the field absent or ``null``)."""
        if not isinstance(body, Mapping) or _number(body.get("term")) is None:
            return None
        return cls(
            term=_number(body.get("term")) or 0,
            value=_text(body.get("value")),
            holder=_text(body.get("holder")),
            candidate_id=_text(body.get("candidate_id")),
            since=_text(body.get("since")),
            expires_at=_text(body.get("expires_at")),
        )


@dataclass(frozen=True)
class InLine:
    """Where a campaign's candidate stands, as each answer in line tells it (``on_in_line``):
    ``position`` (1: next), ``leader`` (who leads now, a :class:`Leader`; ``None`` when nobody
    does) and ``estimated_wait_ms`` (the server's estimate of the wait until it leads; ``None``
    until the election has three ended terms to go by)."""

    position: Optional[int]
    leader: Optional[Leader] = None
    estimated_wait_ms: Optional[int] = None

    @classmethod
    def parse(cls, body: Any) -> InLine:
        body = body if isinstance(body, Mapping) else {}
        return cls(
            position=_number(body.get("position")),
            leader=Leader.parse(body.get("leader")),
            estimated_wait_ms=_number(body.get("estimated_wait_ms")),
        )


#: What ``on_in_line`` is: called with each :class:`InLine` while a campaign waits in line.
OnInLine = Optional[Callable[[InLine], Any]]
#: What an acquire plan tells each answer in line's body to (see :func:`hearing`).
Hear = Optional[Callable[[Any], None]]


def hearing(hook: Optional[Callable[[T], Any]], parse: Callable[[Any], T], name: str) -> Hear:
    """``hook`` (the caller's ``name``) as a :data:`Hear`: each answer in line's body read by
    ``parse``. A hook that raises is logged and the wait goes on: the hook only watches the
    wait, it never decides it (nor skips leaving the line)."""
    if hook is None:
        return None

    def hear(body: Any) -> None:
        try:
            hook(parse(body))
        except Exception:
            logging.getLogger("leasehold").exception("an %s callback failed", name)

    return hear


def tell(hear: Hear, body: Any) -> None:
    """Tells ``hear`` (if any) an answer in line's body."""
    if hear is not None:
        hear(body)
