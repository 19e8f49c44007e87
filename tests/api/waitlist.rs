//! Waiters of every kind, recorded in Redis: every instance lists every waiting request (who,
//! since when, what it wants, on which instance), and a 409 says when a waiting writer is why.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Reply, TestApp, spawn_app};

/// Polls `path` until `done` holds (bounded).
async fn until(app: &TestApp, path: &str, done: impl Fn(&Value) -> bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = app.get(path).await;
        if reply.status == 200 && done(&reply.body) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "timed out on {path}: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn waiting(body: &Value) -> &[Value] {
    body["waiting"].as_array().map_or(&[], Vec::as_slice)
}

#[tokio::test]
async fn a_waiter_on_one_instance_is_listed_by_another_and_leaves_when_served() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let held = app.lease("jobs", json!({"holder": "first"})).await;
    let waiter = peer.spawn_post(
        "/v1/locks/jobs/leases?wait_ms=20000",
        json!({"holder": "second"}),
    );
    let lock = until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 1).await;
    let w = &waiting(&lock.body)[0];
    assert_eq!(w["holder"], "second");
    assert_eq!(w["kind"], "reentrant");
    assert!(
        w["waiting_since"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z'))
    );
    let instance = w["instance"].as_str().expect("instance");
    assert!(instance.ends_with(&format!(":{}", std::process::id())));
    assert!(lock.body["held_for_ms"].as_u64().is_some());
    assert!(lock.body["held_since"].as_str().is_some());
    // The listing counts it too.
    let list = app.get("/v1/locks").await;
    assert_eq!(list.body["locks"][0]["waiting"], 1, "{}", list.body);

    app.release(&held, false).await.assert_status(200);
    waiter.await.expect("waiter").assert_status(201);
    until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 0).await;
}

#[tokio::test]
async fn a_fifo_reader_refused_behind_a_waiting_writer_is_told_so() {
    let app = spawn_app().await;
    app.lease(
        "doc",
        json!({"kind": "read", "holder": "reader-1", "ttl_ms": 60_000}),
    )
    .await;
    let _writer = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=20000",
        json!({"kind": "write", "holder": "writer-x"}),
    );
    let lock = until(&app, "/v1/locks/doc", |b| b["waiting_count"] == 1).await;
    assert_eq!(waiting(&lock.body)[0]["kind"], "write");
    let refused = app
        .acquire("doc", json!({"kind": "read", "policy": "fifo"}))
        .await;
    refused.assert_problem(409, "lock_held");
    let detail = refused.str("detail");
    assert!(
        detail.contains("refused because writer writer-x is waiting"),
        "{detail}"
    );
    assert_eq!(refused.body["waiting_writer"]["holder"], "writer-x");
}

#[tokio::test]
async fn a_semaphore_waiter_is_listed_with_the_permits_it_wants() {
    let app = spawn_app().await;
    app.permits("gpus", json!({"limit": 2, "permits": 2, "ttl_ms": 60_000}))
        .await;
    let _waiter = app.spawn_post(
        "/v1/semaphores/gpus/leases?wait_ms=20000",
        json!({"limit": 2, "permits": 1, "holder": "trainer-3"}),
    );
    let sem = until(&app, "/v1/semaphores/gpus", |b| b["waiting_count"] == 1).await;
    let w = &waiting(&sem.body)[0];
    assert_eq!(w["holder"], "trainer-3");
    assert_eq!(w["kind"], "semaphore");
    assert_eq!(w["permits"], 1);
    let list = app.get("/v1/locks").await;
    assert_eq!(list.body["locks"][0]["waiting"], 1, "{}", list.body);
}
