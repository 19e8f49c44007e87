//! What a RedLock lease's watch tells its holder before `lost`, as a main-Redis lease's does:
//! `expiring` at the slack of the majority's expiry and `renewed` after a late heartbeat,
//! `revocation_requested` when an operator asks (and `lost` with reason `revoked` at its
//! deadline), `degraded` while too few nodes answer to confirm the lease and `recovered` once
//! they do, `contended` when RedLock requests wait for the name (listed on the main Redis).

use std::time::{Duration, Instant};

use nix::sys::signal::Signal as Unix;
use reqwest::Method;
use serde_json::json;

use crate::matrix::kinds::with_nodes;

#[tokio::test]
async fn a_redlock_holder_hears_expiring_renewed_and_a_revocation_before_it_is_lost() {
    let (app, _nodes) = with_nodes().await;
    let lease = app
        .lease("red-slack", json!({"kind": "redlock", "ttl_ms": 1_500}))
        .await;
    let mut watch = app
        .watch_with(&lease, &lease.token, "?expiring_slack_ms=600", None)
        .await
        .expect("watch");
    let opened = Instant::now();
    let expiring = watch.told("expiring").await;
    let at = opened.elapsed();
    assert!(
        at + Duration::from_millis(50) >= Duration::from_millis(900),
        "told before the slack began: {at:?}"
    );
    assert!(expiring["remaining_ms"].as_u64().expect("remaining_ms") <= 600);
    assert!(expiring["valid_until"].is_string(), "{expiring}");
    assert_eq!(expiring["lease_id"], lease.id.as_str());

    let beat = app.heartbeat(&lease, json!({"ttl_ms": 60_000})).await;
    beat.assert_status(200);
    assert_eq!(beat.u64("nodes_acked"), 3);
    let renewed = watch.told("renewed").await;
    assert!(renewed["valid_until"].is_string(), "{renewed}");

    app.admin(
        Method::POST,
        "/v1/admin/locks/red-slack/revoke",
        Some(json!({"grace_ms": 700, "reason": "rotate the nodes"})),
    )
    .await
    .assert_status(200);
    // Every heartbeat's answer tells it too, and extends the lease no further than it.
    let beat = app.heartbeat(&lease, json!({"ttl_ms": 60_000})).await;
    beat.assert_status(200);
    assert_eq!(
        beat.body["revocation"]["reason"], "rotate the nodes",
        "{}",
        beat.body
    );
    assert!(beat.u64("validity_ms") <= 700, "{}", beat.body);
    let asked = watch.told("revocation_requested").await;
    assert_eq!(asked["revocation"]["reason"], "rotate the nodes", "{asked}");
    assert!(asked["revocation"]["deadline"].is_string(), "{asked}");
    // Not honoured: at its deadline the lease is evicted from every node.
    let lost = watch.told("lost").await;
    assert_eq!(lost["reason"], "revoked", "{lost}");
}

#[tokio::test]
async fn a_redlock_watch_says_degraded_while_a_majority_is_frozen_and_recovered_after() {
    let (app, nodes) = with_nodes().await;
    let lease = app
        .lease("red-frozen", json!({"kind": "redlock", "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    // One node frozen leaves a majority that answers: nothing to tell.
    nodes[0].signal(Unix::SIGSTOP);
    watch.assert_quiet(Duration::from_millis(1_200)).await;
    let frozen = Instant::now();
    nodes[1].signal(Unix::SIGSTOP);
    let degraded = watch.told("degraded").await;
    let notice = frozen.elapsed();
    nodes[0].signal(Unix::SIGCONT);
    nodes[1].signal(Unix::SIGCONT);
    assert!(degraded["since"].is_string(), "{degraded}");
    assert!(degraded["valid_until"].is_string(), "{degraded}");
    assert!(notice < Duration::from_secs(3), "degraded after {notice:?}");
    println!("degraded: told {notice:?} after two of three nodes froze");
    let recovered = watch.told("recovered").await;
    assert!(recovered["valid_until"].is_string(), "{recovered}");
    app.release(&lease, true).await.assert_status(200);
    let lost = watch.told("lost").await;
    assert_eq!(lost["reason"], "released", "{lost}");
}

#[tokio::test]
async fn a_redlock_holder_hears_contended_while_redlock_requests_wait() {
    let (app, _nodes) = with_nodes().await;
    let lease = app
        .lease("red-wanted", json!({"kind": "redlock", "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    watch.assert_quiet(Duration::from_millis(300)).await;
    let waiter = app.spawn_post(
        "/v1/locks/red-wanted/leases?wait_ms=1500",
        json!({"kind": "redlock", "holder": "second"}),
    );
    let contended = watch.told("contended").await;
    assert_eq!(contended["waiters"], 1, "{contended}");
    assert_eq!(contended["lease_id"], lease.id.as_str());
    // The waiter gives up at its deadline: nobody waits any more.
    waiter.await.expect("waiter").assert_status(409);
    let contended = watch.told("contended").await;
    assert_eq!(contended["waiters"], 0, "{contended}");
    app.release(&lease, true).await.assert_status(200);
    assert_eq!(watch.told("lost").await["reason"], "released");
}
