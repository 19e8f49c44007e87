//! Admin force release: guarded by the admin token, wakes waiters, invalidates old leases; and
//! a semaphore cleared or given a new limit.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, Lease, next_event, spawn_app, spawn_app_with};

#[tokio::test]
async fn force_release_needs_the_admin_token() {
    let app = spawn_app().await;
    app.lease("jobs", json!({})).await;
    let missing = app.force_release("jobs", None).await;
    missing.assert_problem(401, "admin_token_required");
    app.force_release("jobs", Some("wrong-token-0123456789"))
        .await
        .assert_problem(403, "admin_token_invalid");
    let lease = app.lease("other", json!({})).await;
    app.force_release("jobs", Some(&lease.token))
        .await
        .assert_problem(403, "admin_token_invalid");
    assert_eq!(app.inspect_lock("jobs").await.body["held"], true);
}

#[tokio::test]
async fn admin_routes_are_off_without_a_configured_token() {
    let app = spawn_app_with(AppOptions {
        admin_token: None,
        ..Default::default()
    })
    .await;
    app.lease("jobs", json!({})).await;
    app.force_release("jobs", Some(ADMIN_TOKEN))
        .await
        .assert_problem(403, "admin_disabled");
}

#[tokio::test]
async fn force_release_frees_the_lock_wakes_waiters_and_kills_old_leases() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let stuck = app
        .lease(
            "jobs",
            json!({"ttl_ms": 3_600_000, "holder": "stuck-worker"}),
        )
        .await;
    app.acquire_with("jobs", 0, json!({}), Some(&stuck.token))
        .await
        .assert_status(200);
    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;

    let reply = app.force_release("jobs", Some(ADMIN_TOKEN)).await;
    reply.assert_status(200);
    assert_eq!(reply.body["released"], true);
    let removed = &reply.body["removed"][0];
    assert_eq!(removed["lease_id"], stuck.id);
    assert_eq!(removed["holder"], "stuck-worker");
    assert_eq!(removed["reentry_count"], 2);

    let event = next_event(&mut events, "force_released").await;
    assert_eq!(event["lease_ids"], json!([stuck.id]));
    assert_eq!(event["reason"], "stuck");

    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter woke")
        .expect("task");
    granted.assert_status(201);

    let lost = app.heartbeat(&stuck, json!({})).await;
    lost.assert_problem(410, "lease_lost");
    assert_eq!(lost.body["reason"], "force_released");
    app.release(&stuck, false)
        .await
        .assert_problem(410, "lease_lost");
    assert_eq!(
        app.inspect_lease(&stuck).await.body["state"],
        "force_released"
    );
}

#[tokio::test]
async fn force_releasing_a_free_lock_says_so() {
    let app = spawn_app().await;
    let reply = app.force_release("idle", Some(ADMIN_TOKEN)).await;
    reply.assert_status(200);
    assert_eq!(reply.body["released"], false);
    assert_eq!(reply.body["removed"], json!([]));
}

#[tokio::test]
async fn force_release_works_for_read_write_and_fair_locks() {
    let app = spawn_app().await;
    let r1 = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 3_600_000}))
        .await;
    let r2 = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 3_600_000}))
        .await;
    let writer = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=20000",
        json!({"kind": "write"}),
    );
    app.wait_for_waiters(1).await;
    let reply = app.force_release("doc", Some(ADMIN_TOKEN)).await;
    assert_eq!(reply.body["removed"].as_array().map(Vec::len), Some(2));
    writer.await.expect("task").assert_status(201);
    for lease in [&r1, &r2] {
        app.heartbeat(lease, json!({}))
            .await
            .assert_problem(410, "lease_lost");
    }

    let holder = app
        .lease("fifo", json!({"kind": "fair", "ttl_ms": 3_600_000}))
        .await;
    let next = app.spawn_post(
        "/v1/locks/fifo/leases?wait_ms=20000",
        json!({"kind": "fair"}),
    );
    app.wait_for_waiters(1).await;
    app.force_release("fifo", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let granted = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("woken")
        .expect("task");
    granted.assert_status(201);
    app.release(&holder, false)
        .await
        .assert_problem(410, "lease_lost");
}

/// Found by the official clients: a force release listed what it removed without when each
/// hold began.
#[tokio::test]
async fn a_force_release_says_when_each_removed_hold_began() {
    let app = crate::helpers::spawn_app().await;
    app.lease("stuck", serde_json::json!({"holder": "job"}))
        .await;
    let forced = app
        .force_release("stuck", Some(crate::helpers::ADMIN_TOKEN))
        .await;
    forced.assert_status(200);
    let acquired_at = forced.body["removed"][0]["acquired_at"].as_str();
    assert!(
        acquired_at.is_some_and(|at| at.ends_with('Z')),
        "{}",
        forced.body
    );
}

#[tokio::test]
async fn an_admin_can_clear_a_semaphore_and_change_its_limit() {
    let app = spawn_app().await;
    let held = app
        .acquire_permits("pool", 0, json!({"limit": 3, "permits": 2}))
        .await;
    held.assert_status(201);
    let changed = app
        .admin(
            reqwest::Method::PUT,
            "/v1/admin/semaphores/pool/limit",
            Some(json!({"limit": 5})),
        )
        .await;
    changed.assert_status(200);
    assert_eq!(changed.body["previous"], 3);
    assert_eq!(changed.body["available"], 3);
    app.acquire_permits("pool", 0, json!({"limit": 3}))
        .await
        .assert_problem(409, "limit_mismatch");
    app.acquire_permits("pool", 0, json!({"limit": 5, "permits": 3}))
        .await
        .assert_status(201);
    let cleared = app
        .admin(
            reqwest::Method::DELETE,
            "/v1/admin/semaphores/pool?clear=true&reason=resize",
            None,
        )
        .await;
    cleared.assert_status(200);
    assert_eq!(cleared.body["removed"].as_array().map(Vec::len), Some(2));
    app.get("/v1/semaphores/pool")
        .await
        .assert_problem(404, "lock_not_found");
    let old = Lease::from_reply("pool", &held);
    let gone = app
        .get(&format!("/v1/semaphores/pool/leases/{}", old.id))
        .await;
    assert_eq!(gone.body["state"], "force_released");
    app.acquire_permits("pool", 0, json!({"limit": 2}))
        .await
        .assert_status(201);
    app.admin(
        reqwest::Method::PUT,
        "/v1/admin/semaphores/nothing/limit",
        Some(json!({"limit": 5})),
    )
    .await
    .assert_problem(404, "lock_not_found");
}
