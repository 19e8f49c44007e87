//! Semaphores with expirable permits: never above the limit, permits back on expiry, sizes
//! capped; a name is a semaphore or a lock, and can change once its last holder is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, Lease, Reply, TestApp, spawn_app};

fn lease(name: &str, reply: &Reply) -> Lease {
    Lease::from_reply(name, reply)
}

async fn heartbeat(app: &TestApp, lease: &Lease) -> Reply {
    app.heartbeat(lease, json!({})).await
}

async fn release(app: &TestApp, lease: &Lease) -> Reply {
    app.release(lease, false).await
}

#[tokio::test]
async fn fifty_clients_never_exceed_the_limit() {
    let app = Arc::new(spawn_app().await);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (app, inside, most) = (app.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let reply = app
                .acquire_permits(
                    "pool",
                    30_000,
                    json!({"limit": 5, "holder": format!("c{i}")}),
                )
                .await;
            let held = lease("pool", &reply);
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            release(&app, &held).await.assert_status(200);
            held.fencing_token
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.push(task.await.expect("client"));
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=5).contains(&most), "at most 5 at once, saw {most}");
    let view = app.get("/v1/semaphores/pool").await;
    assert_eq!(view.body["used"], 0);
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 50, "every lease has its own fencing token");
    assert_eq!(view.u64("fencing_counter"), fences[49]);
}

#[tokio::test]
async fn permits_come_back_when_a_lease_expires() {
    let app = spawn_app().await;
    let short = app
        .permits("pool", json!({"limit": 2, "permits": 2, "ttl_ms": 200}))
        .await;
    app.acquire_permits("pool", 0, json!({"limit": 2}))
        .await
        .assert_problem(409, "no_permits");
    // Nobody releases: the waiter is served when the short lease's permits expire.
    let reply = app
        .acquire_permits("pool", 5_000, json!({"limit": 2}))
        .await;
    reply.assert_status(201);
    heartbeat(&app, &short)
        .await
        .assert_problem(410, "lease_lost");
    let view = app
        .get(&format!("/v1/semaphores/pool/leases/{}", short.id))
        .await;
    assert_eq!(view.body["state"], "expired");
}

#[tokio::test]
async fn a_release_wakes_a_waiter_through_pub_sub() {
    let app = spawn_app().await;
    let held = app
        .permits("pool", json!({"limit": 1, "ttl_ms": 60_000}))
        .await;
    let waiter = app.spawn_post(
        "/v1/semaphores/pool/leases?wait_ms=20000",
        json!({"limit": 1}),
    );
    app.wait_for_waiters(1).await;
    release(&app, &held).await.assert_status(200);
    let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("task");
    reply.assert_status(201);
}

#[tokio::test]
async fn every_party_must_agree_on_the_limit() {
    let app = spawn_app().await;
    app.acquire_permits("pool", 0, json!({"limit": 3}))
        .await
        .assert_status(201);
    let reply = app.acquire_permits("pool", 0, json!({"limit": 4})).await;
    reply.assert_problem(409, "limit_mismatch");
    assert_eq!(reply.body["limit"], 3);
    app.acquire_permits("pool", 0, json!({}))
        .await
        .assert_problem(422, "invalid_body");
    app.acquire_permits("pool", 0, json!({"limit": 3, "permits": 4}))
        .await
        .assert_problem(422, "invalid_body");
}

#[tokio::test]
async fn inspecting_a_semaphore_shows_limit_use_and_holders() {
    let app = spawn_app().await;
    app.get("/v1/semaphores/pool")
        .await
        .assert_problem(404, "lock_not_found");
    let held = lease(
        "pool",
        &app.acquire_permits(
            "pool",
            0,
            json!({"limit": 4, "permits": 3, "holder": "batch"}),
        )
        .await,
    );
    let view = app.get("/v1/semaphores/pool").await;
    view.assert_status(200);
    assert_eq!(view.body["limit"], 4);
    assert_eq!(view.body["used"], 3);
    assert_eq!(view.body["available"], 1);
    assert_eq!(view.body["holders"][0]["lease_id"], held.id);
    assert_eq!(view.body["holders"][0]["permits"], 3);
    assert_eq!(view.body["holders"][0]["holder"], "batch");
    heartbeat(&app, &held).await.assert_status(200);
    let one = app
        .get(&format!("/v1/semaphores/pool/leases/{}", held.id))
        .await;
    assert_eq!(one.body["permits"], 3);
    assert_eq!(one.body["state"], "held");
}

#[tokio::test]
async fn force_release_returns_every_permit() {
    let app = spawn_app().await;
    let held = app.permits("pool", json!({"limit": 1})).await;
    let reply = app
        .admin(reqwest::Method::DELETE, "/v1/admin/semaphores/pool", None)
        .await;
    reply.assert_status(200);
    assert_eq!(reply.body["removed"][0]["lease_id"], held.id);
    heartbeat(&app, &held)
        .await
        .assert_problem(410, "lease_lost");
    app.acquire_permits("pool", 0, json!({"limit": 1}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn a_semaphore_and_a_lock_cannot_share_a_name() {
    let app = spawn_app().await;
    app.lease("shared", json!({})).await;
    app.acquire_permits("shared", 0, json!({"limit": 2}))
        .await
        .assert_problem(409, "kind_conflict");
    app.acquire_permits("pool", 0, json!({"limit": 2}))
        .await
        .assert_status(201);
    app.acquire("pool", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
}

#[tokio::test]
async fn a_semaphore_whose_permits_are_back_can_be_a_lock_again() {
    let app = spawn_app().await;
    let lease = app.permits("pool", json!({"limit": 3})).await;
    app.acquire("pool", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
    app.release(&lease, false).await.assert_status(200);
    let lock = app.lease("pool", json!({})).await;
    assert!(lock.fencing_token > lease.fencing_token);
    // And back to a semaphore, with any limit, once the lock is free.
    app.release(&lock, false).await.assert_status(200);
    app.acquire_permits("pool", 0, json!({"limit": 7}))
        .await
        .assert_status(201);
}

// Found by the safety harness (a long run: WRONGTYPE on a name a semaphore had since taken).
#[tokio::test]
async fn a_lease_whose_name_became_a_semaphore_is_lost_not_an_error() {
    let app = spawn_app().await;
    for kind in ["reentrant", "read"] {
        let name = format!("x-{kind}");
        let lease = app
            .lease(&name, json!({"kind": kind, "ttl_ms": 60_000}))
            .await;
        app.force_release(&name, Some(ADMIN_TOKEN))
            .await
            .assert_status(200);
        app.acquire_permits(&name, 0, json!({"limit": 2}))
            .await
            .assert_status(201);
        app.heartbeat(&lease, json!({}))
            .await
            .assert_problem(410, "lease_lost");
        app.release(&lease, true)
            .await
            .assert_problem(410, "lease_lost");
        app.acquire_with(&name, 0, json!({}), Some(&lease.token))
            .await
            .assert_problem(410, "lease_lost");
        assert_eq!(
            app.inspect_lease(&lease).await.body["state"],
            "force_released"
        );
    }
}

#[tokio::test]
async fn semaphore_sizes_are_capped() {
    let app = spawn_app().await;
    let started = Instant::now();
    app.acquire_permits("huge", 0, json!({"limit": 100_000}))
        .await
        .assert_problem(422, "invalid_body");
    let biggest = app
        .acquire_permits("big", 0, json!({"limit": 1000, "permits": 1000}))
        .await;
    biggest.assert_status(201);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
