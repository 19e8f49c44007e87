//! The cluster's topology changing under Leasehold: a killed primary's names are served by
//! its promoted replica with no fence going back; a slot moved under load loses no grant and
//! gives no caller another's reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{names_on_every_primary, on_cluster};
use crate::helpers::Lease;
use crate::helpers::cluster::Cluster;

#[tokio::test]
async fn a_killed_primarys_names_are_served_by_its_promoted_replica_and_no_fence_goes_back() {
    // Two replicas each: after the failover the promoted one still has a replica to
    // acknowledge its grants (with none, they stand on it alone, marked: tests/api/failover.rs).
    let mut cluster = Cluster::start(3, 2).await;
    let app = on_cluster(&cluster).await;
    // Grants wait for a replica once every primary is seen with one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !app
        .admin(reqwest::Method::GET, "/v1/admin/redis", None)
        .await
        .body["cluster"]["shards"]
        .as_array()
        .is_some_and(|shards| shards.iter().all(|s| s["acks_required"] == 1))
    {
        assert!(Instant::now() < deadline, "acks never required");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names = names_on_every_primary(&cluster, 2).await;
    let (victim, victims) = names.iter().next().expect("a primary");
    let (victim, victims) = (victim.clone(), victims.clone());
    let mut leases = Vec::new();
    for name in &victims {
        let reply = app.acquire(name, json!({"ttl_ms": 60_000})).await;
        reply.assert_status(201);
        assert!(
            reply.body["replicas_acked"].as_u64() >= Some(1),
            "{}",
            reply.body
        );
        leases.push(Lease::from_reply(name, &reply));
    }
    let promoted = cluster.fail_over_by_killing(&victim).await;
    assert_ne!(promoted, victim);
    // The names are served again: the leases taken before still hold, and heartbeat.
    for lease in &leases {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let beat = app.heartbeat(lease, json!({})).await;
            if beat.status == 200 {
                break;
            }
            assert_eq!(beat.status.as_u16(), 503, "{}", beat.body);
            assert!(
                Instant::now() < deadline,
                "never served again: {}",
                beat.body
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        app.inspect_lock(&lease.lock).await.assert_status(200);
        assert_eq!(app.inspect_lock(&lease.lock).await.body["held"], true);
    }
    // Released and taken again on the promoted replica: the fence only goes up.
    for lease in &leases {
        app.release(lease, true).await.assert_status(200);
        let again = app.lease(&lease.lock, json!({})).await;
        assert!(
            again.fencing_token > lease.fencing_token,
            "{}: fence {} after {}",
            lease.lock,
            again.fencing_token,
            lease.fencing_token
        );
    }
}

#[tokio::test]
async fn a_slot_moved_under_load_loses_no_grant_and_gives_no_caller_anothers_reply() {
    let cluster = Cluster::start(3, 0).await;
    let app = Arc::new(on_cluster(&cluster).await);
    let names = names_on_every_primary(&cluster, 4).await;
    let (from, moving) = names.iter().next().expect("a primary");
    let moving = moving.clone();
    let to = cluster
        .primaries()
        .await
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p != from)
        .expect("another primary");
    let all: Vec<String> = names.values().flatten().cloned().collect();
    // Who holds what, as the callers saw it: a second holder at once is an overlap.
    let holders: Arc<std::sync::Mutex<HashMap<String, usize>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (app, holders, stop, all) = (app.clone(), holders.clone(), stop.clone(), all.clone());
        workers.push(tokio::spawn(async move {
            let (mut granted, mut unavailable, mut i) = (0u64, 0u64, worker);
            while !stop.is_cancelled() {
                let name = &all[i % all.len()];
                i += 7;
                let reply = app.acquire(name, json!({"ttl_ms": 3_000})).await;
                match reply.status.as_u16() {
                    201 => {
                        assert_eq!(reply.body["lock"], name.as_str(), "another's reply");
                        let before = holders
                            .lock()
                            .expect("holders")
                            .insert(name.clone(), worker);
                        assert_eq!(before, None, "{name} granted while held");
                        granted += 1;
                        let lease = Lease::from_reply(name, &reply);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        holders.lock().expect("holders").remove(name);
                        let released = app.release(&lease, true).await;
                        if released.status != 200 {
                            // Unanswerable now (a moment of TRYAGAIN): its TTL frees it;
                            // no one else may hold it meanwhile, which the map would show.
                            assert_eq!(released.status.as_u16(), 503, "{}", released.body);
                            unavailable += 1;
                        }
                    }
                    409 => {}
                    503 => unavailable += 1,
                    other => panic!("{name}: {other} {}", reply.body),
                }
            }
            (granted, unavailable)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slots: Vec<u16> = Vec::new();
    for name in &moving {
        slots.push(cluster.keyslot(name).await);
    }
    slots.sort_unstable();
    slots.dedup();
    for &slot in &slots {
        cluster
            .migrate_slot_slowly(slot, &to, Duration::from_millis(20))
            .await;
    }
    for &slot in &slots {
        cluster
            .migrate_slot_slowly(slot, from, Duration::from_millis(20))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    let mut granted = 0;
    for worker in workers {
        let (g, _) = worker.await.expect("a worker");
        granted += g;
    }
    assert!(
        granted > 50,
        "the load was too light to prove anything: {granted} grants"
    );
    // And the moved names work as before: each is granted again (within the 3 s TTL of a
    // grant whose release, or whose rollback after a 503, met a moment of TRYAGAIN).
    for name in &moving {
        let reply = app.acquire_with(name, 5_000, json!({}), None).await;
        reply.assert_status(201);
        let lease = Lease::from_reply(name, &reply);
        app.release(&lease, true).await.assert_status(200);
    }
}
