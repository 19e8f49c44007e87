//! A kept multilease whose members an operator revokes, against a real server
//! (`clients/PROTOCOL.md`, "Signals before the loss"), and the behaviours `clients/parity.json`
//! lists, each held by the Rust test it names.

mod support;

use std::time::Duration;

use leasehold_client::{AcquireOptions, ClientError, REVOKED, RevokeBody, Signal};
use tokio::sync::broadcast::Receiver;
use tokio::time::{Instant, timeout};

use support::Server;

/// The next `revocation_requested` the lease tells, within 3 s.
async fn next_revocation(signals: &mut Receiver<Signal>) -> Signal {
    loop {
        let signal = timeout(Duration::from_secs(3), signals.recv())
            .await
            .expect("a revocation told within 3 s")
            .expect("signals");
        if signal.kind == "revocation_requested" {
            return signal;
        }
    }
}

/// `clients/parity.json` `multileaseRevocationEarliestDeadline`.
#[tokio::test]
async fn a_multilease_keeps_the_revocation_with_the_earliest_deadline() {
    let server = Server::start().await;
    let (client, admin) = (server.client(), server.admin());
    let locks: Vec<(String, Option<_>)> = ["rev-a", "rev-b", "rev-c"]
        .iter()
        .map(|name| ((*name).to_owned(), None))
        .collect();
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(3)), // the loss margin 1 s
        ..AcquireOptions::default()
    };
    let multi = client
        .acquire_multi(&locks, &options)
        .await
        .expect("granted")
        .body;
    let lease = client.keep(multi);
    let mut signals = lease.signals();
    let revoke = async |lock: &str, grace_ms: u64| {
        let body = RevokeBody {
            grace_ms,
            reason: lock.to_owned(),
            lease_id: None,
        };
        let answer = admin.revoke(lock, &body).await.expect("revoked").body;
        answer.leases[0].revocation.deadline.clone()
    };
    let kept = || lease.revocation().map(|r| r.deadline);

    let first = revoke("rev-a", 8_000).await;
    assert_eq!(next_revocation(&mut signals).await.body.lock, "rev-a");
    assert_eq!(kept(), Some(first));
    // Told later with an earlier deadline: it replaces the first, and moves the end.
    let second = revoke("rev-b", 3_000).await;
    let asked = Instant::now();
    assert_eq!(next_revocation(&mut signals).await.body.lock, "rev-b");
    assert_eq!(kept(), Some(second.clone()));
    // A later deadline changes nothing (but is told).
    revoke("rev-c", 6_000).await;
    assert_eq!(next_revocation(&mut signals).await.body.lock, "rev-c");
    assert_eq!(kept(), Some(second.clone()));

    let lost = timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("given up");
    let after = asked.elapsed();
    // rev-b's deadline less the margin: about 2 s after it was asked (rev-a's would be 7 s).
    assert!(
        after > Duration::from_millis(1_500) && after < Duration::from_secs(3),
        "given up {after:?} after the earliest revocation"
    );
    assert_eq!(lost.reason, REVOKED, "{lost:?}");
    assert_eq!(lost.member.as_deref(), Some("rev-b"), "{lost:?}");
    assert!(lost.to_string().contains("rev-b"), "{lost}");
    let shown: Vec<(String, Option<String>)> = lease
        .members()
        .iter()
        .map(|m| {
            (
                m.lock.clone(),
                m.revocation.as_ref().map(|r| r.reason.clone()),
            )
        })
        .collect();
    let want = ["rev-a", "rev-b", "rev-c"].map(|l| (l.to_owned(), Some(l.to_owned())));
    assert_eq!(shown, want);
    assert!(matches!(lease.release().await, Err(ClientError::Lost(_))));
}

#[test]
fn every_behaviour_of_parity_json_has_its_rust_test() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("../../clients/parity.json");
    let parity: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("parity.json")).expect("json");
    let behaviours = parity["behaviours"].as_object().expect("behaviours");
    assert!(
        !behaviours.is_empty(),
        "clients/parity.json lists behaviours"
    );
    for (behaviour, by) in behaviours {
        assert!(
            by["rule"].as_str().is_some_and(|r| !r.is_empty()),
            "{behaviour}: no rule"
        );
        let named = by["rust"].as_str().expect("a Rust test");
        let (file, test) = named.split_once("::").expect("<file>::<test>");
        let source = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(
            source.contains(&format!("\nasync fn {test}()"))
                || source.contains(&format!("\nfn {test}()")),
            "{behaviour}: no Rust test {named}"
        );
    }
}
