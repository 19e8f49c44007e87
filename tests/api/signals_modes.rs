//! A lease watch's signals in the Sentinel and Cluster modes (`signals.rs` has them on a
//! standalone Redis): `expiring` at the slack, `revocation_requested` and the release that
//! honours it, `degraded` while the serving Redis is frozen and `recovered` after, each
//! through the mode's own connections and pub/sub (in Cluster mode the watch channel lives
//! on the lock's shard).

use std::time::{Duration, Instant};

use nix::sys::signal::Signal as Unix;
use reqwest::Method;
use serde_json::json;

use crate::cluster::names_on_every_primary;
use crate::failover::{on_cluster, on_sentinels};
use crate::helpers::TestApp;
use crate::helpers::cluster::Cluster;
use crate::helpers::sentinel::Topology;
use leasehold::redis::AckRule;

/// `expiring` at the slack on one name, and a revocation honoured on another.
async fn expiring_and_revocation(app: &TestApp, slack_name: &str, revoked_name: &str) {
    let lease = app.lease(slack_name, json!({"ttl_ms": 1500})).await;
    let mut watch = app
        .watch_with(&lease, &lease.token, "?expiring_slack_ms=600", None)
        .await
        .expect("watch");
    let opened = Instant::now();
    let expiring = watch.told("expiring").await;
    assert!(
        opened.elapsed() + Duration::from_millis(50) >= Duration::from_millis(900),
        "told early: {:?}",
        opened.elapsed()
    );
    assert!(expiring["remaining_ms"].as_u64() <= Some(600), "{expiring}");
    app.release(&lease, true).await.assert_status(200);

    let held = app
        .lease(revoked_name, json!({"ttl_ms": 60_000, "holder": "w"}))
        .await;
    let mut watch = app.watch(&held).await;
    let path = format!("/v1/admin/locks/{revoked_name}/revoke");
    let body = json!({"grace_ms": 5000, "reason": "maintenance"});
    app.admin(Method::POST, &path, Some(body))
        .await
        .assert_status(200);
    let asked = watch.told("revocation_requested").await;
    assert_eq!(asked["revocation"]["reason"], "maintenance", "{asked}");
    app.release(&held, true).await.assert_status(200);
    assert_eq!(watch.told("lost").await["reason"], "released");
}

/// `degraded` while `freeze` holds the serving Redis still, `recovered` after `thaw`.
async fn degraded_then_recovered(
    app: &TestApp,
    name: &str,
    freeze: impl FnOnce(),
    thaw: impl FnOnce(),
) {
    let lease = app.lease(name, json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    let frozen = Instant::now();
    freeze();
    let degraded = watch.told("degraded").await;
    let notice = frozen.elapsed();
    thaw();
    assert!(degraded["valid_until"].is_string(), "{degraded}");
    assert!(notice < Duration::from_secs(3), "degraded after {notice:?}");
    watch.told("recovered").await;
    app.release(&lease, true).await.assert_status(200);
}

#[tokio::test]
async fn signals_come_through_sentinel_mode() {
    let topology = Topology::start(1, 3).await;
    let app = on_sentinels(&topology).await;
    expiring_and_revocation(&app, "sentinel-slack", "sentinel-revoked").await;
    // Frozen for less than the Sentinels' failure detection: the same master comes back.
    degraded_then_recovered(
        &app,
        "sentinel-frozen",
        || topology.master.signal(Unix::SIGSTOP),
        || topology.master.signal(Unix::SIGCONT),
    )
    .await;
}

#[tokio::test]
async fn signals_come_through_cluster_mode_from_the_locks_shard() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster, AckRule::Auto).await;
    let names = names_on_every_primary(&cluster, 2).await;
    let mut shards = names.iter();
    let (_, first) = shards.next().expect("a primary");
    let (frozen_primary, second) = shards.next().expect("another primary");
    expiring_and_revocation(&app, &first[0], &second[0]).await;
    let node = cluster.node(frozen_primary);
    degraded_then_recovered(
        &app,
        &second[1],
        || node.signal(Unix::SIGSTOP),
        || node.signal(Unix::SIGCONT),
    )
    .await;
}
