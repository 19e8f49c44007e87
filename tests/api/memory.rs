//! Redis memory: when Redis is full, what frees or keeps a lease (release, heartbeat, force
//! release, inspection) still works and acquires are refused with 503 `redis_full` and
//! `Retry-After`; `/readyz` and the metrics say when memory runs short.

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

/// Sets Redis's `maxmemory` (bytes; 0: no limit) with the `noeviction` policy.
async fn set_maxmemory(app: &TestApp, bytes: u64) {
    let mut conn = app.redis.conn().await;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .arg("maxmemory")
        .arg(bytes)
        .query_async::<()>(&mut conn)
        .await
        .expect("CONFIG SET");
}

#[tokio::test]
async fn a_full_redis_still_releases_and_renews_and_refuses_acquires_with_503() {
    let app = spawn_app().await;
    let lock = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let shared = app
        .lease("reports", json!({"kind": "read", "ttl_ms": 60_000}))
        .await;
    let permits = app
        .permits("gpus", json!({"limit": 4, "permits": 2, "ttl_ms": 60_000}))
        .await;
    app.lease("stuck", json!({"ttl_ms": 60_000})).await;
    set_maxmemory(&app, 1).await;

    let refused = app.acquire("other", json!({})).await;
    refused.assert_problem(503, "redis_full");
    assert!(
        refused.header("retry-after").is_some(),
        "{:?}",
        refused.headers
    );
    app.acquire_permits("gpus", 0, json!({"limit": 4, "permits": 1}))
        .await
        .assert_problem(503, "redis_full");

    app.heartbeat(&lock, json!({})).await.assert_status(200);
    app.heartbeat(&permits, json!({})).await.assert_status(200);
    app.inspect_lease(&lock).await.assert_status(200);
    app.inspect_lock("jobs").await.assert_status(200);
    app.release(&lock, true).await.assert_status(200);
    app.release(&shared, true).await.assert_status(200);
    app.release(&permits, true).await.assert_status(200);
    app.force_release("stuck", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);

    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    assert_eq!(
        ready.body["redis_memory"]["state"], "full",
        "{}",
        ready.body
    );

    set_maxmemory(&app, 0).await;
    app.acquire("other", json!({})).await.assert_status(201);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.body["redis_memory"]["state"], "ok", "{}", ready.body);
}

#[tokio::test]
async fn readyz_and_the_metrics_say_when_redis_memory_runs_short() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    // Room for a few more writes, but above the 80 % mark.
    set_maxmemory(&app, used + used / 10).await;
    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    assert_eq!(
        ready.body["redis_memory"]["state"], "short",
        "{}",
        ready.body
    );
    assert!(ready.body["redis_memory"]["used_bytes"].as_u64() > Some(0));
    let metrics = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let ratio: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("leasehold_redis_memory_used_ratio "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ratio in:\n{metrics}"));
    assert!(ratio > 0.8 && ratio < 1.0, "{ratio}");
    assert!(metrics.contains("leasehold_redis_memory_max_bytes "));
}
