//! Redis going away: fast 503s, never a hang, recovery when it is back, and a command answered
//! 503 never takes effect later.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, holder_of, spawn_app, spawn_app_with};

#[tokio::test]
async fn redis_stopped_mid_test_gives_503_then_recovers() {
    let mut app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    app.redis.stop();

    let started = Instant::now();
    let reply = app.acquire("jobs", json!({})).await;
    reply.assert_problem(503, "redis_unavailable");
    assert!(reply.header("retry-after").is_some());
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(503, "redis_unavailable");
    app.get("/readyz")
        .await
        .assert_problem(503, "redis_unavailable");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "answers came in {:?}",
        started.elapsed()
    );
    app.get("/healthz").await.assert_status(200);

    app.redis.restart();
    // The connection manager reconnects on the next calls; allow it a bounded number of tries.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = app.acquire("jobs", json!({})).await;
        if reply.status == 201 {
            break;
        }
        reply.assert_problem(503, "redis_unavailable");
        assert!(
            Instant::now() < deadline,
            "no recovery after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.wait_until_ready().await;
}

#[tokio::test]
async fn a_waiter_keeps_waiting_while_redis_is_away_and_gets_503_only_at_its_deadline() {
    let mut app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let asked = Instant::now();
    let waiter = app.spawn_waiter("jobs", 3000);
    app.wait_for_waiters(1).await;
    // The subscriber loses its connection and wakes the waiter, whose retries meet no Redis:
    // it waits on until its own deadline.
    app.redis.stop();
    let reply = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter answers instead of hanging")
        .expect("task");
    let took = asked.elapsed();
    reply.assert_problem(503, "redis_unavailable");
    assert!(
        took >= Duration::from_millis(2900),
        "answered before its deadline: {took:?}"
    );
}

#[tokio::test]
async fn a_waiter_that_meets_a_frozen_redis_is_granted_when_the_lock_frees() {
    let app = spawn_app().await;
    // The holder stops heartbeating: its lease runs out 2 s from now.
    app.lease("frees", json!({"ttl_ms": 2000})).await;
    let waiter = app.spawn_waiter("frees", 10_000);
    app.wait_for_waiters(1).await;
    // Frozen across the expiry: the waiter's retry then meets no answer (the Redis timeout
    // is 1 s in these tests), and it waits on.
    app.redis.signal(nix::sys::signal::Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(3600)).await;
    app.redis.signal(nix::sys::signal::Signal::SIGCONT);
    let reply = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter answers")
        .expect("task");
    reply.assert_status(201);
}

#[tokio::test]
async fn a_redis_that_stops_answering_gives_503_in_about_a_second() {
    let app = spawn_app().await;
    app.lease("warm", json!({})).await;
    app.redis.signal(nix::sys::signal::Signal::SIGSTOP);
    let started = Instant::now();
    let reply = app.acquire("jobs", json!({})).await;
    let took = started.elapsed();
    app.redis.signal(nix::sys::signal::Signal::SIGCONT);
    reply.assert_problem(503, "redis_unavailable");
    // The server's Redis timeout is 1 s in these tests.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "took {took:?}"
    );
}

#[tokio::test]
async fn calls_beyond_the_cap_wait_their_turn_and_are_refused_when_redis_is_too_far_behind() {
    // Two calls in flight at most: with Redis frozen, two requests wait on it, two more wait
    // for their turn until the first two give up (1 s), and the last two cannot get a turn
    // before their own second is up.
    let app = spawn_app_with(AppOptions {
        calls_in_flight: 2,
        ..AppOptions::default()
    })
    .await;
    app.lease("warm", json!({})).await;
    app.redis.signal(nix::sys::signal::Signal::SIGSTOP);
    let started = Instant::now();
    let app = &app;
    let replies = futures_util::future::join_all(
        (0..6).map(|i| async move { app.acquire(&format!("flood-{i}"), json!({})).await }),
    )
    .await;
    let took = started.elapsed();
    app.redis.signal(nix::sys::signal::Signal::SIGCONT);
    for reply in &replies {
        reply.assert_problem(503, "redis_unavailable");
        assert!(reply.header("retry-after").is_some());
    }
    let too_busy = replies
        .iter()
        .filter(|r| {
            r.body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("too busy"))
        })
        .count();
    assert!(too_busy >= 2, "{too_busy} refused as too busy: {replies:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    // Nothing was sent for them: once Redis is back, the names are free.
    for i in 0..6 {
        app.lease(&format!("flood-{i}"), json!({})).await;
    }
}

// Found by the safety harness (partition).
#[tokio::test]
async fn a_force_release_answered_503_does_not_happen_later() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    app.redis.signal(Signal::SIGSTOP);
    let forced = app.force_release("jobs", Some(ADMIN_TOKEN)).await;
    // The script now sits in the frozen Redis's input; it runs when Redis wakes, past its
    // deadline, and must change nothing.
    app.redis.signal(Signal::SIGCONT);
    forced.assert_problem(503, "redis_unavailable");
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    assert_eq!(holder_of(&app, "jobs").await["lease_id"], lease.id);
}

#[tokio::test]
async fn a_fair_waiter_and_a_candidate_asking_while_redis_is_frozen_are_granted_once_it_answers() {
    let app = spawn_app().await;
    // Frozen before they ask: the first Redis call each makes (the fair queue's length, read
    // for `--max-fair-queue`) meets no answer within the 1 s Redis timeout of these tests.
    app.redis.signal(nix::sys::signal::Signal::SIGSTOP);
    let fair = app.spawn_post(
        "/v1/locks/line/leases?wait_ms=8000",
        json!({"kind": "fair"}),
    );
    let campaign = app.spawn_post(
        "/v1/elections/el/candidates?wait_ms=8000",
        json!({"value": "a"}),
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    app.redis.signal(nix::sys::signal::Signal::SIGCONT);
    for (what, task) in [("fair", fair), ("campaign", campaign)] {
        let reply = tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("answered")
            .expect("task");
        assert_eq!(reply.status, 201, "{what}: {}", reply.body);
    }
}
