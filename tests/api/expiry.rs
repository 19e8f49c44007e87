//! Expiries recorded when they happen, by the servers themselves: a lease nobody touches
//! again gets its `expired` history entry and live event within a few seconds, with the time
//! it ran out, once however many instances sweep.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{TestApp, next_event, spawn_app};

/// The lock's history entries (JSON), oldest first, read straight from Redis.
async fn history(app: &TestApp, lock: &str) -> Vec<Value> {
    let mut conn = app.redis.conn().await;
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(format!("{{{lock}}}:leasehold:history"))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .expect("XRANGE");
    entries
        .into_iter()
        .filter_map(|(_, fields)| serde_json::from_str(fields.get(1)?).ok())
        .collect()
}

/// Waits (bounded) until the history of `lock` holds an `expired` entry; returns them all.
async fn expiries(app: &TestApp, lock: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<Value> = history(app, lock)
            .await
            .into_iter()
            .filter(|e| e["type"] == "expired")
            .collect();
        if !found.is_empty() {
            return found;
        }
        assert!(Instant::now() < deadline, "no expiry of {lock} recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn expires_ms(app_reply: &crate::helpers::Reply) -> u64 {
    let at = app_reply.str("expires_at");
    let parsed = humantime::parse_rfc3339(&at).expect("rfc3339");
    let since = parsed
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("ms")
}

#[tokio::test]
async fn an_expiry_nobody_observes_is_recorded_once_with_its_true_time_and_published() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let mut events = app.events().await;
    let grant = app
        .acquire("nightly", json!({"holder": "cron", "ttl_ms": 300}))
        .await;
    grant.assert_status(201);
    let expires = expires_ms(&grant);
    let found = expiries(&app, "nightly").await;
    let event = next_event(&mut events, "expired").await;
    assert_eq!(event["lock"], "nightly");
    assert_eq!(event["holder"], "cron");
    assert_eq!(
        event["at_ms"], expires,
        "the time it ran out, not when it was seen"
    );
    // Both instances sweep; the second finds it recorded.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let found_later = history(&app, "nightly").await;
    let count = found_later
        .iter()
        .filter(|e| e["type"] == "expired")
        .count();
    assert_eq!(count, 1, "{found_later:?}");
    assert_eq!(found[0]["at_ms"], expires);
    drop(peer);
}

#[tokio::test]
async fn a_read_hold_that_runs_out_beside_a_live_one_is_recorded() {
    let app = spawn_app().await;
    app.lease("doc", json!({"kind": "read", "ttl_ms": 60_000}))
        .await;
    let short = app
        .acquire(
            "doc",
            json!({"kind": "read", "holder": "dead-reader", "ttl_ms": 300}),
        )
        .await;
    short.assert_status(201);
    let found = expiries(&app, "doc").await;
    assert_eq!(found[0]["holder"], "dead-reader");
    assert_eq!(found[0]["at_ms"], expires_ms(&short));
}

#[tokio::test]
async fn semaphore_permits_that_run_out_are_recorded() {
    let app = spawn_app().await;
    let grant = app
        .acquire_permits(
            "gpus",
            0,
            json!({"limit": 4, "permits": 2, "holder": "trainer", "ttl_ms": 300}),
        )
        .await;
    grant.assert_status(201);
    let found = expiries(&app, "gpus").await;
    assert_eq!(found[0]["holder"], "trainer");
    assert_eq!(found[0]["at_ms"], expires_ms(&grant));
}

/// A tenant's lease that runs out is recorded in that tenant's history (its keys carry
/// `<tenant>/` after the prefix: the sweeper finds them by notification and by its pass).
#[tokio::test]
async fn a_tenants_expiry_is_recorded_in_its_own_history() {
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "svc", "tenant": "acme", "roles": ["client", "reader"]}))
        .await;
    let acme = app.with_key(&secret);
    let grant = acme
        .acquire("nightly", json!({"holder": "cron", "ttl_ms": 300}))
        .await;
    grant.assert_status(201);
    let found = expiries(&app, "acme/nightly").await;
    assert_eq!(found[0]["holder"], "cron");
    assert_eq!(found[0]["at_ms"], expires_ms(&grant));
    assert!(
        history(&app, "nightly").await.is_empty(),
        "the default tenant's lock of that name has no history"
    );
}

/// The sweeper rides on the process's two Redis connections (commands, and the one
/// subscriber, which also takes the expired-key notifications): an instance holds no more.
#[tokio::test]
async fn an_instance_uses_two_redis_connections_sweeper_included() {
    let app = spawn_app().await;
    app.wait_until_ready().await;
    app.lease("busy", json!({"ttl_ms": 300})).await;
    // Long enough for an expiry to be swept and a periodic pass to run.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut conn = app.redis.conn().await;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .expect("CLIENT LIST");
    let others = clients
        .lines()
        .filter(|l| !l.contains("cmd=client|list"))
        .count();
    assert!(
        others <= 2,
        "the instance holds {others} connections:\n{clients}"
    );
}
