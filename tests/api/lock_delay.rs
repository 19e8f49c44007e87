//! Lock-delay (Chubby's, Consul's): a lease that asked for `lock_delay_ms` and ended other than
//! by a release (its TTL ran out, an admin force-released or evicted it) leaves its name
//! refusing new leases for that long, 409 `lock_delay` with `Retry-After`; waiters wait through
//! it; a release frees the name at once; `--max-lock-delay-ms` caps it.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::dashboard::Browser;
use crate::helpers::{ADMIN_TOKEN, Reply, TestApp, spawn_app};

/// Waits until Redis has let the lock's hash expire (the lease's TTL ran out).
async fn until_expired(app: &TestApp, name: &str) {
    let mut conn = app.redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg(name)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if !exists {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 409 `lock_delay` whose `Retry-After` and `delayed_until` say it ends within `within`.
fn assert_delayed(reply: &Reply, within: Duration) {
    reply.assert_problem(409, "lock_delay");
    let retry: u64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(
        retry >= 1 && retry <= within.as_secs() + 1,
        "Retry-After {retry}"
    );
    assert!(reply.body["delayed_until"].is_string(), "{}", reply.body);
}

#[tokio::test]
async fn an_expired_lease_leaves_its_name_delayed_and_waiters_wait_through_it() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 200, "lock_delay_ms": 2_000}))
        .await;
    until_expired(&app, "jobs").await;

    // Every lock kind is refused while the delay lasts.
    for kind in ["reentrant", "exclusive", "read", "write"] {
        assert_delayed(
            &app.acquire("jobs", json!({"kind": kind})).await,
            Duration::from_secs(2),
        );
    }
    let lock = app.inspect_lock("jobs").await;
    lock.assert_status(200);
    assert_eq!(lock.body["held"], false);
    assert_eq!(lock.body["lock_delay_ms"], 2_000);
    assert!(lock.body["delayed_until"].is_string(), "{}", lock.body);

    // A waiter keeps waiting through it and gets the lock once it is over.
    let started = Instant::now();
    let granted = app.acquire_with("jobs", 10_000, json!({}), None).await;
    granted.assert_status(201);
    assert!(
        started.elapsed() > Duration::from_millis(1_000),
        "granted during the delay, after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken late: {:?}",
        started.elapsed()
    );
    let lock = app.inspect_lock("jobs").await;
    assert!(lock.body["delayed_until"].is_null(), "{}", lock.body);
}

/// A waiter parked while the lease still held: woken by its expiry, it finds the name
/// delayed and parks again until the delay is over.
#[tokio::test]
async fn a_waiter_parked_before_the_expiry_waits_through_the_delay() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 300, "lock_delay_ms": 1_000}))
        .await;
    let started = Instant::now();
    let waiter = app.spawn_waiter("jobs", 10_000);
    let granted = tokio::time::timeout(Duration::from_secs(8), waiter)
        .await
        .expect("granted once the delay is over")
        .expect("task");
    granted.assert_status(201);
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "granted before TTL + delay: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_release_frees_the_name_at_once() {
    let app = spawn_app().await;
    let lease = app
        .lease("jobs", json!({"ttl_ms": 30_000, "lock_delay_ms": 30_000}))
        .await;
    // One level of two released: still held, the delay stays with the lease.
    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    app.release(&lease, false).await.assert_status(200);
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    app.release(&lease, false).await.assert_status(200);
    app.acquire("jobs", json!({})).await.assert_status(201);

    // A read/write lock's last holder's release too.
    let reader = app
        .lease("doc", json!({"kind": "read", "lock_delay_ms": 30_000}))
        .await;
    app.release(&reader, false).await.assert_status(200);
    app.acquire("doc", json!({"kind": "write"}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn a_force_release_starts_the_delay_from_now() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 600_000, "lock_delay_ms": 1_500}))
        .await;
    app.force_release("jobs", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    // From now, not from the lease's expiry ten minutes away.
    assert_delayed(
        &app.acquire("jobs", json!({})).await,
        Duration::from_secs(2),
    );
    // The lock page says so.
    Browser::new(&app)
        .get("/locks/jobs")
        .await
        .assert_status(200)
        .assert_contains("Lock-delay")
        .assert_contains("Delayed until");
    let granted = app.acquire_with("jobs", 10_000, json!({}), None).await;
    granted.assert_status(201);
}

