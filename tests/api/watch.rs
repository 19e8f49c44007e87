//! Lease watches: the holder hears `lost` (with the reason) the moment its lease ends, and
//! nothing while it holds; the token proves the right to watch; watches are capped per
//! instance and end when the server stops.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, AppOptions, Lease, spawn_app, spawn_app_with};

const SOON: Duration = Duration::from_secs(10);

/// Reads the watch's `lost` event (skipping the signals before it: `contended` when someone
/// waits, `expiring` before an expiry).
async fn lost(watch: &mut crate::helpers::Watch) -> Value {
    let event = watch
        .until("lost", SOON)
        .await
        .expect("a lost event before the end");
    let body: Value = serde_json::from_str(&event.data).expect("JSON data");
    assert!(
        watch.next(SOON).await.is_none(),
        "the stream ends after lost"
    );
    body
}

#[tokio::test]
async fn a_force_release_is_pushed_to_the_watching_holder_at_once() {
    let app = spawn_app().await;
    let lease = app.lease("watched", json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    watch.assert_quiet(Duration::from_millis(300)).await;

    let forced_at = Instant::now();
    app.force_release("watched", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let body = lost(&mut watch).await;
    let latency = forced_at.elapsed();
    assert_eq!(body["reason"], "force_released");
    assert_eq!(body["lease_id"], lease.id.as_str());
    assert_eq!(body["lock"], "watched");
    assert!(body["ended_at"].is_string(), "{body}");
    // A figure for the record, not a timed assertion.
    println!("watch latency: force-release answered -> lost event read: {latency:?}");
}

#[tokio::test]
async fn a_release_ends_the_watch_with_released() {
    let app = spawn_app().await;
    let lease = app.lease("released", json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    app.release(&lease, true).await.assert_status(200);
    assert_eq!(lost(&mut watch).await["reason"], "released");
}

#[tokio::test]
async fn a_fair_lock_release_with_waiters_still_reaches_the_watch() {
    let app = spawn_app().await;
    let lease = app
        .lease("fair-watch", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let ticket = app
        .ticket("fair-watch", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    app.release(&lease, true).await.assert_status(200);
    assert_eq!(lost(&mut watch).await["reason"], "released");
    app.leave(&ticket).await;
}

#[tokio::test]
async fn heartbeats_keep_the_watch_quiet_and_expiry_ends_it() {
    let app = spawn_app().await;
    let lease = app.lease("expiring", json!({"ttl_ms": 800})).await;
    // (A slack of 1 ms: this watch is about heartbeats, not the warning before an expiry.)
    let mut watch = app
        .watch_with(&lease, &lease.token, "?expiring_slack_ms=1", None)
        .await
        .expect("watch");
    // Heartbeats move the expiry past the first one: the watch re-arms and stays quiet.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        app.heartbeat(&lease, json!({})).await.assert_status(200);
    }
    watch.assert_quiet(Duration::from_millis(300)).await;
    // No more heartbeats: the lease expires, and nobody publishes that; the timer finds it.
    let body = lost(&mut watch).await;
    assert_eq!(body["reason"], "expired");
}

#[tokio::test]
async fn semaphore_leases_can_be_watched_too() {
    let app = spawn_app().await;
    let lease = app
        .permits("pool", json!({"limit": 3, "permits": 2, "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    app.admin(reqwest::Method::DELETE, "/v1/admin/semaphores/pool", None)
        .await
        .assert_status(200);
    assert_eq!(lost(&mut watch).await["reason"], "force_released");
}

#[tokio::test]
async fn only_the_lease_token_opens_a_watch_of_a_live_lease() {
    let app = spawn_app().await;
    let lease = app.lease("guarded", json!({"ttl_ms": 60_000})).await;
    let other = app.lease("elsewhere", json!({})).await;
    let response = app
        .http
        .get(app.url(&format!("{}/watch", lease.path)))
        .send()
        .await
        .expect("request");
    crate::helpers::Reply::read(response)
        .await
        .assert_problem(401, "token_missing");
    let refused = app
        .watch_as(&lease, &other.token)
        .await
        .err()
        .expect("refused");
    refused.assert_problem(403, "token_mismatch");
    let unknown = Lease {
        id: "0190c5f0-0000-7000-8000-000000000000".into(),
        path: "/v1/locks/guarded/leases/0190c5f0-0000-7000-8000-000000000000".into(),
        ..lease.clone()
    };
    let refused = app
        .watch_as(&unknown, &lease.token)
        .await
        .err()
        .expect("refused");
    refused.assert_problem(404, "lease_not_found");

    app.release(&lease, true).await.assert_status(200);
    let refused = app
        .watch_as(&lease, &lease.token)
        .await
        .err()
        .expect("refused");
    refused.assert_problem(410, "lease_lost");
    assert_eq!(refused.body["reason"], "released");
}

#[tokio::test]
async fn watches_are_capped_per_instance_and_end_on_shutdown() {
    let app = spawn_app_with(AppOptions {
        max_watches: 1,
        ..AppOptions::default()
    })
    .await;
    let first = app.lease("one", json!({"ttl_ms": 60_000})).await;
    let second = app.lease("two", json!({"ttl_ms": 60_000})).await;
    let watch = app.watch(&first).await;
    let full = app
        .watch_as(&second, &second.token)
        .await
        .err()
        .expect("refused");
    full.assert_problem(503, "too_many_watches");
    assert!(full.header("retry-after").is_some());

    // A watch whose client went away gives its place back.
    drop(watch);
    let deadline = Instant::now() + SOON;
    let mut watch = loop {
        match app.watch_as(&second, &second.token).await {
            Ok(watch) => break watch,
            Err(reply) => {
                reply.assert_problem(503, "too_many_watches");
                assert!(Instant::now() < deadline, "the place never came back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    app.shutdown.cancel();
    // The stream ends without a `lost`: the lease still holds as far as anyone knows.
    let end = watch.next(SOON).await;
    assert!(end.is_none(), "no lost on shutdown: {end:?}");
}
