//! What a lease watch tells its holder before `lost` (issue 56): `expiring` at the slack and
//! `renewed` after a late heartbeat, `degraded` within a second of a frozen Redis and
//! `recovered` after, `contended` per change in who waits; every event with an `id:`, and a
//! watch opened again with `Last-Event-ID` counting on and telling what still stands.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal as Unix;
use serde_json::{Value, json};

use crate::helpers::{Watch, spawn_app};

const SOON: Duration = Duration::from_secs(10);

/// The data of the next `kind` event, and its id.
async fn told(watch: &mut Watch, kind: &str) -> (Value, String) {
    let event = watch
        .until(kind, SOON)
        .await
        .unwrap_or_else(|| panic!("the watch ended before `{kind}`"));
    let data = serde_json::from_str(&event.data).expect("JSON data");
    (data, event.id)
}

#[tokio::test]
async fn expiring_comes_at_the_slack_and_a_late_heartbeat_ends_it_with_renewed() {
    let app = spawn_app().await;
    let lease = app.lease("slack", json!({"ttl_ms": 1500})).await;
    let mut watch = app
        .watch_with(&lease, &lease.token, "?expiring_slack_ms=600", None)
        .await
        .expect("watch");
    let opened = Instant::now();
    let (expiring, id) = told(&mut watch, "expiring").await;
    let due = Duration::from_millis(900);
    let at = opened.elapsed();
    assert!(at + Duration::from_millis(50) >= due, "told early: {at:?}");
    let remaining = expiring["remaining_ms"].as_u64().expect("remaining_ms");
    assert!(remaining <= 600, "{expiring}");
    assert!(expiring["valid_until"].is_string(), "{expiring}");
    assert_eq!(expiring["lease_id"], lease.id.as_str());
    assert_eq!(id, "1", "the first event's id");
    println!(
        "expiring: told {:?} after the slack began",
        at.saturating_sub(due)
    );

    app.heartbeat(&lease, json!({})).await.assert_status(200);
    let (renewed, id) = told(&mut watch, "renewed").await;
    assert!(renewed["valid_until"].is_string(), "{renewed}");
    assert_eq!(id, "2");
    app.release(&lease, true).await.assert_status(200);
    let (lost, id) = told(&mut watch, "lost").await;
    assert_eq!(lost["reason"], "released");
    assert_eq!(id, "3");
}

#[tokio::test]
async fn a_slack_of_zero_is_refused_with_a_clear_problem() {
    let app = spawn_app().await;
    let lease = app.lease("zero-slack", json!({"ttl_ms": 60_000})).await;
    match app
        .watch_with(&lease, &lease.token, "?expiring_slack_ms=0", None)
        .await
    {
        Err(reply) => reply.assert_problem(400, "invalid_query"),
        Ok(_) => panic!("a slack of 0 opened a watch"),
    };
}

#[tokio::test]
async fn contended_says_when_someone_waits_and_when_nobody_does_any_more() {
    let app = spawn_app().await;
    let lease = app.lease("wanted", json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    let waiter = app.spawn_waiter("wanted", 1500);
    let (contended, _) = told(&mut watch, "contended").await;
    assert_eq!(contended["waiters"], 1, "{contended}");
    // The waiter gives up at its deadline: nobody waits any more.
    waiter.await.expect("waiter").assert_status(409);
    let (contended, _) = told(&mut watch, "contended").await;
    assert_eq!(contended["waiters"], 0, "{contended}");
}

#[tokio::test]
async fn a_fair_lock_holder_hears_of_the_tickets_in_line() {
    let app = spawn_app().await;
    let lease = app
        .lease("fair-wanted", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    let ticket = app
        .ticket("fair-wanted", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let (contended, _) = told(&mut watch, "contended").await;
    assert_eq!(contended["waiters"], 1, "{contended}");
    app.leave(&ticket).await;
}

#[tokio::test]
async fn a_frozen_redis_gives_degraded_within_a_second_and_recovered_after() {
    let app = spawn_app().await;
    let lease = app.lease("frozen", json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    watch.assert_quiet(Duration::from_millis(300)).await;
    let frozen = Instant::now();
    app.redis.signal(Unix::SIGSTOP);
    let (degraded, _) = told(&mut watch, "degraded").await;
    let notice = frozen.elapsed();
    app.redis.signal(Unix::SIGCONT);
    assert!(degraded["since"].is_string(), "{degraded}");
    assert!(degraded["valid_until"].is_string(), "{degraded}");
    assert!(notice < Duration::from_secs(3), "degraded after {notice:?}");
    println!("degraded: told {notice:?} after Redis froze");
    let (recovered, _) = told(&mut watch, "recovered").await;
    assert!(recovered["valid_until"].is_string(), "{recovered}");
    app.release(&lease, true).await.assert_status(200);
    let (lost, _) = told(&mut watch, "lost").await;
    assert_eq!(lost["reason"], "released");
}

#[tokio::test]
async fn a_watch_opened_again_counts_on_and_tells_what_still_stands() {
    let app = spawn_app().await;
    let lease = app.lease("resumed", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("resumed", 3000);
    let mut first = app.watch(&lease).await;
    let (_, id) = told(&mut first, "contended").await;
    drop(first);
    // The client reconnects with the last id it read: the count goes on, and the waiter it
    // was told of is told again (it still waits).
    let mut again = app
        .watch_with(&lease, &lease.token, "", Some(&id))
        .await
        .expect("watch");
    let (contended, next) = told(&mut again, "contended").await;
    assert_eq!(contended["waiters"], 1);
    assert_eq!(
        next.parse::<u64>().expect("a count"),
        id.parse::<u64>().expect("a count") + 1
    );
    app.release(&lease, true).await.assert_status(200);
    assert_eq!(waiter.await.expect("waiter").status, 201);
}
