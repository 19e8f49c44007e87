//! The Rust client's [`KeptLease`] keeps a lease by `clients/PROTOCOL.md`: renewed at a third
//! of its TTL, its loss a signal (from the watch, or the heartbeat's 410 without one, or
//! given up as unrenewable before its TTL), released on every way out (a drop too).

use std::time::Duration;

use leasehold::client::{
    AcquireOptions, Acquired, Client, ClientError, KeepOptions, KeptLease, LockKind, REVOKED,
    Resource, UNRENEWABLE,
};
use tokio::time::{Instant, sleep, timeout};

use super::client;
use crate::helpers::{TestApp, spawn_app};

fn ttl(ms: u64) -> AcquireOptions {
    AcquireOptions {
        ttl: Some(Duration::from_millis(ms)),
        ..AcquireOptions::default()
    }
}

/// Takes `lock` and keeps it.
async fn kept(
    client: &Client,
    lock: &str,
    options: &AcquireOptions,
    keep: &KeepOptions,
) -> KeptLease {
    let Acquired::Lease(lease) = client.acquire(lock, options).await.expect("granted").body else {
        panic!("queued");
    };
    client.keep_with(lease, keep)
}

async fn held(app: &TestApp, lock: &str) -> bool {
    app.inspect_lock(lock).await.body["held"]
        .as_bool()
        .unwrap_or(false)
}

#[tokio::test]
async fn a_kept_lease_outlives_its_ttl_renewed_every_third_of_it_and_is_released() {
    let app = spawn_app().await;
    let client = client(&app);
    let lease = kept(&client, "kept", &ttl(900), &KeepOptions::default()).await;
    // Three TTLs later it still holds: renewed about every 300 ms.
    sleep(Duration::from_millis(2_700)).await;
    assert!(lease.lost_error().is_none());
    let renewal = lease.renewal();
    assert!(renewal.renewals >= 6, "{renewal:?}");
    assert_eq!(renewal.ttl, Duration::from_millis(900));
    assert!(held(&app, "kept").await);
    let signal = lease.signal();
    lease.release().await.expect("released");
    assert!(!held(&app, "kept").await);
    assert!(!signal.is_lost(), "our own release is no loss");
}

#[tokio::test]
async fn a_force_release_is_the_kept_leases_loss_at_once_and_its_release_reports_it() {
    let app = spawn_app().await;
    let client = client(&app);
    let lease = kept(&client, "taken", &ttl(30_000), &KeepOptions::default()).await;
    let mut signal = lease.signal();
    let admin = super::admin_client(&app);
    let forced = admin
        .force_release("taken", Some("client test"))
        .await
        .expect("force release")
        .body;
    assert!(forced.released && !forced.delay_lifted);
    assert_eq!(forced.removed.len(), 1);
    // The watch says so long before the next heartbeat (10 s away).
    let lost = timeout(Duration::from_secs(3), signal.lost())
        .await
        .expect("told at once");
    assert_eq!(lost.reason, "force_released");
    assert_eq!(lost.lease_id, lease.id());
    match lease.release().await {
        Err(ClientError::Lost(reported)) => assert_eq!(reported, lost),
        other => panic!("the release reports the loss, got {other:?}"),
    }
}

#[tokio::test]
async fn without_its_watch_a_kept_lease_learns_its_loss_from_the_next_heartbeat() {
    let app = spawn_app().await;
    let client = client(&app);
    let keep = KeepOptions {
        watch: false,
        ..KeepOptions::default()
    };
    let lease = kept(&client, "unwatched", &ttl(900), &keep).await;
    super::admin_client(&app)
        .force_release("unwatched", None)
        .await
        .expect("force release");
    // Within a third of the TTL (the next heartbeat's 410), with a margin for slow machines.
    let lost = timeout(Duration::from_millis(900), lease.lost())
        .await
        .expect("found by the heartbeat");
    assert_eq!(lost.reason, "force_released");
}

#[tokio::test]
async fn a_kept_lease_whose_heartbeats_all_fail_is_given_up_before_its_ttl_runs_out() {
    let mut app = spawn_app().await;
    let client = client(&app).with_timeout(Duration::from_secs(1));
    let sent = Instant::now();
    let lease = kept(&client, "stranded", &ttl(3_000), &KeepOptions::default()).await;
    app.redis.stop();
    let lost = timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("given up in time");
    assert_eq!(lost.reason, UNRENEWABLE, "{lost:?}");
    // Before the server may grant the lock to someone else: the margin (1 s) was left.
    assert!(
        sent.elapsed() < Duration::from_millis(2_900),
        "{:?}",
        sent.elapsed()
    );
    app.redis.restart();
    assert!(matches!(lease.release().await, Err(ClientError::Lost(l)) if l.reason == UNRENEWABLE));
}

