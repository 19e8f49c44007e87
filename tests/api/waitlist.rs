//! WaitRegistry of every kind, recorded in Redis: every instance lists every waiting request (who,
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

#[tokio::test]
async fn many_waiters_are_listed_together_with_an_expiring_list_and_all_leave_when_served() {
    let app = spawn_app().await;
    let first = app.lease("jobs", json!({})).await;
    let waiters: Vec<_> = (0..20).map(|_| app.spawn_waiter("jobs", 20_000)).collect();
    let lock = until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 20).await;
    let mut ids: Vec<&str> = waiting(&lock.body)
        .iter()
        .filter_map(|w| w["lease_id"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "each waiter listed once: {}", lock.body);
    // The list's hash lives as long as its longest entry may: the wait (20 s) and 5 s slack.
    let mut redis = app.redis.conn().await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("{jobs}:leasehold:waiting")
        .query_async(&mut redis)
        .await
        .expect("pttl");
    assert!((15_000..=25_000).contains(&pttl), "pttl {pttl}");

    app.release(&first, false).await.assert_status(200);
    let mut pending = waiters;
    while !pending.is_empty() {
        let (reply, _, rest) = futures_util::future::select_all(pending).await;
        pending = rest;
        let lease = crate::helpers::Lease::from_reply("jobs", &reply.expect("task"));
        app.release(&lease, false).await.assert_status(200);
    }
    until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 0).await;
    let left: bool = redis::cmd("EXISTS")
        .arg("{jobs}:leasehold:waiting")
        .query_async(&mut redis)
        .await
        .expect("exists");
    assert!(!left, "every entry left the list");
}

#[tokio::test]
async fn a_waiter_whose_client_goes_away_leaves_the_list() {
    let app = spawn_app().await;
    let _held = app.lease("jobs", json!({})).await;
    let impatient = leasehold::client::http_builder().build().expect("client");
    let url = app.url("/v1/locks/jobs/leases?wait_ms=20000");
    let gone = tokio::spawn(async move { impatient.post(url).send().await });
    until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 1).await;
    // The client goes away mid-wait: its request (and connection) are dropped.
    gone.abort();
    let _ = gone.await;
    app.wait_for_waiters(0).await;
    until(&app, "/v1/locks/jobs", |b| b["waiting_count"] == 0).await;
    let exists: bool = redis::cmd("EXISTS")
        .arg("{jobs}:leasehold:waiting")
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("exists");
    assert!(!exists, "its entry was removed, not left to lapse");
}
