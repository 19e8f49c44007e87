//! Where a lock's keys live in a cluster: every operation of every kind keeps them in its
//! lock's slot, on the primary serving it (Redis itself refuses a function call that would
//! not); and a primary that lost the functions gets them again.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::{names_on_every_primary, on_cluster};
use crate::helpers::TestApp;
use crate::helpers::cluster::{Cluster, query};

/// Every key of every primary.
async fn every_key(cluster: &Cluster) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for (primary, _) in cluster.primaries().await {
        let found: Vec<String> = query(&primary, redis::cmd("KEYS").arg("*"))
            .await
            .expect("KEYS");
        keys.extend(found.into_iter().map(|k| (primary.clone(), k)));
    }
    keys
}

/// The text a key's slot is computed from: its hash tag, or all of it.
fn hashed_part(key: &str) -> &str {
    match key.split_once('{') {
        Some((_, rest)) => match rest.split_once('}') {
            Some((tag, _)) if !tag.is_empty() => tag,
            _ => key,
        },
        None => key,
    }
}

#[tokio::test]
async fn every_operation_of_every_kind_keeps_its_keys_in_its_locks_slot_on_every_primary() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    app.get("/readyz").await.assert_status(200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.body["redis_mode"], "cluster", "{}", ready.body);
    functions_cannot_cross_slots(&cluster).await;

    // Every kind, every operation, on names that land on every primary.
    let names = names_on_every_primary(&cluster, 1).await;
    let mut used = HashSet::new();
    for (i, name) in names.values().map(|n| n[0].clone()).enumerate() {
        used.insert(name.clone());
        let kind = ["reentrant", "fair", "write"][i % 3];
        used.insert(every_operation_on(&app, &name, kind).await);
    }
    every_key_in_its_locks_slot(&cluster, &used).await;
    every_kind_of_state_left(&cluster).await;
}

/// Redis itself refuses a function that touches two slots: a run that goes through
/// without an error has kept each call in one slot (checked here, not assumed).
async fn functions_cannot_cross_slots(cluster: &Cluster) {
    let primary = cluster.primaries().await[0].0.clone();
    let refused: redis::RedisResult<String> = query(
        &primary,
        redis::cmd("FUNCTION").arg("LOAD").arg(
            "#!lua name=crossslot\nredis.register_function('two_slots', function(k) \
             redis.call('GET', k[1]); return redis.call('GET', '{other}x') end)",
        ),
    )
    .await;
    refused.expect("a test function loads");
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| hashed_part(k) != "other")
        .expect("a key");
    let mut conn = cluster
        .node(&cluster.owner_of_slot(cluster.keyslot(&key).await).await)
        .conn()
        .await;
    let cross: redis::RedisResult<Value> = redis::cmd("FCALL")
        .arg("two_slots")
        .arg(1)
        .arg(&key)
        .query_async(&mut conn)
        .await
        .map(|v: redis::Value| json!(format!("{v:?}")));
    assert!(
        cross.is_err(),
        "Redis let a function cross slots: {cross:?}"
    );
}

/// Every operation of `kind` on `name`, and a semaphore's under a name of its own on the same
/// primary (its name returned).
async fn every_operation_on(app: &TestApp, name: &str, kind: &str) -> String {
    // A hold, its reentry, a heartbeat, a waiter (the waitlist) and its timeout.
    let lease = app
        .lease(name, json!({"kind": kind, "ttl_ms": 60_000}))
        .await;
    if kind == "reentrant" {
        let reentry = app
            .acquire_with(name, 0, json!({}), Some(&lease.token))
            .await;
        reentry.assert_status(200);
        assert_eq!(reentry.body["reentry_count"], 2);
    }
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    app.inspect_lease(&lease).await.assert_status(200);
    let waiter = app.spawn_waiter(name, 300);
    if kind == "fair" {
        // A fair ticket in the queue and its timeout set.
        let ticket = app.ticket(name, json!({"kind": "fair"})).await;
        app.leave(&ticket).await;
    }
    let waited = waiter.await.expect("waiter");
    assert!(
        matches!(waited.status.as_u16(), 409 | 202),
        "{}",
        waited.body
    );
    app.inspect_lock(name).await.assert_status(200);
    app.release(&lease, true).await.assert_status(200);
    // Read holds (two of them) and an Idempotency-Key.
    let read = app.lease(name, json!({"kind": "read"})).await;
    let again = app
        .send_with_key(
            app.http
                .post(app.url(&format!("/v1/locks/{name}/leases")))
                .json(&json!({"kind": "read"})),
            &format!("idem-{name}"),
        )
        .await;
    again.assert_status(201);
    app.release(&read, true).await.assert_status(200);

    // A semaphore (its permits set) under a name of its own on the same primary.
    let sem = format!("{name}-sem");
    let permits = app.permits(&sem, json!({"permits": 2, "limit": 3})).await;
    app.heartbeat(&permits, json!({})).await.assert_status(200);
    app.release(&permits, true).await.assert_status(200);
    // One kept: its permit set stays to be looked at below.
    app.permits(&sem, json!({"permits": 1, "limit": 3, "ttl_ms": 60_000}))
        .await;
    sem
}

/// Every key a lock left behind sits in its lock's slot, on the primary serving it; the
/// rest are Leasehold's own, in the slot of `{leasehold/}`.
async fn every_key_in_its_locks_slot(cluster: &Cluster, used: &HashSet<String>) {
    let own_slot = cluster.keyslot("{leasehold/}").await;
    let primaries = cluster.primaries().await;
    let mut per_primary: HashMap<String, usize> = HashMap::new();
    for (primary, key) in every_key(cluster).await {
        let part = hashed_part(&key);
        let slot = cluster.keyslot(&key).await;
        if part == "leasehold/" {
            assert_eq!(slot, own_slot, "{key}");
            continue;
        }
        assert!(used.contains(part), "a key of no lock used here: {key}");
        assert_eq!(
            slot,
            cluster.keyslot(part).await,
            "{key} is not in its lock's slot"
        );
        let served = primaries
            .iter()
            .find(|(_, r)| r.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(p, _)| p.clone());
        assert_eq!(served.as_deref(), Some(primary.as_str()), "{key}");
        *per_primary.entry(primary).or_default() += 1;
    }
    assert_eq!(
        per_primary.len(),
        3,
        "every primary holds lock state: {per_primary:?}"
    );
}

/// Among the keys left, what every kind of state looks like: histories, idempotency records,
/// the semaphores' permit sets, read holds' timeouts (the rest expire with their leases).
async fn every_kind_of_state_left(cluster: &Cluster) {
    let keys: Vec<String> = every_key(cluster)
        .await
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    for shape in [
        ":leasehold:history",
        ":leasehold:idem:",
        "}:timeout",
        ":rwlock_timeout:",
    ] {
        assert!(
            keys.iter().any(|k| k.contains(shape)),
            "no {shape} key in {keys:?}"
        );
    }
}

#[tokio::test]
async fn a_primary_that_lost_the_functions_gets_them_again() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    let names = names_on_every_primary(&cluster, 1).await;
    for (primary, names) in &names {
        let _: () = query(primary, redis::cmd("FUNCTION").arg("FLUSH"))
            .await
            .expect("FUNCTION FLUSH");
        let lease = app.lease(&names[0], json!({})).await;
        app.release(&lease, true).await.assert_status(200);
    }
}
