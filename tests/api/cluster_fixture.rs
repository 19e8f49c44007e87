//! The Redis Cluster fixture (`helpers::cluster`) itself: it forms, covers every slot, moves
//! a slot with its keys, and fails over; the Cluster-mode tests build on it.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redis::AsyncConnectionConfig;

use crate::helpers::cluster::{Cluster, Role, SLOTS, connect, role_at, wait_until};

#[tokio::test]
async fn a_cluster_fixture_covers_every_slot_moves_a_slot_and_fails_over() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3, 1).await;
    eprintln!("3 primaries + 3 replicas up in {:?}", started.elapsed());
    assert_eq!(cluster.nodes.len(), 6);

    let primaries = cluster.primaries().await;
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    let mut ranges: Vec<(u16, u16)> = primaries
        .iter()
        .flat_map(|(_, ranges)| ranges.clone())
        .collect();
    ranges.sort();
    let mut next = 0u32;
    for (start, end) in &ranges {
        assert_eq!(u32::from(*start), next, "a gap or overlap in {ranges:?}");
        next = u32::from(*end) + 1;
    }
    assert_eq!(next, SLOTS, "{ranges:?}");
    let mut paired = Vec::new();
    for (primary, _) in &primaries {
        let replica = cluster
            .replica_of(primary)
            .await
            .unwrap_or_else(|| panic!("{primary} has no replica"))
            .addr();
        assert!(!paired.contains(&replica), "{replica} replicates twice");
        paired.push(replica);
    }

    // A slot with a few keys moves to another primary, keys and all.
    let keys = ["{fixture}a", "{fixture}b", "{fixture}c"];
    let slot = cluster.keyslot(keys[0]).await;
    for key in &keys[1..] {
        assert_eq!(cluster.keyslot(key).await, slot, "one hash tag, one slot");
    }
    let from = cluster.owner_of_slot(slot).await;
    let mut source = cluster.primary_node_of_slot(slot).await.conn().await;
    for key in keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("value of {key}"))
            .query_async(&mut source)
            .await
            .expect("SET");
    }
    let to = primaries
        .iter()
        .map(|(addr, _)| addr.clone())
        .find(|addr| *addr != from)
        .expect("another primary");
    let migrating = Instant::now();
    cluster.migrate_slot(slot, &to).await;
    eprintln!("slot {slot} moved in {:?}", migrating.elapsed());
    assert_eq!(cluster.owner_of_slot(slot).await, to);
    let mut target = cluster.node(&to).conn().await;
    for key in keys {
        let value: String = redis::cmd("GET")
            .arg(key)
            .query_async(&mut target)
            .await
            .expect("GET on the new owner");
        assert_eq!(value, format!("value of {key}"));
    }
    let moved = redis::cmd("GET")
        .arg(keys[0])
        .query_async::<Option<String>>(&mut source)
        .await
        .expect_err("the old owner redirects");
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    assert_eq!(moved.redirect_node(), Some((to.as_str(), slot)), "{moved}");

    // The new owner's replica has the keys (a write after them, acknowledged), and takes
    // over when the owner is killed.
    cluster.wait_replicated(&to).await;
    let replica = cluster.replica_of(&to).await.expect("a replica").addr();
    let killed = cluster.node(&to).pid();
    let failing = Instant::now();
    let promoted = cluster.fail_over_by_killing(&to).await;
    assert!(
        nix::sys::signal::kill(killed, None).is_err(),
        "the killed primary's process is gone"
    );
    eprintln!("{replica} promoted in {:?}", failing.elapsed());
    assert_eq!(promoted, replica);
    assert_eq!(role_at(&promoted).await.expect("ROLE"), Role::Primary);
    assert_eq!(cluster.owner_of_slot(slot).await, promoted);
    assert_eq!(cluster.primaries().await.len(), 3);
    let mut promoted_conn = cluster.node(&promoted).conn().await;
    let value: String = redis::cmd("GET")
        .arg(keys[1])
        .query_async(&mut promoted_conn)
        .await
        .expect("GET on the promoted replica");
    assert_eq!(value, "value of {fixture}b");
    assert!(!cluster.node(&to).is_running());
    eprintln!("the whole check took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_slow_migration_leaves_a_slot_split_between_two_primaries_for_a_while() {
    let cluster = Cluster::start(3, 0).await;
    let keys: Vec<String> = (0..5).map(|i| format!("{{slow}}{i}")).collect();
    let slot = cluster.keyslot(&keys[0]).await;
    let from = cluster.owner_of_slot(slot).await;
    let mut source = connect(&from).await.expect("the source");
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query_async(&mut source)
            .await
            .expect("SET");
    }
    let to = cluster
        .primaries()
        .await
        .into_iter()
        .map(|(addr, _)| addr)
        .find(|addr| *addr != from)
        .expect("another primary");
    let migration = cluster.migrate_slot_slowly(slot, &to, Duration::from_millis(300));
    // Midway, the source sends a moved key's caller to the target (ASK), still serves a key
    // it has, and refuses a command over both (TRYAGAIN).
    let midway = wait_until(Duration::from_secs(10), "keys on both sides", async || {
        let (mut moved, mut here) = (None, None);
        for key in &keys {
            match redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut source)
                .await
            {
                Err(e) if e.code() == Some("ASK") => {
                    assert_eq!(e.redirect_node(), Some((to.as_str(), slot)), "{e}");
                    moved = Some(key);
                }
                Ok(Some(_)) => here = Some(key),
                other => return Err(format!("GET {key}: {other:?}")),
            }
        }
        let (Some(moved), Some(here)) = (moved, here) else {
            return Err(format!("moved {moved:?}, here {here:?}"));
        };
        let both = redis::cmd("MGET")
            .arg(moved)
            .arg(here)
            .query_async::<Vec<Option<String>>>(&mut source)
            .await;
        match both {
            Err(e) if e.code() == Some("TRYAGAIN") => Ok(()),
            other => Err(format!("MGET over both sides: {other:?}")),
        }
    });
    tokio::join!(migration, midway);
    assert_eq!(cluster.owner_of_slot(slot).await, to);
    let mut target = connect(&to).await.expect("the target");
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut target)
        .await
        .expect("MGET on the new owner");
    assert!(
        values.iter().all(|v| v.as_deref() == Some("v")),
        "{values:?}"
    );
}

