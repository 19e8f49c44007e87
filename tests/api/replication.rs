//! Redis replication: grants and heartbeats that replicas acknowledge (`WAIT`), refused and
//! given back when they do not; and Sentinel mode, where a lease outlives a failover.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::helpers::sentinel::{MASTER_NAME, Topology};
use crate::helpers::{AppOptions, TestApp, spawn_app_tweaked};
use leasehold::redis::{AckRule, SentinelSettings};

/// Leasehold on the master of `topology` by URL (standalone mode), acks as `rule`.
async fn on_master(topology: &Topology, rule: AckRule) -> TestApp {
    let url = format!("redis://{}", topology.master.addr());
    spawn_app_tweaked(AppOptions::default(), |config| {
        config.redis.url = url;
        config.redis.acks.rule = rule;
        config.redis.acks.timeout = Duration::from_millis(300);
    })
    .await
}

/// Leasehold following `topology`'s Sentinels.
pub(crate) async fn on_sentinels(topology: &Topology, master_name: &str) -> TestApp {
    let sentinels = topology.sentinel_addrs();
    let master_name = master_name.to_owned();
    spawn_app_tweaked(AppOptions::default(), |config| {
        config.redis.sentinel = Some(SentinelSettings {
            sentinels,
            master_name,
            sentinel_password: None,
            username: None,
            password: None,
            tls: false,
            db: 0,
        });
        config.redis.acks.timeout = Duration::from_millis(500);
    })
    .await
}

