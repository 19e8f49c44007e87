//! Redis Cluster mode against a real local cluster (`helpers::cluster`): locks spread over
//! every primary; every operation of every kind keeps its keys in its lock's slot; waiters
//! woken across instances and by Redisson's sharded messages; listing and expiries over
//! every shard; a killed primary's names served again with no fence going back; a slot
//! moved under load with nothing lost or handed to the wrong caller.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::helpers::cluster::{Cluster, query};
use crate::helpers::{AppOptions, Lease, TestApp, spawn_app_tweaked};
use leasehold::redis::ClusterSettings;

/// Leasehold on `cluster` (its own standalone `redis` is a bystander).
pub(crate) async fn on_cluster(cluster: &Cluster) -> TestApp {
    on_cluster_with(cluster, AppOptions::default()).await
}

async fn on_cluster_with(cluster: &Cluster, options: AppOptions) -> TestApp {
    let nodes: Vec<String> = cluster.seeds().split(',').map(str::to_owned).collect();
    spawn_app_tweaked(options, |config| {
        config.redis.cluster = Some(ClusterSettings {
            nodes,
            username: None,
            password: None,
            tls: false,
        });
        config.redis.acks.timeout = Duration::from_millis(500);
    })
    .await
}

/// Names that land on every primary of `cluster` (at least `per_primary` on each).
pub(crate) async fn names_on_every_primary(
    cluster: &Cluster,
    per_primary: usize,
) -> HashMap<String, Vec<String>> {
    let primaries = cluster.primaries().await;
    let mut by_primary: HashMap<String, Vec<String>> = HashMap::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let slot = cluster.keyslot(&name).await;
        let owner = primaries
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(addr, _)| addr.clone())
            .expect("every slot is served");
        by_primary.entry(owner).or_default().push(name);
        if by_primary.len() == primaries.len()
            && by_primary.values().all(|n| n.len() >= per_primary)
        {
            break;
        }
    }
    by_primary
}

/// The metrics text.
async fn scrape(app: &TestApp) -> String {
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.text().await.expect("metrics")
}

/// Every key of every primary.
async fn every_key(cluster: &Cluster) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for (primary, _) in cluster.primaries().await {
        let found: Vec<String> = query(&primary, redis::cmd("KEYS").arg("*"))
            .await
            .expect("KEYS");
        keys.extend(found.into_iter().map(|k| (primary.clone(), k)));
    }
    keys
}

/// The text a key's slot is computed from: its hash tag, or all of it.
fn hashed_part(key: &str) -> &str {
    match key.split_once('{') {
        Some((_, rest)) => match rest.split_once('}') {
            Some((tag, _)) if !tag.is_empty() => tag,
            _ => key,
        },
        None => key,
    }
}

