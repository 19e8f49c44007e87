//! What a kept RedLock lease hears before its loss, against a real server with three RedLock
//! nodes of its own (`clients/PROTOCOL.md`, "Signals before the loss"): its watch tells what a
//! majority of the nodes say, and `contended` counts the RedLock requests waiting for the name.

mod support;

use std::time::Duration;

use leasehold_client::{
    AcquireOptions, Acquired, ClientError, LeaseState, LockKind, REVOKED, RevokeBody, Signal,
};
use tokio::sync::broadcast::Receiver;
use tokio::time::{Instant, timeout};

use support::Server;

/// The next signal of `kind` the lease tells (others skipped), within `within`.
async fn next_signal(signals: &mut Receiver<Signal>, kind: &str, within: Duration) -> Signal {
    let end = Instant::now() + within;
    loop {
        let signal = tokio::time::timeout_at(end, signals.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} told within {within:?}"))
            .expect("signals");
        if signal.kind == kind {
            return signal;
        }
    }
}

/// `clients/parity.json` `redlockSignals`: contended while a RedLock request waits, then an
/// operator's revocation, ignored here: given up as lost (revoked) before the deadline less the
/// margin, as `tests/revocation.rs` checks of a main-Redis multilease.
#[tokio::test]
async fn a_redlock_holder_hears_contended_and_a_revocation() {
    let server = Server::start_redlock().await;
    let (client, admin) = (server.client(), server.admin());
    let name = "red-signals";
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(10)), // the loss margin 1.67 s
        kind: Some(LockKind::Redlock),
        ..AcquireOptions::default()
    };
    let Acquired::Lease(lease) = client.acquire(name, &options).await.expect("granted").body else {
        panic!("a RedLock lock is never queued");
    };
    assert_eq!(lease.grant.nodes_acked, Some(3), "{:?}", lease.grant);
    let kept = client.keep(lease);
    let mut signals = kept.signals();

    // A RedLock request that waits 3 s (one request: the server's wait is longer), then is
    // refused: the lease is not released before the revocation.
    let other = server.client();
    let waiting = AcquireOptions {
        wait: Duration::from_secs(3),
        ..options.clone()
    };
    let waiter = tokio::spawn(async move { other.acquire(name, &waiting).await });
    let contended = next_signal(&mut signals, "contended", Duration::from_secs(5)).await;
    assert!(contended.body.waiters >= Some(1), "{contended:?}");
    assert_eq!(contended.body.lock, name);
    let refused = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter's end within 10 s")
        .expect("the waiter's task");
    assert!(
        matches!(&refused, Err(ClientError::Problem(p)) if p.code == "lock_held"),
        "the waiter of a held RedLock lock: {refused:?}"
    );

    let body = RevokeBody {
        grace_ms: 3_000,
        reason: "rotate the nodes".to_owned(),
        lease_id: None,
    };
    let answer = admin.revoke(name, &body).await.expect("revoked").body;
    let asked = Instant::now();
    assert_eq!(answer.leases.len(), 1, "{answer:?}");
    assert_eq!(answer.leases[0].lease_id, kept.id());
    let deadline = answer.leases[0].revocation.deadline.clone();
    let told = next_signal(&mut signals, "revocation_requested", Duration::from_secs(3)).await;
    let revocation = told.body.revocation.expect("the revocation");
    assert_eq!(revocation.reason, "rotate the nodes");
    assert_eq!(revocation.deadline, deadline);
    assert_eq!(kept.revocation().map(|r| r.deadline), Some(deadline));

    let lost = timeout(Duration::from_secs(5), kept.lost())
        .await
        .expect("given up within 5 s of a 3 s revocation");
    let after = asked.elapsed();
    println!("given up {after:?} after the revocation");
    // The deadline less the margin: about 1.3 s after it was asked, before the server evicts.
    assert!(
        after > Duration::from_millis(800) && after < Duration::from_millis(2_500),
        "given up {after:?} after the revocation"
    );
    assert_eq!(lost.reason, REVOKED, "{lost:?}");
    assert_eq!(lost.member, None, "{lost:?}");
    let id = kept.id();
    assert!(matches!(kept.release().await, Err(ClientError::Lost(_))));
    // The release gave the lock back on the nodes, before the deadline.
    let state = client
        .lease_status(leasehold_client::Resource::Lock, name, id)
        .await
        .expect("the lease's state")
        .body
        .state;
    assert_eq!(state, LeaseState::Released);
}
