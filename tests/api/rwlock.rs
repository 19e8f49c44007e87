//! Read/write locks: Redisson's RReadWriteLock matrix, downgrade, per-hold expiry, policies.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{Lease, TestApp, spawn_app};

async fn read(app: &TestApp, lock: &str) -> Lease {
    app.lease(lock, json!({"kind": "read", "ttl_ms": 60_000}))
        .await
}

async fn write(app: &TestApp, lock: &str) -> Lease {
    app.lease(lock, json!({"kind": "write", "ttl_ms": 60_000}))
        .await
}

async fn again(app: &TestApp, lease: &Lease, kind: &str) -> crate::helpers::Reply {
    app.acquire_with(&lease.lock, 0, json!({"kind": kind}), Some(&lease.token))
        .await
}

#[tokio::test]
async fn different_holders_read_read_share() {
    let app = spawn_app().await;
    read(&app, "doc").await;
    read(&app, "doc").await;
    let lock = app.inspect_lock("doc").await;
    assert_eq!(lock.body["mode"], "read");
    assert_eq!(lock.body["holders"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn different_holders_read_then_write_excludes() {
    let app = spawn_app().await;
    read(&app, "doc").await;
    app.acquire("doc", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");
}

#[tokio::test]
async fn different_holders_write_then_read_excludes() {
    let app = spawn_app().await;
    write(&app, "doc").await;
    app.acquire("doc", json!({"kind": "read"}))
        .await
        .assert_problem(409, "lock_held");
}

#[tokio::test]
async fn different_holders_write_then_write_excludes() {
    let app = spawn_app().await;
    write(&app, "doc").await;
    app.acquire("doc", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");
}

#[tokio::test]
async fn same_holder_read_read_reenters() {
    let app = spawn_app().await;
    let lease = read(&app, "doc").await;
    let reply = again(&app, &lease, "read").await;
    reply.assert_status(200);
    assert_eq!(reply.body["reentry_count"], 2);
    assert_eq!(reply.body["fencing_token"], lease.fencing_token);
}

#[tokio::test]
async fn same_holder_read_then_write_is_refused_at_once() {
    let app = spawn_app().await;
    let lease = read(&app, "doc").await;
    let started = std::time::Instant::now();
    let reply = app
        .acquire_with("doc", 10_000, json!({"kind": "write"}), Some(&lease.token))
        .await;
    reply.assert_problem(409, "upgrade_refused");
    assert!(reply.str("detail").contains("not supported"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered, not waited"
    );
}

#[tokio::test]
async fn same_holder_write_then_read_downgrades() {
    let app = spawn_app().await;
    let lease = write(&app, "doc").await;
    let reply = again(&app, &lease, "read").await;
    reply.assert_status(200);
    assert_eq!(reply.body["reentry_count"], 2);
    let view = app.inspect_lease(&lease).await;
    assert_eq!(view.body["write_count"], 1);
    assert_eq!(view.body["read_count"], 1);
    // Releasing the write hold leaves a read hold: others may now read, not write.
    let released = app.release(&lease, false).await;
    released.assert_status(200);
    assert_eq!(released.body["released"], false);
    assert_eq!(released.body["reentry_count"], 1);
    assert_eq!(app.inspect_lock("doc").await.body["mode"], "read");
    read(&app, "doc").await;
    app.acquire("doc", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");
    let last = app.release(&lease, false).await;
    assert_eq!(last.body["released"], true);
}

#[tokio::test]
async fn same_holder_write_write_reenters() {
    let app = spawn_app().await;
    let lease = write(&app, "doc").await;
    let reply = again(&app, &lease, "write").await;
    reply.assert_status(200);
    assert_eq!(reply.body["reentry_count"], 2);
    assert_eq!(app.inspect_lease(&lease).await.body["write_count"], 2);
}

#[tokio::test]
async fn release_by_mode_and_mode_not_held() {
    let app = spawn_app().await;
    let lease = read(&app, "doc").await;
    let reply = app.release_with(&lease, &lease.token, "mode=write").await;
    reply.assert_problem(409, "mode_not_held");
    app.release(&lease, false).await.assert_status(200);
}

#[tokio::test]
async fn the_lock_ttl_follows_the_longest_read_hold() {
    let app = spawn_app().await;
    let long = read(&app, "doc").await;
    let short = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 2_000}))
        .await;
    assert!(app.inspect_lock("doc").await.u64("remaining_ms") > 50_000);
    app.release(&long, false).await.assert_status(200);
    let left = app.inspect_lock("doc").await.u64("remaining_ms");
    assert!(
        left <= 2_000,
        "the lock now lives as long as the short hold: {left} ms"
    );
    app.heartbeat(&short, json!({})).await.assert_status(200);
}

#[tokio::test]
async fn heartbeats_renew_the_read_hold_itself_not_just_the_lock() {
    let app = spawn_app().await;
    let renewed = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 500}))
        .await;
    let other = read(&app, "doc").await;
    app.heartbeat(&renewed, json!({"ttl_ms": 60_000}))
        .await
        .assert_status(200);
    // The other reader leaves: the lock's TTL is recomputed from the holds' own timeouts.
    app.release(&other, false).await.assert_status(200);
    let left = app.inspect_lock("doc").await.u64("remaining_ms");
    assert!(
        left > 50_000,
        "the renewed read hold keeps the lock: {left} ms"
    );
    app.heartbeat(&renewed, json!({})).await.assert_status(200);
}

#[tokio::test]
async fn a_read_hold_that_stops_heartbeating_expires_on_its_own() {
    let app = spawn_app().await;
    let dead = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 150}))
        .await;
    let alive = read(&app, "doc").await;
    let writer = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=10000",
        json!({"kind": "write"}),
    );
    app.wait_for_waiters(1).await;
    // The dead reader's hold times out although the live reader keeps the lock hash alive.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.inspect_lease(&dead).await.body["state"] != "expired" {
        assert!(
            std::time::Instant::now() < deadline,
            "the read hold never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.release(&alive, false).await.assert_status(200);
    let granted = writer.await.expect("task");
    granted.assert_status(201);
    app.heartbeat(&dead, json!({}))
        .await
        .assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn readers_first_lets_readers_pass_a_waiting_writer_fifo_does_not() {
    let app = spawn_app().await;
    let first = read(&app, "doc").await;
    let writer = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=20000",
        json!({"kind": "write"}),
    );
    app.wait_for_waiters(1).await;
    // Redisson's order: a new reader joins the readers already holding.
    let eager = app
        .acquire("doc", json!({"kind": "read", "policy": "readers_first"}))
        .await;
    let eager = Lease::from_reply("doc", &eager);
    // Curator's order: a reader arriving after a waiting writer waits behind it.
    app.acquire("doc", json!({"kind": "read", "policy": "fifo"}))
        .await
        .assert_problem(409, "lock_held");
    let polite = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=20000",
        json!({"kind": "read", "policy": "fifo"}),
    );
    app.wait_for_waiters(2).await;
    app.release(&first, false).await.assert_status(200);
    app.release(&eager, false).await.assert_status(200);
    let writer = Lease::from_reply("doc", &writer.await.expect("task"));
    app.wait_for_waiters(1).await;
    app.release(&writer, false).await.assert_status(200);
    let polite = Lease::from_reply("doc", &polite.await.expect("task"));
    assert!(
        writer.fencing_token < polite.fencing_token,
        "the writer went first"
    );
}