#[tokio::test]
async fn every_operation_of_every_kind_keeps_its_keys_in_its_locks_slot_on_every_primary() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    app.get("/readyz").await.assert_status(200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.body["redis_mode"], "cluster", "{}", ready.body);

    // Redis itself refuses a function that touches two slots: a run that goes through
    // without an error has kept each call in one slot (checked here, not assumed).
    let primary = cluster.primaries().await[0].0.clone();
    let refused: redis::RedisResult<String> = query(
        &primary,
        redis::cmd("FUNCTION").arg("LOAD").arg(
            "#!lua name=crossslot\nredis.register_function('two_slots', function(k) \
             redis.call('GET', k[1]); return redis.call('GET', '{other}x') end)",
        ),
    )
    .await;
    refused.expect("a test function loads");
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| hashed_part(k) != "other")
        .expect("a key");
    let mut conn = cluster
        .node(&cluster.owner_of_slot(cluster.keyslot(&key).await).await)
        .conn()
        .await;
    let cross: redis::RedisResult<Value> = redis::cmd("FCALL")
        .arg("two_slots")
        .arg(1)
        .arg(&key)
        .query_async(&mut conn)
        .await
        .map(|v: redis::Value| json!(format!("{v:?}")));
    assert!(
        cross.is_err(),
        "Redis let a function cross slots: {cross:?}"
    );

    // Every kind, every operation, on names that land on every primary.
    let names = names_on_every_primary(&cluster, 1).await;
    let mut used = HashSet::new();
    for (i, name) in names.values().map(|n| n[0].clone()).enumerate() {
        used.insert(name.clone());
        let kind = ["reentrant", "fair", "write"][i % 3];
        // A hold, its reentry, a heartbeat, a waiter (the waitlist) and its timeout.
        let lease = app
            .lease(&name, json!({"kind": kind, "ttl_ms": 60_000}))
            .await;
        if kind == "reentrant" {
            let reentry = app
                .acquire_with(&name, 0, json!({}), Some(&lease.token))
                .await;
            reentry.assert_status(200);
            assert_eq!(reentry.body["reentry_count"], 2);
        }
        app.heartbeat(&lease, json!({})).await.assert_status(200);
        app.inspect_lease(&lease).await.assert_status(200);
        let waiter = app.spawn_waiter(&name, 300);
        if kind == "fair" {
            // A fair ticket in the queue and its timeout set.
            let ticket = app.ticket(&name, json!({"kind": "fair"})).await;
            app.leave(&ticket).await;
        }
        let waited = waiter.await.expect("waiter");
        assert!(
            matches!(waited.status.as_u16(), 409 | 202),
            "{}",
            waited.body
        );
        app.inspect_lock(&name).await.assert_status(200);
        app.release(&lease, true).await.assert_status(200);
        // Read holds (two of them) and an Idempotency-Key.
        let read = app.lease(&name, json!({"kind": "read"})).await;
        let again = app
            .send_with_key(
                app.http
                    .post(app.url(&format!("/v1/locks/{name}/leases")))
                    .json(&json!({"kind": "read"})),
                &format!("idem-{name}"),
            )
            .await;
        again.assert_status(201);
        app.release(&read, true).await.assert_status(200);

        // A semaphore (its permits set) under a name of its own on the same primary.
        let sem = format!("{name}-sem");
        used.insert(sem.clone());
        let permits = app.permits(&sem, json!({"permits": 2, "limit": 3})).await;
        app.heartbeat(&permits, json!({})).await.assert_status(200);
        app.release(&permits, true).await.assert_status(200);
        // One kept: its permit set stays to be looked at below.
        app.permits(&sem, json!({"permits": 1, "limit": 3, "ttl_ms": 60_000}))
            .await;
    }

    // Every key a lock left behind sits in its lock's slot, on the primary serving it; the
    // rest are Leasehold's own, in the slot of `{leasehold/}`.
    let own_slot = cluster.keyslot("{leasehold/}").await;
    let primaries = cluster.primaries().await;
    let mut per_primary: HashMap<String, usize> = HashMap::new();
    for (primary, key) in every_key(&cluster).await {
        let part = hashed_part(&key);
        let slot = cluster.keyslot(&key).await;
        if part == "leasehold/" {
            assert_eq!(slot, own_slot, "{key}");
            continue;
        }
        assert!(used.contains(part), "a key of no lock used here: {key}");
        assert_eq!(
            slot,
            cluster.keyslot(part).await,
            "{key} is not in its lock's slot"
        );
        let served = primaries
            .iter()
            .find(|(_, r)| r.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(p, _)| p.clone());
        assert_eq!(served.as_deref(), Some(primary.as_str()), "{key}");
        *per_primary.entry(primary).or_default() += 1;
    }
    assert_eq!(
        per_primary.len(),
        3,
        "every primary holds lock state: {per_primary:?}"
    );
    // Among them what every kind of state looks like: histories, idempotency records, the
    // semaphores' permit sets, read holds' timeouts (the rest expire with their leases).
    let keys: Vec<String> = every_key(&cluster)
        .await
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    for shape in [
        ":leasehold:history",
        ":leasehold:idem:",
        "}:timeout",
        ":rwlock_timeout:",
    ] {
        assert!(
            keys.iter().any(|k| k.contains(shape)),
            "no {shape} key in {keys:?}"
        );
    }
}

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
async fn listing_pages_through_the_locks_of_every_shard() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    let names = names_on_every_primary(&cluster, 4).await;
    let all: Vec<String> = names.values().flatten().cloned().collect();
    for name in &all {
        app.lease(name, json!({"ttl_ms": 60_000})).await;
    }
    let mut listed = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let path = match &cursor {
            Some(c) => format!("/v1/locks?limit=5&cursor={c}"),
            None => "/v1/locks?limit=5".to_owned(),
        };
        let page = app.get(&path).await;
        page.assert_status(200);
        for lock in page.body["locks"].as_array().expect("locks") {
            listed.insert(lock["name"].as_str().unwrap_or_default().to_owned());
        }
        cursor = page.body["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    let wanted: HashSet<String> = all.into_iter().collect();
    assert_eq!(listed, wanted);
    // The metrics census counts them all too.
    let text = scrape(&app).await;
    let live = text
        .lines()
        .find_map(|l| l.strip_prefix("leasehold_live_locks "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(live, Some(wanted.len() as f64), "{text}");
}

#[tokio::test]
async fn expiries_on_every_primary_are_recorded_as_they_happen() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster_with(
        &cluster,
        AppOptions {
            min_ttl_ms: 100,
            ..AppOptions::default()
        },
    )
    .await;
    // The live events (a classic PUBLISH: the cluster bus brings it to every node).
    let mut events = cluster.nodes[0]
        .client()
        .get_async_pubsub()
        .await
        .expect("pubsub");
    events
        .subscribe("leasehold:events")
        .await
        .expect("subscribe");
    let mut events = events.into_on_message();
    let names = names_on_every_primary(&cluster, 1).await;
    let mut waiting: HashSet<String> = HashSet::new();
    for name in names.values().map(|n| n[0].clone()) {
        app.lease(&name, json!({"ttl_ms": 300})).await;
        waiting.insert(name);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(msg)) = tokio::time::timeout(left, events.next()).await else {
            panic!("no expiry recorded for {waiting:?} within 5 s");
        };
        let payload: Value = serde_json::from_slice(msg.get_payload_bytes()).unwrap_or(Value::Null);
        for event in payload.as_array().into_iter().flatten() {
            if event["type"] == "expired" {
                waiting.remove(event["lock"].as_str().unwrap_or_default());
            }
        }
    }
}

