"""The I/O-free parts: server-sent events, the renewal schedule, problem mapping, plans."""

from __future__ import annotations

import leasehold
from leasehold import _core as core
from leasehold._errors import make_problem


def test_sse_parser() -> None:
    parser = core.SSEParser()
    lines = [
        ": watching",
        "",
        "event: lost",
        'data: {"lease_id":"x","lock":"deploy","reason":"force_released"}',
        "",
    ]
    events = [e for e in (parser.feed(line) for line in lines) if e is not None]
    assert events == [("lost", '{"lease_id":"x","lock":"deploy","reason":"force_released"}')]
    assert core.lost_event(events[0][1])["reason"] == "force_released"
    # Multi-line data, CRLF endings, no space after the colon.
    parser = core.SSEParser()
    got = [parser.feed(line) for line in ["data:a\r\n", "data: b\r\n", "\r\n"]]
    assert got[-1] == ("message", "a\nb")


def test_renewal_schedule() -> None:
    r = core.Renewal(30000, renewed_at=100.0)
    assert r.next_heartbeat == 110.0 and r.until == 130.0
    assert r.margin == 5.0 and r.give_up_at == 125.0
    r.failed(110.0)
    assert r.next_heartbeat == 111.0  # retried after a tenth of the TTL, at most a second
    r.renewed(30000, 111.5)
    assert r.until == 141.5 and r.next_heartbeat == 121.5
    short = core.Renewal(900, renewed_at=0.0)
    assert short.next_heartbeat == 0.3 and abs(short.margin - 0.3) < 1e-9  # at most a third of the TTL
    assert abs(short.request_timeout - 0.5) < 1e-9
    # A heartbeat must answer before the give-up instant, or once past it, before expiry.
    assert short.heartbeat_timeout(0.3) is not None and abs(short.heartbeat_timeout(0.3) - 0.3) < 1e-9  # type: ignore[operator]
    assert abs(short.heartbeat_timeout(0.7) - 0.2) < 1e-9  # type: ignore[operator]
    assert short.heartbeat_timeout(0.9) is None
    assert core.Renewal(1000, renewed_at=0.0).stale(0.2)
    assert not core.Renewal(1000, renewed_at=0.0).stale(0.05)


def test_problem_mapping() -> None:
    held = make_problem(
        409,
        {"code": "lock_held", "status": 409, "detail": "held", "holder": "me", "retry_after_ms": 1500},
        "2",
    )
    assert isinstance(held, leasehold.LockHeld) and held.holder == "me" and held.retry_after == 1.5
    no_permits = make_problem(409, {"code": "no_permits"}, "30")
    assert isinstance(no_permits, leasehold.NoPermits) and isinstance(no_permits, leasehold.LockHeld)
    assert no_permits.retry_after == 30.0
    assert type(make_problem(409, {"code": "mode_not_held"})) is leasehold.Conflict
    assert type(make_problem(429, {"code": "quota_exceeded"})) is leasehold.RateLimited
    unknown = make_problem(418, {"code": "teapot"})
    assert type(unknown) is leasehold.ProblemError and unknown.code == "teapot"
    bare = make_problem(502, None)
    assert bare.code == "http_502" and bare.status == 502


def test_a_503_is_retried_with_the_same_request_then_given_up() -> None:
    """The acquire plan, driven by hand: a 503 then the grant; the retry is the same call."""
    state = core.AcquireState()
    plan = core.acquire(core.Target(core.LOCKS, "x"), {"kind": "reentrant"}, 1.0, 5.0, state)
    first = plan.send(None)
    assert isinstance(first, core.Call) and first.idempotency_key
    step = plan.send(core.Reply(503, {}, {"code": "redis_unavailable", "status": 503}, 0.0))
    assert isinstance(step, core.Sleep) and step.seconds <= core.MAX_BACKOFF
    retry = plan.send(None)
    assert isinstance(retry, core.Call)
    assert retry.idempotency_key == first.idempotency_key and retry.json == first.json
    grant = {
        "lease_id": "l",
        "token": "lht_t",
        "lock": "x",
        "kind": "reentrant",
        "holder": None,
        "fencing_token": 7,
        "reentry_count": 1,
        "ttl_ms": 30000,
        "expires_at": "",
    }
    try:
        plan.send(core.Reply(201, {}, grant, 0.0))
    except StopIteration as done:
        assert done.value.fencing_token == 7 and state.grant is done.value
    else:
        raise AssertionError("the plan should have ended with the grant")
