//! Waiters woken across a cluster: by a release on another instance on every shard, by
//! Redisson's sharded messages (and Redisson's waiters by ours), and after their lock's slot
//! moved to another primary.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{names_on_every_primary, on_cluster};
use crate::helpers::Lease;
use crate::helpers::cluster::Cluster;

#[tokio::test]
async fn a_waiter_on_one_instance_is_woken_by_a_release_on_another_on_every_shard() {
    let cluster = Cluster::start(3, 0).await;
    let (a, b) = (on_cluster(&cluster).await, on_cluster(&cluster).await);
    let names = names_on_every_primary(&cluster, 1).await;
    for name in names.values().map(|n| n[0].clone()) {
        let lease = a.lease(&name, json!({"ttl_ms": 60_000})).await;
        let waiter = b.spawn_waiter(&name, 20_000);
        b.wait_for_waiters(1).await;
        // Past the subscription's arming: the waiter relies on the message now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        a.release(&lease, true).await.assert_status(200);
        let woken = waiter.await.expect("waiter");
        woken.assert_status(201);
        let took = released.elapsed();
        assert!(
            took < Duration::from_millis(800),
            "{name}: woken {took:?} after the release (the TTL was 60 s)"
        );
        b.release(&Lease::from_reply(&name, &woken), true)
            .await
            .assert_status(200);
    }
}

#[tokio::test]
async fn redisson_clients_and_leasehold_wake_each_other_with_sharded_messages() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    let name = "shared-with-redisson";
    let owner = cluster.owner_of_slot(cluster.keyslot(name).await).await;
    let mut node = cluster.node(&owner).conn().await;
    // A Redisson RLock held (its layout: a hash of `<client id>:<thread>` -> count).
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg("7d5c1c1e-0000-4000-8000-000000000001:1")
        .arg(1)
        .cmd("PEXPIRE")
        .arg(name)
        .arg(60_000)
        .query_async(&mut node)
        .await
        .expect("a Redisson hold");
    let waiter = app.spawn_waiter(name, 20_000);
    app.wait_for_waiters(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Redisson's unlock on a Redis 7 cluster: delete, then SPUBLISH 0 on its channel.
    let released = Instant::now();
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(name)
        .cmd("SPUBLISH")
        .arg(format!("redisson_lock__channel:{{{name}}}"))
        .arg(0)
        .query_async(&mut node)
        .await
        .expect("Redisson's unlock");
    let woken = waiter.await.expect("waiter");
    woken.assert_status(201);
    assert!(
        released.elapsed() < Duration::from_millis(800),
        "woken {:?} after Redisson's message (its hold had 60 s left)",
        released.elapsed()
    );

    // The other way: a Redisson waiter listens with SSUBSCRIBE on the same channel, and
    // our release publishes there.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let client =
        redis::cluster::ClusterClientBuilder::new(vec![format!("redis://{owner}/?protocol=resp3")])
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()
            .expect("a cluster client");
    let mut listener = client.get_async_connection().await.expect("connection");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    listener.ssubscribe(&channel).await.expect("SSUBSCRIBE");
    app.release(&Lease::from_reply(name, &woken), true)
        .await
        .assert_status(200);
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(push) = rx.recv().await {
            if push.kind == redis::PushKind::SMessage {
                return push;
            }
        }
        panic!("the push channel closed");
    })
    .await
    .expect("our release reached a sharded subscriber");
    assert_eq!(
        heard.data.first(),
        Some(&redis::Value::BulkString(channel.into_bytes()))
    );
}

#[tokio::test]
async fn a_waiter_whose_locks_slot_moved_is_still_woken_by_the_release() {
    let cluster = Cluster::start(3, 0).await;
    let (a, b) = (on_cluster(&cluster).await, on_cluster(&cluster).await);
    let name = "moving-lock";
    let slot = cluster.keyslot(name).await;
    let from = cluster.owner_of_slot(slot).await;
    let to = cluster
        .primaries()
        .await
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| *p != from)
        .expect("another primary");
    let lease = a.lease(name, json!({"ttl_ms": 60_000})).await;
    let waiter = b.spawn_waiter(name, 30_000);
    b.wait_for_waiters(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The slot moves: Redis withdraws the waiter's subscription on the old owner.
    cluster.migrate_slot(slot, &to).await;
    assert_eq!(cluster.owner_of_slot(slot).await, to);
    // Time for the instances to see the new topology (read every second) and the waiter to
    // listen where the slot is now.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let released = Instant::now();
    a.release(&lease, true).await.assert_status(200);
    let woken = waiter.await.expect("waiter");
    woken.assert_status(201);
    assert!(
        released.elapsed() < Duration::from_millis(800),
        "woken {:?} after the release (its TTL had ~57 s left)",
        released.elapsed()
    );
}