#[tokio::test]
async fn an_eviction_starts_the_delay_from_now() {
    let app = spawn_app().await;
    let lease = app
        .lease("jobs", json!({"ttl_ms": 600_000, "lock_delay_ms": 1_500}))
        .await;
    let path = format!("/v1/admin/locks/jobs/leases/{}?reason=hung", lease.id);
    app.admin(Method::DELETE, &path, None)
        .await
        .assert_status(200);
    assert_delayed(
        &app.acquire("jobs", json!({})).await,
        Duration::from_secs(2),
    );

    // The last reader evicted: the read/write lock is free and delayed.
    let reader = app
        .lease("doc", json!({"kind": "read", "lock_delay_ms": 1_500}))
        .await;
    let path = format!("/v1/admin/locks/doc/leases/{}", reader.id);
    app.admin(Method::DELETE, &path, None)
        .await
        .assert_status(200);
    assert_delayed(
        &app.acquire("doc", json!({"kind": "write"})).await,
        Duration::from_secs(2),
    );
}

#[tokio::test]
async fn without_a_delay_an_expired_name_is_free_at_once() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 200})).await;
    until_expired(&app, "jobs").await;
    app.acquire("jobs", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_heartbeat_carries_the_delay_past_the_new_expiry() {
    let app = spawn_app().await;
    let lease = app
        .lease("jobs", json!({"ttl_ms": 200, "lock_delay_ms": 1_000}))
        .await;
    app.heartbeat(&lease, json!({"ttl_ms": 400}))
        .await
        .assert_status(200);
    let mut conn = app.redis.conn().await;
    let left: i64 = redis::cmd("PTTL")
        .arg("{jobs}:leasehold:delay")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        left > 1_200 && left <= 1_400,
        "the delay key lives {left} ms"
    );
    until_expired(&app, "jobs").await;
    assert_delayed(
        &app.acquire("jobs", json!({})).await,
        Duration::from_secs(1),
    );
}

#[tokio::test]
async fn a_fair_ticket_keeps_its_place_through_the_delay() {
    let app = spawn_app().await;
    app.lease(
        "deploy",
        json!({"kind": "fair", "ttl_ms": 200, "lock_delay_ms": 1_500}),
    )
    .await;
    until_expired(&app, "deploy").await;
    // Queued (202) as while the lock is held, then granted once the delay is over.
    let ticket = app.ticket("deploy", json!({"kind": "fair"})).await;
    let started = Instant::now();
    let granted = app.poll_ticket(&ticket.path, &ticket.token, 10_000).await;
    granted.assert_status(201);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_delay_is_capped_by_max_lock_delay_ms() {
    let app = spawn_app().await;
    let refused = app.acquire("jobs", json!({"lock_delay_ms": 60_001})).await;
    refused.assert_problem(422, "invalid_lock_delay");
    assert!(
        refused.str("detail").contains("--max-lock-delay-ms"),
        "{}",
        refused.body
    );
    app.acquire("jobs", json!({"lock_delay_ms": 60_000}))
        .await
        .assert_status(201);
}

/// Redis Cluster mode: the delay key shares its lock's hash tag, so every function keeps one
/// slot and the delay holds on every primary.
#[tokio::test]
async fn the_delay_holds_in_cluster_mode_on_every_primary() {
    use crate::helpers::cluster::Cluster;
    use crate::helpers::{AppOptions, spawn_app_tweaked};
    use leasehold::redis::ClusterSettings;

    let cluster = Cluster::start(3, 0).await;
    let nodes: Vec<String> = cluster.seeds().split(',').map(str::to_owned).collect();
    let app = spawn_app_tweaked(AppOptions::default(), |config| {
        config.redis.cluster = Some(ClusterSettings {
            nodes,
            username: None,
            password: None,
            tls: false,
        });
    })
    .await;
    let primaries = cluster.primaries().await;
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let slot = cluster.keyslot(&name).await;
        let owner = cluster.owner_of_slot(slot).await;
        if !names.iter().any(|(_, o)| *o == owner) {
            names.push((name, owner));
        }
        if names.len() == primaries.len() {
            break;
        }
    }
    for (name, _) in &names {
        app.lease(name, json!({"ttl_ms": 600_000, "lock_delay_ms": 1_500}))
            .await;
        app.force_release(name, Some(ADMIN_TOKEN))
            .await
            .assert_status(200);
        assert_delayed(&app.acquire(name, json!({})).await, Duration::from_secs(2));
        assert_eq!(
            cluster
                .keyslot(&format!("{{{name}}}:leasehold:delay"))
                .await,
            cluster.keyslot(name).await
        );
    }
    for (name, _) in &names {
        app.acquire_with(name, 10_000, json!({}), None)
            .await
            .assert_status(201);
    }
}