#[tokio::test]
async fn a_primary_that_lost_the_functions_gets_them_again() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    let names = names_on_every_primary(&cluster, 1).await;
    for (primary, names) in &names {
        let _: () = query(primary, redis::cmd("FUNCTION").arg("FLUSH"))
            .await
            .expect("FUNCTION FLUSH");
        let lease = app.lease(&names[0], json!({})).await;
        app.release(&lease, true).await.assert_status(200);
    }
}

#[tokio::test]
async fn the_redis_status_and_metrics_show_every_primary_with_its_slots() {
    let cluster = Cluster::start(3, 1).await;
    let app = on_cluster(&cluster).await;
    let status = loop {
        let reply = app
            .admin(reqwest::Method::GET, "/v1/admin/redis", None)
            .await;
        reply.assert_status(200);
        if reply.body["cluster"]["shards"]
            .as_array()
            .is_some_and(|s| s.iter().all(|s| !s["node"].is_null()))
            && reply.body["acks"]["required"] == 1
        {
            break reply.body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["mode"], "cluster", "{status}");
    let shards = status["cluster"]["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 3, "{status}");
    assert_eq!(status["cluster"]["covers_every_slot"], true);
    let slots: u64 = shards
        .iter()
        .map(|s| s["slot_count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(slots, 16384);
    for shard in shards {
        assert_eq!(
            shard["replicas"].as_array().map(Vec::len),
            Some(1),
            "{shard}"
        );
        assert_eq!(shard["node"]["replicas_online"], 1, "{shard}");
    }
    let metrics = scrape(&app).await;
    assert!(
        metrics.contains("leasehold_redis_cluster_primaries 3"),
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("leasehold_redis_node_slots{node=").count(),
        3,
        "{metrics}"
    );
    let page = app
        .http
        .get(app.url("/redis"))
        // The deployment's admins see the Redis page (its addresses).
        .header("leasehold-key", crate::helpers::ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("page");
    for shard in shards {
        assert!(
            html.contains(shard["primary"].as_str().unwrap_or("?")),
            "{html}"
        );
    }
    assert!(html.contains("data-cluster-nodes"), "{html}");
}

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