#[tokio::test]
async fn a_writer_that_gives_up_stops_holding_back_fifo_readers() {
    let app = spawn_app().await;
    let holder = read(&app, "doc").await;
    let impatient = leasehold::client::http_builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(app.url("/v1/locks/doc/leases?wait_ms=20000"))
        .json(&json!({"kind": "write"}))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    app.wait_for_waiters(0).await;
    let reply = app
        .acquire_with(
            "doc",
            5_000,
            json!({"kind": "read", "policy": "fifo"}),
            None,
        )
        .await;
    reply.assert_status(201);
    app.release(&holder, false).await.assert_status(200);
}

#[tokio::test]
async fn kinds_do_not_mix_on_one_name() {
    let app = spawn_app().await;
    read(&app, "doc").await;
    let reply = app.acquire("doc", json!({"kind": "fair"})).await;
    reply.assert_problem(409, "kind_conflict");
    assert_eq!(reply.body["held_as"], "rw");
    app.acquire("doc", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
    app.lease("mutex", json!({})).await;
    let reply = app.acquire("mutex", json!({"kind": "read"})).await;
    reply.assert_problem(409, "kind_conflict");
    assert_eq!(reply.body["held_as"], "reentrant");
}

/// A refused writer sleeps until the expiry its refusal named. When a release brings the lock's
/// expiry forward (the longest read hold let go, a shorter one left that then runs out), the
/// writer is woken to look again: it gets the lock when the last hold ends, not when its own
/// wait does. (Found by the safety harness: a writer parked 412 ms while the lock was free.)
#[tokio::test]
async fn a_release_that_brings_the_expiry_forward_wakes_a_waiting_writer() {
    let app = spawn_app().await;
    let long = read(&app, "doc").await;
    // A reader that stops heartbeating: its hold runs out 300 ms after its grant.
    app.lease("doc", json!({"kind": "read", "ttl_ms": 300}))
        .await;
    let writer = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=10000",
        json!({"kind": "write", "ttl_ms": 60_000}),
    );
    app.wait_for_waiters(1).await;
    let released_at = std::time::Instant::now();
    app.release(&long, true).await.assert_status(200);
    let reply = writer.await.expect("writer task");
    reply.assert_status(201);
    // Without the wake-up it slept until its 10 s wait ran out (the long hold's 60 s expiry
    // was what its refusal named).
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "granted {:?} after the release",
        released_at.elapsed()
    );
}

