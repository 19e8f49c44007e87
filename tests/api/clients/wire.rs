//! What the server added to its answers reaches the Rust client typed: a force release that
//! lifts a lock-delay (`delay_lifted`), a key's quotas (`max_state_bytes`), its leases and
//! their end at its revocation (`ended_leases`), a multilease's locks hidden from a reader
//! (`hidden_locks`), and RedLock's `nodes_acked` and `validity_ms` on every renewal of a
//! kept lease, with the lock shown as `redlock`.

use std::time::Duration;

use leasehold::client::{
    AcquireOptions, Acquired, Client, ClientOptions, KeyCreateBody, KeyQuotasBody, KeyRole,
    LockKind, Resource,
};
use leasehold::leases::redlock::RedlockSettings;
use tokio::time::{sleep, timeout};

use super::{admin_client, client};
use crate::helpers::{AppOptions, RedisServer, spawn_app, spawn_app_tweaked};

fn with_key(app: &crate::helpers::TestApp, secret: &str) -> Client {
    let options = ClientOptions {
        api_key: Some(secret.parse().expect("a key")),
        ..ClientOptions::default()
    };
    Client::with_options(app.url("").parse().expect("url"), &options).expect("client")
}

#[tokio::test]
async fn a_force_release_of_a_free_lock_in_its_lock_delay_lifts_the_delay() {
    let app = spawn_app().await;
    let client = client(&app);
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(30)),
        lock_delay: Some(Duration::from_secs(60)),
        ..AcquireOptions::default()
    };
    client.acquire("lifted", &options).await.expect("granted");
    let admin = admin_client(&app);
    let first = admin
        .force_release("lifted", None)
        .await
        .expect("forced")
        .body;
    assert!(first.released && !first.delay_lifted, "{first:?}");
    let second = admin
        .force_release("lifted", None)
        .await
        .expect("lifted")
        .body;
    assert!(second.released && second.delay_lifted && second.removed.is_empty());
    let again = client.acquire("lifted", &AcquireOptions::default()).await;
    assert!(matches!(
        again.expect("free again").body,
        Acquired::Lease(_)
    ));
}

#[tokio::test]
async fn a_keys_quotas_and_leases_are_read_and_its_revocation_ends_them() {
    let app = spawn_app().await;
    let admin = admin_client(&app);
    let quotas = KeyQuotasBody {
        max_state_bytes: Some(1_000_000),
        ..KeyQuotasBody::default()
    };
    let created = admin
        .create_key(&KeyCreateBody {
            name: "worker".into(),
            roles: vec![KeyRole::Client],
            quotas,
            ..KeyCreateBody::default()
        })
        .await
        .expect("created")
        .body;
    assert_eq!(created.key.quotas.max_state_bytes, Some(1_000_000));
    let worker = with_key(&app, &created.secret);
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(60)),
        ..AcquireOptions::default()
    };
    worker.acquire("key-held", &options).await.expect("granted");
    let leases = admin
        .list_key_leases(&created.key.id)
        .await
        .expect("listed")
        .body;
    assert_eq!(leases.key_id, created.key.id);
    assert_eq!(leases.leases.len(), 1);
    assert_eq!(leases.leases[0].lock, "key-held");
    let revoked = admin
        .revoke_key(&created.key.id)
        .await
        .expect("revoked")
        .body;
    assert_eq!(revoked.ended_leases, Some(1));
    let status = admin.lock_status("key-held").await.expect("status").body;
    assert!(!status.held, "{status:?}");
}

#[tokio::test]
async fn a_reader_sees_a_multilease_without_the_locks_its_key_may_not_name() {
    let app = spawn_app().await;
    let locks = [("jobs-1".to_owned(), None), ("payroll".to_owned(), None)];
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(60)),
        ..AcquireOptions::default()
    };
    let multi = client(&app)
        .acquire_multi(&locks, &options)
        .await
        .expect("granted")
        .body;
    let created = admin_client(&app)
        .create_key(&KeyCreateBody {
            name: "jobs-reader".into(),
            roles: vec![KeyRole::Reader],
            patterns: vec!["jobs-*".into()],
            ..KeyCreateBody::default()
        })
        .await
        .expect("created")
        .body;
    let reader = with_key(&app, &created.secret);
    let lock = reader.lock_status("jobs-1").await.expect("status").body;
    let membership = lock.holders[0].multilease.as_ref().expect("a member");
    assert_eq!(membership.lease_id, multi.grant.lease_id);
    assert_eq!(membership.locks, ["jobs-1"]);
    assert_eq!(membership.hidden_locks, 1);
    let member = &multi.members[0];
    let lease = reader
        .lease_status(Resource::Lock, "jobs-1", member.lease_id)
        .await
        .expect("lease")
        .body;
    let membership = lease.multilease.expect("a member");
    assert_eq!((membership.locks.len(), membership.hidden_locks), (1, 1));
}

#[tokio::test]
async fn a_kept_redlock_lease_carries_its_nodes_and_validity_on_every_renewal() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls = nodes.iter().map(RedisServer::url).collect();
    let app = spawn_app_tweaked(AppOptions::default(), |config| {
        config.redlock = Some(RedlockSettings {
            nodes: urls,
            ca_file: None,
        });
    })
    .await;
    let client = client(&app);
    let options = AcquireOptions {
        ttl: Some(Duration::from_millis(1_500)),
        kind: Some(LockKind::Redlock),
        ..AcquireOptions::default()
    };
    let Acquired::Lease(lease) = client.acquire("red", &options).await.expect("granted").body
    else {
        panic!("queued");
    };
    assert_eq!(lease.grant.nodes_acked, Some(3));
    let lease = client.keep(lease);
    let status = client.lock_status("red").await.expect("status").body;
    assert_eq!(status.kind.as_deref(), Some("redlock"));
    // Renewed every 500 ms: wait (bounded) for the first renewal's answer.
    timeout(Duration::from_secs(3), async {
        while lease.renewal().renewals == 0 {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("renewed");
    let renewal = lease.renewal();
    assert_eq!(renewal.nodes_acked, Some(3), "{renewal:?}");
    let validity = renewal.validity.expect("a validity");
    assert!(
        validity > Duration::ZERO && validity < renewal.ttl,
        "{renewal:?}"
    );
    lease.release().await.expect("released");
}