#[tokio::test]
async fn a_one_node_cluster_serves_every_slot() {
    let started = Instant::now();
    let cluster = Cluster::start(1, 0).await;
    eprintln!("1 primary up in {:?}", started.elapsed());
    let only = &cluster.nodes[0];
    assert_eq!(
        cluster.primaries().await,
        vec![(only.addr(), vec![(0, 16_383)])]
    );
    assert_eq!(cluster.seeds(), only.addr());
    assert!(cluster.replica_of(&only.addr()).await.is_none());
    let config =
        AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_millis(300)));
    let mut conn = only
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("the node");
    let _: () = redis::cmd("SET")
        .arg("anything")
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("one node serves every key");
    // Frozen, it does not answer; thawed, it does (the signal reaches redis-server itself).
    only.signal(Signal::SIGSTOP);
    let frozen = redis::cmd("PING").query_async::<String>(&mut conn).await;
    only.signal(Signal::SIGCONT);
    assert!(frozen.is_err(), "{frozen:?}");
    let mut conn = only
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("the node");
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .expect("PING");
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn a_manual_failover_swaps_a_primary_and_its_replica() {
    let cluster = Cluster::start(1, 1).await;
    let primary = cluster.owner_of_slot(0).await;
    let replica = cluster
        .replica_of(&primary)
        .await
        .expect("a replica")
        .addr();
    let failing = Instant::now();
    cluster.manual_failover(&replica).await;
    eprintln!("manual failover in {:?}", failing.elapsed());
    assert_eq!(cluster.owner_of_slot(0).await, replica);
    assert_eq!(
        role_at(&primary).await.expect("ROLE"),
        Role::Replica {
            of: replica.clone(),
            linked: true
        }
    );
}