/// Polls `GET /v1/admin/redis` until `check` holds (at most `limit`).
async fn redis_status_until(
    app: &TestApp,
    limit: Duration,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let reply = app
            .admin(reqwest::Method::GET, "/v1/admin/redis", None)
            .await;
        reply.assert_status(200);
        if check(&reply.body) {
            return reply.body;
        }
        assert!(
            started.elapsed() < limit,
            "timed out waiting for {what}: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn grants_and_heartbeats_report_the_replicas_that_acknowledged_them() {
    let topology = Topology::start(1, 0).await;
    let app = on_master(&topology, AckRule::Auto).await;
    // `auto` asks for one once the master is seen with its replica (read every second).
    redis_status_until(&app, Duration::from_secs(5), "acks required", |s| {
        s["acks"]["required"] == 1
    })
    .await;
    let granted = app.acquire("jobs", json!({})).await;
    granted.assert_status(201);
    assert_eq!(granted.body["replicas_acked"], 1, "{}", granted.body);
    let lease = crate::helpers::Lease::from_reply("jobs", &granted);
    let beat = app.heartbeat(&lease, json!({})).await;
    beat.assert_status(200);
    assert_eq!(beat.body["replicas_acked"], 1, "{}", beat.body);
    // A refusal waits for nobody and says nothing of replicas.
    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_status(409);
    assert!(refused.body.get("replicas_acked").is_none());
}

#[tokio::test]
async fn with_every_replica_stopped_a_grant_is_refused_and_nothing_of_it_stands() {
    let topology = Topology::start(1, 0).await;
    let app = on_master(&topology, AckRule::Exactly(1)).await;
    let held = app.lease("kept", json!({"ttl_ms": 60_000})).await;
    topology.replicas[0].signal(Signal::SIGSTOP);

    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(503, "not_replicated");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.body["replicas_acked"], 0, "{}", refused.body);
    assert_eq!(refused.body["replicas_required"], 1);
    // The grant was given back: the lock is free on the master too.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lock = app.inspect_lock("jobs").await;
        if lock.status == 404 || lock.body["held"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "still held: {}", lock.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A heartbeat too few replicas have is answered all the same, marked: it extended the
    // lease on the master, where the lease is still its holder's (a 503 would only have the
    // holder give up a lease that blocks everyone else until it expires).
    let beat = app.heartbeat(&held, json!({})).await;
    beat.assert_status(200);
    assert_eq!(beat.body["degraded"], "not_replicated", "{}", beat.body);
    assert_eq!(beat.body["replicas_acked"], 0, "{}", beat.body);
    let status = app
        .admin(reqwest::Method::GET, "/v1/admin/redis", None)
        .await;
    assert!(
        status.body["acks"]["not_replicated"].as_u64() >= Some(1),
        "{}",
        status.body
    );
    assert!(
        status.body["acks"]["unacknowledged_heartbeats"].as_u64() >= Some(1),
        "{}",
        status.body
    );

    // Once the replica is back (it acknowledges again within a moment), grants stand.
    topology.replicas[0].signal(Signal::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(10);
    let granted = loop {
        let reply = app.acquire("jobs", json!({})).await;
        if reply.status != 503 || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    granted.assert_status(201);
    assert_eq!(granted.body["replicas_acked"], 1);
    let beat = app.heartbeat(&held, json!({})).await;
    beat.assert_status(200);
    assert!(beat.body.get("degraded").is_none(), "{}", beat.body);
}

#[tokio::test]
async fn a_lease_outlives_a_sentinel_failover_and_fences_keep_growing() {
    let mut topology = Topology::start(2, 3).await;
    let app = on_sentinels(&topology, MASTER_NAME).await;
    let first = topology.master.addr();
    let status = redis_status_until(&app, Duration::from_secs(5), "one ack required", |s| {
        s["acks"]["required"] == 1
    })
    .await;
    assert_eq!(status["mode"], "sentinel");
    assert_eq!(status["master"], first.as_str());

    let granted = app.acquire("jobs", json!({"ttl_ms": 60_000})).await;
    granted.assert_status(201);
    assert!(granted.body["replicas_acked"].as_u64() >= Some(1));
    let lease = crate::helpers::Lease::from_reply("jobs", &granted);
    let other = app.lease("other", json!({"ttl_ms": 60_000})).await;
    // A waiter parked across the failover: woken by the release on the new master.
    let waiter = app.spawn_waiter("jobs", 25_000);

    topology.master.kill();
    let moved = redis_status_until(&app, Duration::from_secs(20), "the new master", |s| {
        s["master"].as_str().is_some_and(|m| m != first)
    })
    .await;
    assert_eq!(moved["sentinel"]["failovers"], 1, "{moved}");
    assert_eq!(
        Some(moved["master"].as_str().unwrap_or_default().to_owned()),
        topology.named_master()
    );

    // The lease is still there and still its holder's.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lock = loop {
        let lock = app.inspect_lock("jobs").await;
        if lock.status == 200 || Instant::now() > deadline {
            break lock;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    lock.assert_status(200);
    assert_eq!(lock.body["held"], true, "{}", lock.body);
    app.acquire("jobs", json!({})).await.assert_status(409);
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    app.release(&lease, true).await.assert_status(200);
    // The waiter parked before the failover never hangs: woken when its subscription went
    // (the master died) to look again, it answers 503 when that look met the failover, or,
    // still waiting on the new master, gets the lock at the release, not at its deadline.
    let released = Instant::now();
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the parked waiter hung")
        .expect("join");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "answered after {:?}",
        released.elapsed()
    );
    if woken.status == 201 {
        let woken = crate::helpers::Lease::from_reply("jobs", &woken);
        app.release(&woken, true).await.assert_status(200);
    } else {
        woken.assert_problem(503, "redis_unavailable");
    }
    let after = app.lease("jobs", json!({})).await;
    assert!(
        after.fencing_token > lease.fencing_token && after.fencing_token > other.fencing_token,
        "fences went back: {} after {} and {}",
        after.fencing_token,
        lease.fencing_token,
        other.fencing_token
    );
    // Operators see it on the dashboard too (a loopback viewer of the deployment).
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
    assert!(
        html.contains("sentinel") && html.contains(&topology.named_master().unwrap_or_default()),
        "{html}"
    );
}

#[tokio::test]
async fn readyz_says_not_ready_while_no_master_is_known() {
    let mut topology = Topology::start(2, 3).await;
    let app = on_sentinels(&topology, MASTER_NAME).await;
    app.get("/readyz").await.assert_status(200);
    // The master dies while no Sentinel can answer: nobody names a new one. (Briefly: a
    // Sentinel stopped for 2 s or more wakes up in TILT mode and does nothing for 30 s.)
    for sentinel in &topology.sentinels {
        sentinel.signal(Signal::SIGSTOP);
    }
    topology.master.kill();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let ready = loop {
        // (The first answer may be the PING that found the master gone.)
        let ready = app.get("/readyz").await;
        let masterless = ready.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no Redis master"));
        if masterless || Instant::now() > deadline {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Every dashboard page says so meanwhile.
    let banner = app
        .http
        .get(app.url("/"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("page");
    // The Sentinels come back, promote the replica, and the instance follows.
    for sentinel in &topology.sentinels {
        sentinel.signal(Signal::SIGCONT);
    }
    assert!(banner.contains("Redis is failing over"), "{banner}");
    ready.assert_problem(503, "redis_unavailable");
    assert!(
        ready.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no Redis master")),
        "{}",
        ready.body
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.get("/readyz").await.status != 200 {
        assert!(Instant::now() < deadline, "never ready again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // (The other replica needs a moment to follow the new master and acknowledge.)
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = app.acquire("jobs", json!({})).await;
        if reply.status == 201 {
            break;
        }
        reply.assert_problem(503, reply.body["code"].as_str().unwrap_or("?"));
        assert!(
            Instant::now() < deadline,
            "no grant after the failover: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A waiting request whose grant too few replicas acknowledged waits on (the grant is given
/// back and tried again) and is granted once the replica is back within its wait; one whose
/// wait ends first is answered 503 `not_replicated` at its deadline, not at the first refusal.
#[tokio::test]
async fn waiters_wait_through_grants_too_few_replicas_acknowledged() {
    let topology = Topology::start(1, 0).await;
    let app = on_master(&topology, AckRule::Exactly(1)).await;
    app.lease("line2", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    topology.replicas[0].signal(Signal::SIGSTOP);
    let started = Instant::now();
    let lock = app.spawn_post("/v1/locks/jobs/leases?wait_ms=6000", json!({}));
    let fair = app.spawn_post(
        "/v1/locks/line/leases?wait_ms=6000",
        json!({"kind": "fair"}),
    );
    let campaign = app.spawn_post(
        "/v1/elections/el/candidates?wait_ms=6000",
        json!({"value": "a"}),
    );
    // A fair request that does not wait is not handed a ticket no replica has (its place
    // could go with a failover): 503, and nothing of it stands in line.
    let ticket = app
        .acquire_with("line2", 0, json!({"kind": "fair"}), None)
        .await;
    ticket.assert_problem(503, "not_replicated");
    let short = app.acquire_with("brief", 1200, json!({}), None).await;
    short.assert_problem(503, "not_replicated");
    assert!(
        started.elapsed() >= Duration::from_millis(1100),
        "answered after {:?} of a 1200 ms wait",
        started.elapsed()
    );
    topology.replicas[0].signal(Signal::SIGCONT);
    for (what, task) in [("lock", lock), ("fair", fair), ("campaign", campaign)] {
        let reply = task.await.expect("task");
        assert_eq!(reply.status, 201, "{what}: {}", reply.body);
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    let line = app.inspect_lock("line2").await;
    assert_eq!(
        line.body["queue_length"], 0,
        "no ticket left behind: {}",
        line.body
    );
}
