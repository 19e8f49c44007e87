//! Redisson's RLock: the lock hash exactly, its unlock message, exclusion and wake-ups both
//! ways, force release, the key prefix, and a lock only Redisson holds listed as foreign.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::json;

use crate::helpers::{AppOptions, spawn_app, spawn_app_with};

use super::{REDISSON_HOLDER, redisson_lock, redisson_unlock};

#[tokio::test]
async fn the_lock_hash_is_exactly_redissons_rlock() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 20_000})).await;
    let kind: String = redis::cmd("TYPE")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("TYPE");
    assert_eq!(kind, "hash");
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(
        fields,
        HashMap::from([(format!("{}:1", lease.id), "1".to_owned())])
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(pttl > 15_000 && pttl <= 20_000, "PTTL {pttl}");

    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    let count: String = redis::cmd("HGET")
        .arg("jobs")
        .arg(format!("{}:1", lease.id))
        .query_async(&mut conn)
        .await
        .expect("HGET");
    assert_eq!(count, "2");

    // Every other key of the lock shares its hash tag (one cluster slot); the one key of no
    // lock is the instances' journal of recent events.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    for key in &keys {
        assert!(
            key == "jobs"
                || key.starts_with("{jobs}:leasehold")
                || key.starts_with("{leasehold/}:"),
            "stray key {key}"
        );
    }
}

#[tokio::test]
async fn release_publishes_redissons_unlock_message() {
    let app = spawn_app().await;
    let mut pubsub = app.redis.client().get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_lock__channel:{jobs}")
        .await
        .expect("subscribe");
    let lease = app.lease("jobs", json!({})).await;
    app.release(&lease, false).await.assert_status(200);
    let msg = tokio::time::timeout(Duration::from_secs(5), pubsub.on_message().next())
        .await
        .expect("an unlock message")
        .expect("stream open");
    assert_eq!(msg.get_payload::<String>().expect("payload"), "0");
    let mut conn = app.redis.conn().await;
    let exists: bool = redis::cmd("EXISTS")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert!(!exists);
}

#[tokio::test]
async fn a_redisson_holder_excludes_leasehold_and_its_unlock_wakes_our_waiter() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    assert_eq!(
        redisson_lock(&mut conn, "jobs").await,
        None,
        "Redisson got the lock"
    );

    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(refused.body["holder_id"], REDISSON_HOLDER);
    assert!(refused.body["lease_id"].is_null());

    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["holders"][0]["holder_id"], REDISSON_HOLDER);
    assert!(lock.body["holders"][0]["lease_id"].is_null());

    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    assert_eq!(redisson_unlock(&mut conn, "jobs").await, Some(1));
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by Redisson's unlock message, well before the 30 s TTL")
        .expect("task");
    granted.assert_status(201);
}

#[tokio::test]
async fn a_leasehold_holder_excludes_redisson() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 20_000})).await;
    let ttl = redisson_lock(&mut conn, "jobs")
        .await
        .expect("Redisson is refused with a TTL");
    assert!(ttl > 15_000, "pttl {ttl}");
    app.release(&lease, false).await.assert_status(200);
    assert_eq!(redisson_lock(&mut conn, "jobs").await, None);
}

#[tokio::test]
async fn force_release_also_removes_a_redisson_holder() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    redisson_lock(&mut conn, "jobs").await;
    let reply = app
        .force_release("jobs", Some(crate::helpers::ADMIN_TOKEN))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.body["removed"][0]["holder_id"], REDISSON_HOLDER);
    app.acquire("jobs", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_key_prefix_applies_to_keys_and_channels_alike() {
    let app = spawn_app_with(AppOptions {
        key_prefix: "app:".into(),
        ..Default::default()
    })
    .await;
    let mut conn = app.redis.conn().await;
    assert_eq!(redisson_lock(&mut conn, "app:jobs").await, None);
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    redisson_unlock(&mut conn, "app:jobs").await;
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("task");
    granted.assert_status(201);
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("app:jobs")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(fields.len(), 1);
}

/// A lock only a Redisson client holds (Leasehold never saw the name) is listed, as `foreign`,
/// on `/v1/locks` and the overview's data; another program's keys are not.
#[tokio::test]
async fn a_lock_only_redisson_holds_is_listed_as_foreign() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    assert_eq!(redisson_lock(&mut conn, "nightly-report").await, None);
    redis::cmd("HSET")
        .arg("user:42")
        .arg("name")
        .arg("ann")
        .query_async::<()>(&mut conn)
        .await
        .expect("HSET");
    redis::cmd("SET")
        .arg("cache-entry")
        .arg("x")
        .query_async::<()>(&mut conn)
        .await
        .expect("SET");
    app.lease("leasehold-lock", json!({})).await;

    // Leasehold never saw the name: the sweepers' periodic pass (every 2 s) finds it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let listing = loop {
        let listing = app.get("/v1/locks").await;
        listing.assert_status(200);
        if listing.body["locks"].as_array().map(Vec::len) == Some(2) {
            break listing;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", listing.body);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let locks = listing.body["locks"].as_array().expect("locks");
    let names: Vec<&str> = locks.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["leasehold-lock", "nightly-report"], "{locks:?}");
    let foreign = &locks[1];
    assert_eq!(foreign["kind"], "foreign");
    assert_eq!(foreign["holders"], 1);
    assert_eq!(foreign["holder"], REDISSON_HOLDER);
    // Once Redisson lets go, it is gone from the list.
    assert_eq!(redisson_unlock(&mut conn, "nightly-report").await, Some(1));
    let listing = app.get("/v1/locks").await;
    assert_eq!(listing.body["locks"].as_array().map(Vec::len), Some(1));
}
