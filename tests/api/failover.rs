//! A failover must not strand a shard (`acks::rule`): with `--min-replica-acks auto`, a
//! shard whose primary died with its only replica promoted serves its names again within
//! seconds (grants and heartbeats marked `degraded: no_replica`, the operators told), and
//! asks for a replica again once one is back; with an explicit count, grants there are
//! refused as `not_replicated` while heartbeats still renew. While the shard is refused the
//! answers say `not_replicated`, never `redis_unavailable`: Redis answers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::names_on_every_primary;
use crate::helpers::cluster::Cluster;
use crate::helpers::sentinel::{MASTER_NAME, Topology};
use crate::helpers::{AppOptions, Lease, Reply, TestApp, spawn_app_tweaked};
use leasehold::redis::{AckRule, ClusterSettings, SentinelSettings};

/// How soon after the promotion a failed-over shard's names must be served again.
const SERVED_AGAIN_WITHIN: Duration = Duration::from_secs(10);

/// Leasehold on `cluster` with the default Redis and ack timeouts (1 s each: the refusals'
/// labels depend on how the two meet).
pub(crate) async fn on_cluster(cluster: &Cluster, rule: AckRule) -> TestApp {
    let nodes: Vec<String> = cluster.seeds().split(',').map(str::to_owned).collect();
    spawn_app_tweaked(AppOptions::default(), |config| {
        config.redis.cluster = Some(ClusterSettings {
            nodes,
            username: None,
            password: None,
            tls: false,
        });
        config.redis.acks.rule = rule;
    })
    .await
}

pub(crate) async fn on_sentinels(topology: &Topology) -> TestApp {
    let sentinels = topology.sentinel_addrs();
    spawn_app_tweaked(AppOptions::default(), |config| {
        config.redis.sentinel = Some(SentinelSettings {
            sentinels,
            master_name: MASTER_NAME.to_owned(),
            sentinel_password: None,
            username: None,
            password: None,
            tls: false,
            db: 0,
        });
    })
    .await
}

async fn redis_status(app: &TestApp) -> Value {
    app.admin(reqwest::Method::GET, "/v1/admin/redis", None)
        .await
        .body
}

