//! Limits per caller: request rates (by key, or by address), quotas across instances (live
//! leases, waiting requests, event streams and lease watches), a key's own TTL and permits.

use std::time::{Duration, Instant};

use leasehold::limits::ClientLimits;
use serde_json::json;

use crate::helpers::{AppOptions, Reply, TestApp, spawn_app_with};

fn limited(clients: ClientLimits) -> AppOptions {
    AppOptions {
        clients,
        ..AppOptions::default()
    }
}

#[tokio::test]
async fn a_caller_over_its_request_rate_gets_429_with_retry_after() {
    let app = spawn_app_with(limited(ClientLimits {
        rate_per_second: 5,
        rate_burst: 5,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, one) = app
        .create_key(json!({"name": "one", "roles": ["reader"]}))
        .await;
    let (_, two) = app
        .create_key(json!({"name": "two", "roles": ["reader"]}))
        .await;
    let one = app.with_key(&one);
    let mut statuses = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let reply = one.get("/v1/locks/x").await;
        statuses.push(reply.status.as_u16());
        if reply.status == 429 {
            refused = Some(reply);
        }
    }
    eprintln!("eight requests at once, rate 5/s burst 5: {statuses:?}");
    assert_eq!(&statuses[..5], [404; 5]);
    let refused = refused.expect("a 429");
    refused.assert_problem(429, "rate_limited");
    let after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("secs");
    assert!((1..=2).contains(&after), "{after}");
    assert!(refused.body["retry_after_ms"].as_u64().expect("ms") <= 1000);
    eprintln!("  the refusal: Retry-After {after}, {}", refused.body);
    // Another key has its own budget.
    app.with_key(&two)
        .get("/v1/locks/x")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn anonymous_callers_are_limited_by_address_when_asked_on_loopback() {
    let app = spawn_app_with(limited(ClientLimits {
        rate_per_second: 3,
        rate_burst: 3,
        limit_loopback: true,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(app.get("/v1/locks/x").await.status.as_u16());
    }
    assert_eq!(statuses, [404, 404, 404, 429, 429]);
}

#[tokio::test]
async fn live_leases_per_key_hold_across_instances() {
    let app = spawn_app_with(AppOptions::default()).await;
    let twin = app.spawn_twin().await;
    let (_, secret) = app
        .create_key(json!({"name": "svc", "roles": ["client"], "quotas": {"max_leases": 2}}))
        .await;
    let (here, there) = (app.with_key(&secret), twin.with_key(&secret));
    let first = here.lease("l1", json!({"ttl_ms": 60_000})).await;
    there.lease("l2", json!({"ttl_ms": 60_000})).await;
    let refused = there.acquire("l3", json!({"ttl_ms": 60_000})).await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "live leases");
    let after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("secs");
    eprintln!(
        "a third lease with max_leases 2 (on the other instance): {} Retry-After {after}",
        refused.body
    );
    assert!(
        (59..=60).contains(&after),
        "the first lease ends in about 60 s: {after}"
    );
    // A reentry is no new lease.
    here.acquire_with("l1", 0, json!({}), Some(&first.token))
        .await
        .assert_status(200);
    // Released on one instance: room on the other.
    here.release(&first, true).await.assert_status(200);
    there.lease("l3", json!({"ttl_ms": 60_000})).await;
    // A lease whose TTL ran out stops counting by itself.
    let short = app
        .create_key(json!({"name": "short", "roles": ["client"], "quotas": {"max_leases": 1}}))
        .await
        .1;
    let short = app.with_key(&short);
    short.lease("s1", json!({"ttl_ms": 300})).await;
    short
        .acquire("s2", json!({"ttl_ms": 300}))
        .await
        .assert_problem(429, "quota_exceeded");
    tokio::time::sleep(Duration::from_millis(400)).await;
    short.lease("s2", json!({"ttl_ms": 300})).await;
}

#[tokio::test]
async fn waiting_requests_per_key_hold_across_instances() {
    let app = spawn_app_with(AppOptions::default()).await;
    let twin = app.spawn_twin().await;
    let (_, secret) = app
        .create_key(json!({"name": "svc", "roles": ["client"], "quotas": {"max_waiters": 1}}))
        .await;
    let (_, holder) = app
        .create_key(json!({"name": "holder", "roles": ["client"]}))
        .await;
    app.with_key(&holder)
        .lease("busy", json!({"ttl_ms": 60_000}))
        .await;
    let parked = app.with_key(&secret).spawn_waiter("busy", 5_000);
    app.wait_for_waiters(1).await;
    let refused = twin
        .with_key(&secret)
        .acquire_with("busy", 1_000, json!({}), None)
        .await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "waiting requests");
    eprintln!(
        "a second waiting request with max_waiters 1: {}",
        refused.body
    );
    // Not waiting is no waiter.
    twin.with_key(&secret)
        .acquire("busy", json!({}))
        .await
        .assert_problem(409, "lock_held");
    parked.abort();
}

#[tokio::test]
async fn event_streams_per_caller_are_capped() {
    let app = spawn_app_with(limited(ClientLimits {
        streams: 2,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "watcher", "roles": ["reader"]}))
        .await;
    let watcher = app.with_key(&secret);
    let first = watcher
        .http
        .get(watcher.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    let second = watcher
        .http
        .get(watcher.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let third = Reply::read(
        watcher
            .http
            .get(watcher.url("/v1/events"))
            .send()
            .await
            .expect("sse"),
    )
    .await;
    third.assert_problem(429, "quota_exceeded");
    eprintln!("a third event stream with a cap of 2: {}", third.body);
    drop(first);
    // The slot comes back when a stream's client goes.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = watcher
            .http
            .get(watcher.url("/v1/events"))
            .send()
            .await
            .expect("sse");
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn lease_watches_count_as_the_callers_event_streams() {
    let app = spawn_app_with(limited(ClientLimits {
        streams: 2,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "holder", "roles": ["client", "reader"]}))
        .await;
    let holder = app.with_key(&secret);
    let lease = holder.lease("watched", json!({"ttl_ms": 60_000})).await;
    let watch = || {
        holder
            .http
            .get(holder.url(&format!("{}/watch", lease.path)))
            .bearer_auth(&lease.token)
            .send()
    };
    let events = holder
        .http
        .get(holder.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    let first = watch().await.expect("watch");
    assert_eq!(
        (events.status().as_u16(), first.status().as_u16()),
        (200, 200)
    );
    let third = Reply::read(watch().await.expect("watch")).await;
    third.assert_problem(429, "quota_exceeded");
    assert_eq!(third.body["quota"], "event streams");
    drop((events, first));
}
#[tokio::test]
async fn a_keys_own_ttl_and_permit_bounds_apply() {
    let app: TestApp = spawn_app_with(AppOptions::default()).await;
    let (_, secret) = app
        .create_key(json!({"name": "small", "roles": ["client"], "quotas": {"max_ttl_ms": 5000, "max_permits": 2}}))
        .await;
    let small = app.with_key(&secret);
    small
        .acquire("t", json!({"ttl_ms": 6000}))
        .await
        .assert_problem(422, "invalid_ttl");
    let lease = small.acquire("t", json!({})).await;
    lease.assert_status(201);
    assert_eq!(
        lease.u64("ttl_ms"),
        5000,
        "the default TTL is cut to the key's bound"
    );
    small
        .acquire_permits("p", 0, json!({"limit": 5, "permits": 3}))
        .await
        .assert_problem(422, "invalid_body");
    small
        .acquire_permits("p", 0, json!({"limit": 5, "permits": 2}))
        .await
        .assert_status(201);
}
