# Generated from ../_async/election.py by scripts/generate_sync.py (unasync): edit that file, not this one.
"""Elections: :class:`AsyncTerm` (a leader's term, kept alive and watched as any lease),
:class:`AsyncCampaign` (what ``campaign()`` returns) and the observe stream.

The source of ``_sync/election.py``, which ``scripts/generate_sync.py`` makes from it
(unasync): edit this file, then regenerate. A term is a lease whose place is an election's
candidate (``core.Target`` with ``ELECTIONS``): its heartbeats, watch, loss and resignation
are the lease's own; only the campaign's wait in line and ``proclaim`` are an election's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

import httpx

from .. import _sync_runtime as rt
from .. import _core as core
from .._errors import LeaseLost, ProblemError, lost, make_problem
from .context import LeaseContext
from .lease import Lease

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("leasehold")


class Term(Lease):
    """This client's term as an election's leader, kept alive (heartbeats every TTL/3) and
    watched until it resigns or loses it. ``number`` is the term, a fencing token that only
    grows per election: pass it with every write the leader makes. ``value`` is what it
    publishes to observers (:meth:`proclaim` changes it). ``lost`` is set the moment the term
    is lost (an admin ended it, its TTL ran out); a ``with`` block then ends in
    :class:`LeaseLost`. ``candidate_id`` is its ``lease_id``."""

    def __init__(self, client: Client, target: core.Target, grant: core.Grant) -> None:
        super().__init__(client, target, grant)
        self.number: int = grant.fencing_token
        value = grant.raw.get("value")
        self.value: Optional[str] = value if isinstance(value, str) else None

    @property
    def candidate_id(self) -> str:
        return self.lease_id

    def proclaim(self, value: str) -> None:
        """Publishes a new value in the same term; observers get it as a ``leader`` event.
        Raises :class:`LeaseLost` (and sets ``lost``) once the term has ended."""
        self.check()
        call = core.Call(
            "PUT",
            f"{self._target.lease_path(self.lease_id)}/value",
            timeout=self._client._timeout,
            json={"value": str(value)},
            token=self._token,
        )
        try:
            self._client._drive(core.simple(call, self._client._timeout))
        except LeaseLost as e:
            self._lose(e)
            raise
        except ProblemError as e:
            if e.code != "lease_not_found":
                raise
            gone = lost("expired", e.detail, self.lease_id, self.name)
            self._lose(gone)
            raise gone from e
        self.value = str(value)

    def resign(self) -> None:
        """Resigns (the next candidate in line leads at once) and stops keeping the term: what
        the end of a ``with`` block does. Idempotent."""
        self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("resigned" if self._ended else "leading")
        return f"<leasehold.{type(self).__name__} {self.name!r} term={self.number} value={self.value!r} {state}>"

    def __enter__(self) -> Term:
        return self


class Campaign(LeaseContext):
    """What ``campaign()`` returns: a context manager whose block runs while this client
    leads (``with client.campaign(name, value=addr) as term``). Entering waits in line; the
    block's end resigns, however it ends."""

    def __enter__(self) -> Term:
        term = super().__enter__()
        assert isinstance(term, Term)
        if term.value is None:
            term.value = str(self._body.get("value", ""))
        return term


#: Longest pause between attempts to open an observe stream again.
OBSERVE_MAX_PAUSE = 5.0


def observe(
    client: Client, name: str, last_event_id: Optional[str] = None
) -> Iterator[core.ElectionEvent]:
    """The election's changes as they come (see ``AsyncClient.observe``): a broken or ended
    stream is opened again with ``Last-Event-ID``, so that every term since comes first."""
    path = f"/v1/elections/{core.segment(name)}/observe"
    timeout = httpx.Timeout(client._timeout, read=core.WATCH_READ_TIMEOUT)
    last = last_event_id
    attempt = 0
    while True:
        headers = {"accept": "text/event-stream"}
        if last:
            headers["last-event-id"] = last
        pause = core.backoff(attempt)
        try:
            with client._http.stream("GET", path, headers=headers, timeout=timeout) as response:
                if response.status_code != 200:
                    response.read()
                    problem = make_problem(
                        response.status_code, core.parse_body(response.content), response.headers.get("retry-after")
                    )
                    if problem.status not in (408, 429, 502, 503, 504):  # else busy, away, or all streams open
                        raise problem
                    pause = max(pause, min(problem.retry_after or 0.0, 30.0))
                else:
                    parser = core.SSEParser()
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is None or event[0] not in ("leader", "vacant", "resync"):
                            continue
                        attempt = 0
                        if parser.last_id:
                            last = parser.last_id
                        yield core.ElectionEvent.parse(event[0], event[1], parser.last_id)
        except httpx.TransportError as e:
            log.debug("the observe stream of %r broke (%r): opening it again", name, e)
        attempt += 1
        rt.sleep(min(pause, OBSERVE_MAX_PAUSE))