/// Waits until the Redis status satisfies `check`.
async fn status_until(app: &TestApp, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = redis_status(app).await;
        if check(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "never {what}: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Repeats `call` until it succeeds (2xx), within [`SERVED_AGAIN_WITHIN`]; every refusal on
/// the way must be a 503 saying `not_replicated`.
async fn served_again(what: &str, call: impl AsyncFnMut() -> Reply) -> Reply {
    served_within(SERVED_AGAIN_WITHIN, what, call).await
}

/// [`served_again`] within `limit`.
async fn served_within(limit: Duration, what: &str, mut call: impl AsyncFnMut() -> Reply) -> Reply {
    let started = Instant::now();
    loop {
        let reply = call().await;
        if reply.status.is_success() {
            eprintln!("{what}: served {:?} after the promotion", started.elapsed());
            return reply;
        }
        reply.assert_problem(503, "not_replicated");
        assert!(
            started.elapsed() < limit,
            "{what}: not served within {limit:?}: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/readyz` once it says ready (a topology change has the subscribers reconnect, which it
/// reports as not ready for a moment), as the deployment's admin reads it (addresses shown).
async fn readyz(app: &TestApp) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = app
            .send(
                app.http
                    .get(app.url("/readyz"))
                    .bearer_auth(crate::helpers::ADMIN_TOKEN),
            )
            .await;
        if reply.status == 200 {
            return reply.body;
        }
        assert!(Instant::now() < deadline, "never ready: {}", reply.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn scrape(app: &TestApp) -> String {
    app.http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body")
}

#[tokio::test]
async fn a_cluster_shard_whose_primary_died_is_served_again_by_its_promoted_only_replica() {
    let mut cluster = Cluster::start(3, 1).await;
    let app = on_cluster(&cluster, AckRule::Auto).await;
    status_until(&app, "every shard asking one replica", |s| {
        s["cluster"]["shards"].as_array().is_some_and(|shards| {
            shards.len() == 3 && shards.iter().all(|shard| shard["acks_required"] == 1)
        })
    })
    .await;
    let names = names_on_every_primary(&cluster, 4).await;
    let (victim, victims) = names.iter().next().expect("a primary");
    let (victim, victims) = (victim.clone(), victims.clone());
    let bystander = names
        .iter()
        .find(|(primary, _)| **primary != victim)
        .map(|(_, names)| names[0].clone())
        .expect("another primary");
    let granted = app.acquire(&victims[0], json!({"ttl_ms": 30_000})).await;
    granted.assert_status(201);
    assert_eq!(granted.body["replicas_acked"], 1, "{}", granted.body);
    assert!(granted.body.get("degraded").is_none(), "{}", granted.body);
    let lease = Lease::from_reply(&victims[0], &granted);

    let promoted = cluster.fail_over_by_killing(&victim).await;
    served_again_marked_no_replica(&app, &lease, &victims, &bystander).await;
    operators_told_of_the_unreplicated_shard(&app, &promoted).await;

    // The lost node comes back as the promoted one's replica: grants there ask for it again.
    cluster.restart(&victim).await;
    status_until(&app, "the shard asking its replica again", |s| {
        s["acks"]["unreplicated"] == json!([])
    })
    .await;
    let replicated = served_again("a grant acknowledged again", async || {
        app.acquire(&victims[3], json!({"ttl_ms": 30_000})).await
    })
    .await;
    assert_eq!(replicated.body["replicas_acked"], 1, "{}", replicated.body);
    assert!(
        readyz(&app).await.get("degraded").is_none(),
        "no longer degraded"
    );
}

/// The failed-over shard of `victims` serves again (Redis answers from here on: what is
/// refused says why): `lease` renews, a new name is granted, and once the topology says the
/// shard has no replica, grants say so and wait for none; `bystander`'s shard keeps asking
/// for its replica.
async fn served_again_marked_no_replica(
    app: &TestApp,
    lease: &Lease,
    victims: &[String],
    bystander: &str,
) {
    let beat = served_again("the held lease's heartbeat", async || {
        app.heartbeat(lease, json!({})).await
    })
    .await;
    assert!(
        matches!(
            beat.body["degraded"].as_str(),
            Some("no_replica" | "not_replicated")
        ),
        "{}",
        beat.body
    );
    let fresh = served_again("a new name on the shard", async || {
        app.acquire(&victims[1], json!({"ttl_ms": 30_000})).await
    })
    .await;
    fresh.assert_status(201);
    // Once the topology says the shard has no replica, grants say so and wait for none.
    let marked = served_again("a grant marked no_replica", async || {
        let reply = app.acquire(&victims[2], json!({"ttl_ms": 30_000})).await;
        if reply.status == 201 && reply.body["degraded"] != "no_replica" {
            let lease = Lease::from_reply(&victims[2], &reply);
            app.release(&lease, true).await.assert_status(200);
        }
        reply
    })
    .await;
    assert_eq!(marked.body["replicas_acked"], 0, "{}", marked.body);
    app.heartbeat(lease, json!({}))
        .await
        .assert_status(200)
        .body["degraded"]
        .as_str()
        .map_or_else(
            || panic!("a heartbeat there is marked"),
            |d| assert_eq!(d, "no_replica"),
        );
    // The other shards keep asking for their replica.
    let elsewhere = app.acquire(bystander, json!({})).await;
    elsewhere.assert_status(201);
    assert_eq!(elsewhere.body["replicas_acked"], 1, "{}", elsewhere.body);
    assert!(
        elsewhere.body.get("degraded").is_none(),
        "{}",
        elsewhere.body
    );
}

/// The operators are told of the shard `promoted` serves without a replica: the Redis
/// status, /readyz (still ready), the metric.
async fn operators_told_of_the_unreplicated_shard(app: &TestApp, promoted: &str) {
    let status = redis_status(app).await;
    assert_eq!(
        status["acks"]["unreplicated"],
        json!([promoted]),
        "{status}"
    );
    assert!(status["acks"]["no_replica"].as_u64() >= Some(2), "{status}");
    let ready = readyz(app).await;
    assert!(
        ready["degraded"][0]
            .as_str()
            .is_some_and(|d| d.contains(promoted)),
        "{ready}"
    );
    assert!(
        scrape(app)
            .await
            .contains("leasehold_redis_unreplicated_shards 1"),
        "the gauge"
    );
}

#[tokio::test]
async fn with_an_explicit_ack_count_a_replica_less_shard_refuses_grants_but_renews_leases() {
    let mut cluster = Cluster::start(3, 1).await;
    let app = on_cluster(&cluster, AckRule::Exactly(1)).await;
    let names = names_on_every_primary(&cluster, 4).await;
    let (victim, victims) = names.iter().next().expect("a primary");
    let (victim, victims) = (victim.clone(), victims.clone());
    let lease = app.lease(&victims[0], json!({"ttl_ms": 30_000})).await;
    cluster.fail_over_by_killing(&victim).await;

    // The held lease stays its holder's: renewed on the primary, marked.
    let beat = served_again("the held lease's heartbeat", async || {
        app.heartbeat(&lease, json!({})).await
    })
    .await;
    assert_eq!(beat.body["degraded"], "not_replicated", "{}", beat.body);
    assert_eq!(beat.body["replicas_acked"], 0, "{}", beat.body);
    // New grants there are refused, as the operator asked, and say why. (Each on a name of
    // its own: a refused grant is rolled back only once its call can no longer run again,
    // up to the Redis timeout later, and the name answers 409 meanwhile.)
    for name in &victims[1..4] {
        let refused = app.acquire(name, json!({})).await;
        refused.assert_problem(503, "not_replicated");
        assert_eq!(refused.body["replicas_required"], 1, "{}", refused.body);
    }
    let status = redis_status(&app).await;
    assert!(
        status["acks"]["not_replicated"].as_u64() >= Some(3),
        "{status}"
    );
    assert!(
        status["acks"]["unacknowledged_heartbeats"].as_u64() >= Some(1),
        "{status}"
    );
    assert_eq!(
        status["acks"]["unreplicated"],
        json!([]),
        "an explicit count is not auto"
    );
}

#[tokio::test]
async fn a_sentinel_master_with_one_replica_fails_over_and_its_names_are_served_again() {
    let mut topology = Topology::start(1, 3).await;
    let app = on_sentinels(&topology).await;
    let first = topology.master.addr();
    status_until(&app, "one ack required", |s| s["acks"]["required"] == 1).await;
    let granted = app.acquire("jobs", json!({"ttl_ms": 30_000})).await;
    granted.assert_status(201);
    assert_eq!(granted.body["replicas_acked"], 1, "{}", granted.body);
    let lease = Lease::from_reply("jobs", &granted);

    topology.master.kill();
    let moved = status_until(&app, "the new master taken on", |s| {
        s["master"].as_str().is_some_and(|m| m != first)
    })
    .await;
    let promoted = moved["master"].as_str().unwrap_or_default().to_owned();
    let beat = served_again("the held lease's heartbeat", async || {
        app.heartbeat(&lease, json!({})).await
    })
    .await;
    assert!(beat.body["degraded"].is_string(), "{}", beat.body);
    let fresh = served_again("a new name", async || {
        let reply = app.acquire("other", json!({"ttl_ms": 30_000})).await;
        if reply.status == 201 && reply.body["degraded"] != "no_replica" {
            let lease = Lease::from_reply("other", &reply);
            app.release(&lease, true).await.assert_status(200);
        }
        reply
    })
    .await;
    assert_eq!(fresh.body["degraded"], "no_replica", "{}", fresh.body);
    assert_eq!(fresh.body["replicas_acked"], 0, "{}", fresh.body);
    assert_eq!(
        redis_status(&app).await["acks"]["unreplicated"],
        json!([promoted])
    );
    assert!(readyz(&app).await["degraded"].is_array());

    // The old master comes back; the Sentinels make it the new one's replica (8 s after it
    // said it was a master: Sentinel's own delay), grants being refused meanwhile, as the
    // Sentinels count it a replica before it is linked.
    topology.master.start();
    status_until(&app, "a replica to ask again", |s| {
        s["acks"]["required"] == 1 && s["acks"]["unreplicated"] == json!([])
    })
    .await;
    let limit = Duration::from_secs(30);
    // The Sentinels' census may still flap while the returned replica links up: a grant
    // marked `no_replica` meanwhile is given back and asked again, until one is acknowledged.
    let started = Instant::now();
    let replicated = loop {
        let reply = served_within(limit, "a grant acknowledged again", async || {
            app.acquire("third", json!({"ttl_ms": 30_000})).await
        })
        .await;
        if reply.body["replicas_acked"] == 1 || started.elapsed() > limit {
            break reply;
        }
        let lease = Lease::from_reply("third", &reply);
        app.release(&lease, true).await.assert_status(200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(replicated.body["replicas_acked"], 1, "{}", replicated.body);
    let fences: Vec<u64> = [&granted, &fresh, &replicated]
        .iter()
        .map(|r| r.body["fencing_token"].as_u64().unwrap_or(0))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}
