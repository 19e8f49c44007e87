"""A campaign waiting in line tells where it stands, as a fair lock's waiter does
(clients/PROTOCOL.md, "Why the wait"): each answer in line reaches ``on_in_line`` as an
:class:`InLine` (its position, the leader now, the estimate), none after the grant; a hook
that raises is logged, and the wait goes on."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import wait_until

import leasehold


def test_a_campaign_in_line_tells_where_it_stands(client: leasehold.Client, name: str) -> None:
    """``clients/parity.json`` ``campaignInLine``: B waits behind A and hears position 1 and A's
    holder, value and term; A resigns, B leads, and the hook heard nothing after the grant."""
    heard: list[leasehold.InLine] = []
    led: dict[str, Any] = {}

    def b() -> None:
        with client.campaign(
            name, value="b", holder="node-b", ttl_ms=3000, wait_ms=20000, on_in_line=heard.append
        ) as term:
            led["number"], led["told"] = term.number, len(heard)
            time.sleep(1.0)  # longer than a poll would wait for: none comes after the grant
            led["told_later"] = len(heard)

    with client.campaign(name, value="a", holder="node-a", ttl_ms=3000) as a:
        thread = threading.Thread(target=b)
        thread.start()
        try:
            wait_until(lambda: heard, what="B hears its place")
            first = heard[0]
            assert first.position == 1
            assert first.estimated_wait_ms is None  # no ended term yet: no estimate
            assert first.leader is not None
            assert (first.leader.holder, first.leader.value, first.leader.term) == ("node-a", "a", a.number)
        finally:
            a.resign()
            thread.join(15)
    assert not thread.is_alive(), "B never led"
    assert led["number"] > a.number
    assert led["told"] >= 1 and led["told_later"] == led["told"] == len(heard)


def test_a_campaign_whose_hook_raises_waits_on(
    client: leasehold.Client, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[leasehold.InLine] = []

    def hook(in_line: leasehold.InLine) -> None:
        calls.append(in_line)
        raise RuntimeError("the hook fails")

    led: list[int] = []

    def b() -> None:
        with client.campaign(name, value="b", ttl_ms=3000, wait_ms=20000, on_in_line=hook) as term:
            led.append(term.number)

    with client.campaign(name, value="a", ttl_ms=3000):
        thread = threading.Thread(target=b)
        thread.start()
        wait_until(lambda: calls, what="B's hook called")
    thread.join(15)
    assert not thread.is_alive() and len(led) == 1, "B led all the same"
    assert "an on_in_line callback failed" in caplog.text
    assert client.leader(name)["leader"] is None and not client.leader(name)["candidates"]