/// A lone reader's release ends at once (the usual read release); one whose hold ran out
/// while the lock hash stayed (its timeout key is gone) is told it lost the lock, and its
/// expiry is recorded, rather than its release being taken as one.
#[tokio::test]
async fn a_lone_readers_release_frees_the_lock_unless_its_hold_ran_out() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let reader = read(&app, "doc").await;
    app.release(&reader, false).await.assert_status(200);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("doc")
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0, "the last reader's release deletes the lock hash");
    assert_eq!(app.inspect_lease(&reader).await.body["state"], "released");

    let lost = read(&app, "doc").await;
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{{doc}}:{}:1:rwlock_timeout:1", lost.id))
        .query_async(&mut conn)
        .await
        .expect("DEL");
    app.release(&lost, false)
        .await
        .assert_problem(410, "lease_lost");
    assert_eq!(app.inspect_lease(&lost).await.body["state"], "expired");
    write(&app, "doc").await;
}

// Found by the safety harness (overlapping holds after a read reentry with a longer TTL).
#[tokio::test]
async fn a_read_lease_reentered_with_a_longer_ttl_keeps_its_last_level() {
    let app = spawn_app().await;
    let reader = app
        .lease("catalog", json!({"kind": "read", "ttl_ms": 300}))
        .await;
    app.acquire_with(
        "catalog",
        0,
        json!({"kind": "read", "ttl_ms": 10_000}),
        Some(&reader.token),
    )
    .await
    .assert_status(200);
    let released = app.release(&reader, false).await;
    released.assert_status(200);
    assert_eq!(released.body["reentry_count"], 1);
    // Past the first level's own TTL: the lease's TTL is now 10 s for every level.
    tokio::time::sleep(Duration::from_millis(600)).await;
    app.acquire("catalog", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");
    app.inspect_lease(&reader).await.body["state"]
        .as_str()
        .map_or_else(|| panic!("no state"), |s| assert_eq!(s, "held"));
    app.release(&reader, false).await.assert_status(200);
    app.lease("catalog", json!({"kind": "write"})).await;
}

// Found by the safety harness (all=true left read levels held).
#[tokio::test]
async fn all_true_releases_every_level_of_both_modes() {
    let app = spawn_app().await;
    let lease = app.lease("catalog", json!({"kind": "write"})).await;
    for kind in ["write", "read", "read"] {
        app.acquire_with("catalog", 0, json!({"kind": kind}), Some(&lease.token))
            .await
            .assert_status(200);
    }
    let released = app.release(&lease, true).await;
    released.assert_status(200);
    assert_eq!(released.body["released"], true);
    assert_eq!(released.body["reentry_count"], 0);
    assert_eq!(app.inspect_lock("catalog").await.body["held"], false);
    app.lease("catalog", json!({"kind": "write"})).await;
}
