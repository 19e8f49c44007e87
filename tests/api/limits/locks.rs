//! Limits per lock (waiters, fair queue length, reentry depth) and an admin reason's length.

use std::time::Instant;

use leasehold::limits::LockLimits;
use serde_json::json;

use crate::helpers::{AppOptions, spawn_app_with};

fn per_lock(per_lock: LockLimits) -> AppOptions {
    AppOptions {
        per_lock,
        ..AppOptions::default()
    }
}

#[tokio::test]
async fn a_full_waiter_cap_answers_503() {
    let app = spawn_app_with(per_lock(LockLimits {
        waiters_per_lock: 2,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    app.lease("hot", json!({"ttl_ms": 60_000})).await;
    let waiters = [
        app.spawn_waiter("hot", 5_000),
        app.spawn_waiter("hot", 5_000),
    ];
    app.wait_for_waiters(2).await;
    let started = Instant::now();
    let refused = app.acquire_with("hot", 5_000, json!({}), None).await;
    let took = started.elapsed();
    refused.assert_problem(503, "too_many_waiters");
    assert_eq!(refused.header("retry-after"), Some("1"));
    eprintln!(
        "a third waiter on a lock capped at 2: {} in {took:?}, {}",
        refused.status, refused.body
    );
    // Other locks are unaffected, and asking without waiting is fine.
    app.acquire_with("cold", 1_000, json!({}), None)
        .await
        .assert_status(201);
    app.acquire("hot", json!({}))
        .await
        .assert_problem(409, "lock_held");
    for w in waiters {
        w.abort();
    }
}

#[tokio::test]
async fn a_full_fair_queue_answers_503() {
    let app = spawn_app_with(per_lock(LockLimits {
        fair_queue: 2,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    app.lease("line", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    for _ in 0..2 {
        app.acquire_with("line", 50, json!({"kind": "fair"}), None)
            .await
            .assert_status(202);
    }
    let refused = app
        .acquire_with("line", 50, json!({"kind": "fair"}), None)
        .await;
    refused.assert_problem(503, "queue_full");
    eprintln!(
        "a third ticket in a fair queue capped at 2: {}",
        refused.body
    );
}

#[tokio::test]
async fn reentry_deeper_than_the_cap_is_refused_and_not_kept() {
    let app = spawn_app_with(per_lock(LockLimits {
        reentry_depth: 3,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    let lease = app.lease("deep", json!({})).await;
    for level in 2..=3 {
        let reply = app
            .acquire_with("deep", 0, json!({}), Some(&lease.token))
            .await;
        reply.assert_status(200);
        assert_eq!(reply.u64("reentry_count"), level);
    }
    let refused = app
        .acquire_with("deep", 0, json!({}), Some(&lease.token))
        .await;
    refused.assert_problem(409, "reentry_too_deep");
    eprintln!("a fourth entry with depth cap 3: {}", refused.body);
    assert_eq!(app.inspect_lease(&lease).await.u64("reentry_count"), 3);
    // Three releases free it.
    for _ in 0..3 {
        app.release(&lease, false).await.assert_status(200);
    }
    assert_eq!(app.inspect_lock("deep").await.body["held"], false);
}

#[tokio::test]
async fn an_admin_reason_has_a_length_cap() {
    let app = spawn_app_with(AppOptions::default()).await;
    app.lease("stuck", json!({})).await;
    let long = "x".repeat(501);
    let refused = app
        .admin(
            reqwest::Method::DELETE,
            &format!("/v1/admin/locks/stuck?reason={long}"),
            None,
        )
        .await;
    refused.assert_problem(422, "reason_too_long");
    assert_eq!(app.inspect_lock("stuck").await.body["held"], true);
    app.admin(
        reqwest::Method::DELETE,
        &format!("/v1/admin/locks/stuck?reason={}", "x".repeat(500)),
        None,
    )
    .await
    .assert_status(200);
}
