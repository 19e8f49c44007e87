//! Redis memory: when Redis is full, what frees or keeps a lease (release, heartbeat, force
//! release, inspection) still works and acquires are refused with 503 `redis_full` and
//! `Retry-After`; `/readyz` and the metrics say when memory runs short; a Redis that evicts keys
//! is refused at startup.

use std::time::Duration;

use leasehold::limits::ClientLimits;
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, TestApp, spawn_app, spawn_app_with};

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
    let multi = app
        .send(
            app.http
                .post(app.url("/v1/multileases"))
                .json(&json!({"locks": [{"name": "m1"}, {"name": "m2"}], "ttl_ms": 60_000})),
        )
        .await;
    multi.assert_status(201);
    let (multi_path, multi_token) = (
        multi.header("location").expect("Location").to_owned(),
        multi.str("token"),
    );
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
    // A multilease is refused at its members; one held keeps working.
    app.send(
        app.http
            .post(app.url("/v1/multileases"))
            .json(&json!({"locks": [{"name": "m3"}, {"name": "m4"}]})),
    )
    .await
    .assert_problem(503, "redis_full");
    app.send(
        app.http
            .post(app.url(&format!("{multi_path}/heartbeat")))
            .bearer_auth(&multi_token)
            .json(&json!({})),
    )
    .await
    .assert_status(200);
    app.send(
        app.http
            .delete(app.url(&multi_path))
            .bearer_auth(&multi_token),
    )
    .await
    .assert_status(200);
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

#[tokio::test]
async fn a_semaphores_limit_ends_with_its_last_permit() {
    let app = spawn_app().await;
    let first = app.permits("pool", json!({"limit": 3})).await;
    // While a permit is out, every party must name the same limit.
    app.acquire_permits("pool", 0, json!({"limit": 5}))
        .await
        .assert_problem(409, "limit_mismatch");
    app.release(&first, true).await.assert_status(200);
    // With none out, a new limit stands.
    let reply = app
        .acquire_permits("pool", 0, json!({"limit": 5, "permits": 5}))
        .await;
    reply.assert_status(201);
    let view = app.get("/v1/semaphores/pool").await;
    assert_eq!(view.body["limit"], 5, "{}", view.body);
}

#[tokio::test]
async fn a_semaphore_nobody_uses_leaves_nothing_behind_but_its_history() {
    let app = spawn_app_with(AppOptions {
        tombstone_ms: 200,
        ..AppOptions::default()
    })
    .await;
    let lease = app.permits("idle-pool", json!({"limit": 2})).await;
    app.release(&lease, true).await.assert_status(200);
    let mut conn = app.redis.conn().await;
    // The sweepers' periodic pass (every 2 s) retires it once the tombstone time has passed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counter: i64 = redis::cmd("EXISTS")
            .arg("idle-pool")
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if counter == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never retired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state_ttl: i64 = redis::cmd("PTTL")
        .arg("{idle-pool}:leasehold")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        state_ttl > 0,
        "the state expires like a lock's: {state_ttl}"
    );
    let history_ttl: i64 = redis::cmd("PTTL")
        .arg("{idle-pool}:leasehold:history")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        history_ttl > 0 && history_ttl <= 3_600_000,
        "the history ends within the hour: {history_ttl}"
    );
    // The name is free for any use again.
    app.permits("idle-pool", json!({"limit": 7})).await;
}

#[tokio::test]
async fn a_callers_distinct_names_are_capped_and_reusing_one_is_free() {
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "ci", "roles": ["client"], "quotas": {"max_names": 2}}))
        .await;
    let ci = app.with_key(&secret);
    let a = ci.lease("a", json!({})).await;
    ci.release(&a, true).await.assert_status(200);
    ci.permits("b", json!({"limit": 2})).await;
    let refused = ci.acquire("c", json!({})).await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "names", "{}", refused.body);
    assert!(refused.header("retry-after").is_some());
    // A name it already used costs nothing more.
    ci.acquire("a", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_tenants_callers_share_one_names_quota() {
    let app = spawn_app_with(AppOptions {
        clients: ClientLimits {
            tenant_names: 3,
            ..leasehold::server::ServerConfig::new("").clients
        },
        ..AppOptions::default()
    })
    .await;
    let keys = [
        app.create_key(json!({"name": "one", "tenant": "acme", "roles": ["client"]}))
            .await
            .1,
        app.create_key(json!({"name": "two", "tenant": "acme", "roles": ["client"]}))
            .await
            .1,
    ];
    app.with_key(&keys[0]).lease("x", json!({})).await;
    app.with_key(&keys[0]).lease("y", json!({})).await;
    app.with_key(&keys[1]).lease("z", json!({})).await;
    let refused = app.with_key(&keys[1]).acquire("w", json!({})).await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "tenant names", "{}", refused.body);
    // Another tenant has its own.
    let (_, other) = app
        .create_key(json!({"name": "three", "tenant": "globex", "roles": ["client"]}))
        .await;
    app.with_key(&other)
        .acquire("w", json!({}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn a_redis_that_evicts_keys_is_refused_at_startup() {
    let redis = crate::helpers::RedisServer::start();
    let mut conn = redis.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET");
    let error = crate::helpers::serve_once(&redis)
        .await
        .expect_err("an evicting Redis is refused");
    assert!(error.to_string().contains("noeviction"), "{error}");
}

#[tokio::test]
async fn a_caller_with_quotas_on_a_full_redis_gets_503_not_500() {
    // Its quota accounts are written before the acquire runs: a full Redis refuses them
    // first, as one pipeline's failures (found by the issue-59 probe: answered 500).
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "quoted", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    set_maxmemory(&app, 1).await;
    key.acquire("x", json!({}))
        .await
        .assert_problem(503, "redis_full");
    key.acquire_permits("y", 0, json!({"limit": 2, "permits": 1}))
        .await
        .assert_problem(503, "redis_full");
}
