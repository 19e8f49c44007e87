"""Elections against the real server: a campaign that leads at once, waits in line and takes
over when the leader resigns, loses its term to an admin, proclaims; observers that see every
change in order and resume after a dropped connection; typed refusals."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, Optional

import httpx
import pytest
from helpers import wait_until

import leasehold


def test_a_campaign_leads_at_once_and_resigns_at_the_end_of_its_block(client: leasehold.Client, name: str) -> None:
    with client.campaign(name, value="10.0.0.1:8080", ttl_ms=3000) as term:
        assert isinstance(term, leasehold.Term)
        assert term.number > 0 and term.value == "10.0.0.1:8080"
        assert not term.lost.is_set()
        state = client.leader(name)
        assert state["leader"]["candidate_id"] == term.candidate_id
        assert state["leader"]["term"] == term.number and state["leader"]["value"] == "10.0.0.1:8080"
        assert client.check_term(name, term.number)["current"] is True
    assert client.leader(name)["leader"] is None
    assert client.check_term(name, term.number)["current"] is False


def test_a_second_campaign_waits_in_line_and_leads_after_the_first_resigns(client: leasehold.Client, name: str) -> None:
    second: dict[str, Any] = {}
    waiting = threading.Event()

    def follower() -> None:
        waiting.set()
        with client.campaign(name, value="b", ttl_ms=1500) as term:
            second["number"], second["value"] = term.number, term.value
            second["leader"] = client.leader(name)["leader"]

    with client.campaign(name, value="a", ttl_ms=1500) as first:
        thread = threading.Thread(target=follower)
        thread.start()
        waiting.wait(5)
        wait_until(lambda: client.leader(name)["candidates"], what="the second candidate in line")
        # The line outlasts several TTLs: the follower's polls keep its place.
        threading.Event().wait(2.5)
        assert client.leader(name)["candidates"], "the follower kept its place"
        assert client.leader(name)["leader"]["term"] == first.number
    thread.join(10)
    assert not thread.is_alive()
    assert second["number"] > first.number and second["value"] == "b"
    assert second["leader"]["value"] == "b"


def test_an_admin_ending_the_term_sets_the_loss_signal(
    client: leasehold.Client, admin: leasehold.Client, name: str
) -> None:
    with pytest.raises(leasehold.LeaseLost) as raised:
        with client.campaign(name, value="a", ttl_ms=30000) as term:
            assert term._watching.wait(5)
            answer = admin.end_term(name, reason="test")
            assert answer["released"] is True
            assert term.lost.wait(5), "told of the loss by the watch, long before a heartbeat"
            assert term.lost_reason == "force_released"
            with pytest.raises(leasehold.LeaseLost):
                term.proclaim("too late")
    assert raised.value.reason == "force_released"


def test_a_term_whose_ttl_runs_out_is_lost(url: str, name: str) -> None:
    with leasehold.Client(url, watch=False) as client:
        with pytest.raises(leasehold.LeaseLost):
            with client.campaign(name, value="a", ttl_ms=600) as term:
                # Stop the heartbeats (as a paused process would): the TTL runs out.
                term._stop.set()
                term._stop_workers()
                threading.Event().wait(0.9)
                with pytest.raises(leasehold.LeaseLost) as raised:
                    term.proclaim("b")
                assert raised.value.code == "lease_lost"
                assert term.lost.is_set()


def test_a_campaign_cut_short_leaves_the_line(client: leasehold.Client, name: str) -> None:
    with client.campaign(name, value="a", ttl_ms=3000):
        with pytest.raises(leasehold.LockHeld):
            with client.campaign(name, value="b", ttl_ms=3000, wait_ms=300):
                pytest.fail("it cannot lead while the first does")
        assert client.leader(name)["candidates"] == []


def test_a_value_over_4096_bytes_is_a_typed_refusal(client: leasehold.Client, name: str) -> None:
    with pytest.raises(leasehold.InvalidRequest) as raised:
        with client.campaign(name, value="x" * 4097):
            pass
    assert raised.value.code == "invalid_body" and raised.value.status == 422
    with client.campaign(name, value="ok", ttl_ms=3000) as term:
        with pytest.raises(leasehold.InvalidRequest):
            term.proclaim("y" * 4097)
        assert term.value == "ok"


class _Cut(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, cut: threading.Event) -> None:
        self._inner, self._cut = inner, cut

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if self._cut.is_set():
                self._cut.clear()
                raise httpx.ReadError("cut by the test")
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CuttingTransport(httpx.BaseTransport):
    """Drops an observe stream on demand (the next chunk the server sends is lost with it),
    and holds the observer's reconnection until ``reconnect`` is set."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.cut = threading.Event()
        self.reconnect = threading.Event()
        self.resumed_from: list[Optional[str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        observe = request.url.path.endswith("/observe")
        if observe and self.resumed_from:
            self.reconnect.wait(10)
        response = self._inner.handle_request(request)
        if observe:
            self.resumed_from.append(request.headers.get("last-event-id"))
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _Cut(response.stream, self.cut)
        return response

    def close(self) -> None:
        self._inner.close()


def test_observe_tells_every_change_in_order_and_resumes_after_a_dropped_connection(
    url: str, client: leasehold.Client, name: str
) -> None:
    transport = CuttingTransport()
    seen: list[leasehold.ElectionEvent] = []
    connected = threading.Event()

    def observer() -> None:
        with leasehold.Client(url, transport=transport) as watcher:
            for event in watcher.observe(name):
                seen.append(event)
                connected.set()
                if len(seen) == 5:
                    return

    thread = threading.Thread(target=observer, daemon=True)
    thread.start()
    assert connected.wait(5)
    with client.campaign(name, value="a", ttl_ms=3000) as first:
        wait_until(lambda: len(seen) >= 2, what="the first leader")
        first.proclaim("a2")
        wait_until(lambda: len(seen) >= 3, what="the new value")
        transport.cut.set()  # the next message (the vacancy) is lost with the connection
    wait_until(lambda: not transport.cut.is_set(), what="the observe stream dropped")
    # A whole term while the observer is away: the resumed stream must tell it.
    with client.campaign(name, value="b", ttl_ms=3000) as second:
        pass
    transport.reconnect.set()
    thread.join(15)
    kinds = [(e.kind, e.term, e.value) for e in seen]
    assert kinds == [
        ("vacant", 0, None),
        ("leader", first.number, "a"),
        ("leader", first.number, "a2"),
        ("leader", second.number, "b"),
        ("vacant", second.number, None),
    ], kinds
    assert len(transport.resumed_from) >= 2 and transport.resumed_from[0] is None
    assert transport.resumed_from[1] == seen[2].id, "resumed from the last message it had"


def test_the_async_client_campaigns_observes_and_loses(url: str, admin: leasehold.Client, name: str) -> None:
    async def main() -> None:
        async with leasehold.AsyncClient(url) as aclient:
            events: list[leasehold.ElectionEvent] = []

            async def observer() -> None:
                async for event in aclient.observe(name):
                    events.append(event)
                    if len(events) == 3:
                        return

            task = asyncio.create_task(observer())
            while not events:
                await asyncio.sleep(0.01)
            with pytest.raises(leasehold.LeaseLost):
                async with aclient.campaign(name, value="a", ttl_ms=3000) as term:
                    assert isinstance(term, leasehold.AsyncTerm) and term.number > 0
                    while len(events) < 2:  # told before it changes (else only the last value)
                        await asyncio.sleep(0.01)
                    await term.proclaim("a2")
                    assert (await aclient.leader(name))["leader"]["value"] == "a2"
                    await asyncio.to_thread(admin.end_term, name)
                    await asyncio.wait_for(term.lost.wait(), 5)
            await asyncio.wait_for(task, 10)
            assert [(e.kind, e.value) for e in events] == [("vacant", None), ("leader", "a"), ("leader", "a2")]

    asyncio.run(main())


def test_a_leaders_heartbeats_name_its_term_and_another_term_is_the_loss(
    url: str, raw: httpx.Client, name: str
) -> None:
    from leasehold import _core as core

    call = core.heartbeat_call(core.Target(core.ELECTIONS, name), "c1", "tok", 1.0, term=7)
    assert call.params == {"term": 7} and call.path.endswith("/candidates/c1/heartbeat")
    assert core.heartbeat_call(core.Target(core.LOCKS, name), "l1", "tok", 1.0).params is None

    heartbeats: list[httpx.Request] = []

    def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/heartbeat"):
            heartbeats.append(request)

    with leasehold.Client(url, watch=False) as client:
        client._http.event_hooks["request"].append(record)
        with pytest.raises(leasehold.LeaseLost) as raised:
            with client.campaign(name, value="a", ttl_ms=900) as term:
                # Kept across several heartbeats, each naming the term, the term unchanged.
                wait_until(lambda: len(heartbeats) >= 3, what="three heartbeats")
                assert all(r.url.params.get("term") == str(term.number) for r in heartbeats)
                assert not term.lost.is_set()
                assert client.leader(name)["leader"]["term"] == term.number
                # A heartbeat naming another term lets the candidate go (410): the client's
                # next heartbeat, naming its own, is answered 410 too, and that is the loss.
                r = raw.post(
                    f"/v1/elections/{name}/candidates/{term.candidate_id}/heartbeat",
                    params={"term": term.number + 1},
                    headers={"authorization": f"Bearer {term._token}"},
                )
                assert r.status_code == 410
                wait_until(term.lost.is_set, what="the loss")
        assert raised.value.code == "lease_lost"