#[tokio::test]
async fn a_kept_lease_dropped_without_a_release_is_released_in_the_background() {
    let app = spawn_app().await;
    let client = client(&app);
    let lease = kept(&client, "dropped", &ttl(30_000), &KeepOptions::default()).await;
    drop(lease);
    // A waiter gets the lock as soon as the release lands (not after the 30 s TTL).
    let waiting = AcquireOptions {
        wait: Duration::from_secs(5),
        ..ttl(30_000)
    };
    let started = Instant::now();
    let next = client.acquire("dropped", &waiting).await.expect("granted");
    assert!(matches!(next.body, Acquired::Lease(_)));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_kept_multilease_is_lost_with_a_member_and_released_whole() {
    let app = spawn_app().await;
    let client = client(&app);
    let locks = [
        ("km-1".to_owned(), None),
        ("km-2".to_owned(), Some(LockKind::Write)),
    ];
    let multi = client
        .acquire_multi(&locks, &ttl(30_000))
        .await
        .expect("granted")
        .body;
    assert_eq!(multi.resource, Resource::Multilease);
    let lease = client.keep(multi);
    assert_eq!(lease.members().len(), 2);
    assert!(lease.members().iter().all(|m| m.fencing_token > 0));
    super::admin_client(&app)
        .force_release("km-2", None)
        .await
        .expect("force release");
    let lost = timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("told at once");
    assert_eq!(lost.member.as_deref(), Some("km-2"), "{lost:?}");
    assert!(matches!(lease.release().await, Err(ClientError::Lost(_))));
    assert!(!held(&app, "km-1").await, "the other member is given back");
}

#[tokio::test]
async fn a_revoked_kept_lease_tells_its_signal_and_is_given_up_before_the_deadline() {
    let app = spawn_app().await;
    let client = client(&app);
    let lease = kept(&client, "revoked", &ttl(60_000), &KeepOptions::default()).await;
    let mut signals = lease.signals();
    // Let the watch open.
    sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    app.admin(
        reqwest::Method::POST,
        "/v1/admin/locks/revoked/revoke",
        Some(serde_json::json!({"grace_ms": 3000, "reason": "drain"})),
    )
    .await
    .assert_status(200);
    let told = timeout(Duration::from_secs(10), async {
        loop {
            let signal = signals.recv().await.expect("signals");
            if signal.kind == "revocation_requested" {
                return signal;
            }
        }
    })
    .await
    .expect("the revocation told");
    assert_eq!(
        told.body.revocation.as_ref().map(|r| r.reason.as_str()),
        Some("drain")
    );
    assert_eq!(
        lease.revocation().map(|r| r.reason),
        Some("drain".to_owned())
    );
    let lost = timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("given up");
    assert_eq!(lost.reason, REVOKED);
    // Given up the loss margin (a sixth of the 60 s TTL: more than the grace) before the
    // deadline: at once.
    assert!(
        asked.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        held(&app, "revoked").await,
        "still held on the server until released"
    );
    assert!(matches!(lease.release().await, Err(ClientError::Lost(_))));
    assert!(
        !held(&app, "revoked").await,
        "given back: the next holder need not wait"
    );
}

#[tokio::test]
async fn without_its_watch_a_kept_multilease_learns_a_members_revocation_from_a_heartbeat() {
    let app = spawn_app().await;
    let client = client(&app);
    let locks = [("mrev-1".to_owned(), None), ("mrev-2".to_owned(), None)];
    // TTL 3 s: a heartbeat every second; the loss margin 1 s.
    let multi = client
        .acquire_multi(&locks, &ttl(3_000))
        .await
        .expect("granted")
        .body;
    let keep = KeepOptions {
        watch: false,
        ..KeepOptions::default()
    };
    let lease = client.keep_with(multi, &keep);
    let mut signals = lease.signals();
    let asked = Instant::now();
    let answer = app
        .admin(
            reqwest::Method::POST,
            "/v1/admin/locks/mrev-2/revoke",
            Some(serde_json::json!({"grace_ms": 4000, "reason": "rebalance"})),
        )
        .await;
    answer.assert_status(200);
    let deadline = answer.body["leases"][0]["revocation"]["deadline"].clone();
    // The next heartbeat's answer tells it on the member (not the 410 at the deadline).
    let told = timeout(Duration::from_millis(2_500), signals.recv())
        .await
        .expect("told by a heartbeat")
        .expect("signals");
    assert_eq!(told.kind, "revocation_requested");
    assert_eq!(told.body.lock, "mrev-2", "names the member: {told:?}");
    let revocation = lease.revocation().expect("kept on the lease");
    assert_eq!(revocation.reason, "rebalance");
    assert_eq!(deadline, revocation.deadline.as_str());
    let lost = timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("given up");
    assert_eq!(lost.reason, REVOKED, "{lost:?}");
    assert!(
        asked.elapsed() < Duration::from_millis(4_000),
        "lost after the deadline: {:?}",
        asked.elapsed()
    );
    // Told once, though every heartbeat until the loss carried it.
    assert!(
        signals.try_recv().is_err(),
        "told again: the revocation is told once"
    );
    assert!(matches!(lease.release().await, Err(ClientError::Lost(_))));
}
