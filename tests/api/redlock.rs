//! RedLock (`"kind": "redlock"` over `--redlock-nodes`): granted by a majority of independent
//! Redis masters, refused with 503 no_quorum (leaving nothing behind) without one, and sharing
//! Redisson's RLock layout on every node.

use std::time::{Duration, Instant};

use leasehold::leases::redlock::RedlockSettings;
use serde_json::json;

use crate::helpers::RedisServer;
use crate::helpers::{AppOptions, Lease, spawn_app, spawn_app_tweaked};
use crate::matrix::kinds::with_nodes;

/// What node `node` holds under key `name` (Redisson's RLock hash: holder field → count).
async fn hash_of(node: &RedisServer, name: &str) -> Vec<(String, String)> {
    redis::cmd("HGETALL")
        .arg(name)
        .query_async(&mut node.conn().await)
        .await
        .expect("HGETALL")
}

async fn exists(node: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<u64>(&mut node.conn().await)
        .await
        .expect("EXISTS")
        == 1
}

#[tokio::test]
async fn a_redlock_lease_is_granted_by_all_three_nodes_in_redissons_layout() {
    let (app, nodes) = with_nodes().await;
    let reply = app
        .acquire("jobs", json!({"kind": "redlock", "ttl_ms": 10_000}))
        .await;
    reply.assert_status(201);
    assert_eq!(reply.body["kind"], "redlock");
    assert_eq!(reply.u64("nodes_acked"), 3);
    let validity = reply.u64("validity_ms");
    assert!(
        validity > 0 && validity <= 10_000 - 102,
        "validity is the TTL less elapsed and drift: {validity}"
    );
    let lease = Lease::from_reply("jobs", &reply);
    for node in &nodes {
        assert_eq!(
            hash_of(node, "jobs").await,
            vec![(format!("{}:1", lease.id), "1".to_owned())],
            "one holder field, the same lease on every node"
        );
    }
    // Nothing on the main Redis: a RedLock lease lives on its nodes.
    assert!(!exists(&app.redis, "jobs").await);

    let beat = app.heartbeat(&lease, json!({"ttl_ms": 20_000})).await;
    beat.assert_status(200);
    assert_eq!(beat.u64("nodes_acked"), 3);
    assert!(beat.u64("validity_ms") > 10_000);
    let seen = app.inspect_lease(&lease).await;
    seen.assert_status(200);
    assert_eq!(seen.body["kind"], "redlock");
    assert_eq!(seen.body["state"], "held");

    // Its watch says lost when it is released (on every node).
    let mut watch = app.watch(&lease).await;
    app.release(&lease, true).await.assert_status(200);
    loop {
        let event = watch
            .next(Duration::from_secs(5))
            .await
            .expect("the watch says lost");
        if event.event == "lost" {
            assert!(
                event.data.contains("\"reason\":\"released\""),
                "{}",
                event.data
            );
            break;
        }
    }
    for node in &nodes {
        assert!(!exists(node, "jobs").await, "released on every node");
    }
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn one_node_down_still_grants_with_two_and_heartbeats_with_two() {
    let (app, mut nodes) = with_nodes().await;
    nodes[0].stop();
    let reply = app
        .acquire("jobs", json!({"kind": "redlock", "ttl_ms": 5_000}))
        .await;
    reply.assert_status(201);
    assert_eq!(reply.u64("nodes_acked"), 2);
    let lease = Lease::from_reply("jobs", &reply);
    let beat = app.heartbeat(&lease, json!({})).await;
    beat.assert_status(200);
    assert_eq!(beat.u64("nodes_acked"), 2);
    // Another caller is refused: the majority is held.
    app.acquire("jobs", json!({"kind": "redlock"}))
        .await
        .assert_problem(409, "lock_held");
    app.release(&lease, true).await.assert_status(200);
}

#[tokio::test]
async fn two_nodes_down_is_503_no_quorum_and_leaves_nothing_behind() {
    let (app, mut nodes) = with_nodes().await;
    nodes[0].stop();
    nodes[1].stop();
    let reply = app
        .acquire("jobs", json!({"kind": "redlock", "ttl_ms": 5_000}))
        .await;
    reply.assert_problem(503, "no_quorum");
    assert_eq!(reply.u64("nodes_acked"), 1, "the live node granted, alone");
    assert_eq!(reply.u64("quorum"), 2);
    assert!(reply.header("retry-after").is_some());
    assert!(
        !exists(&nodes[2], "jobs").await,
        "the live node's grant was given back"
    );
}

#[tokio::test]
async fn a_heartbeat_without_a_majority_is_503_and_a_majority_gone_is_410() {
    use nix::sys::signal::Signal;
    let (app, nodes) = with_nodes().await;
    let lease = app
        .lease("jobs", json!({"kind": "redlock", "ttl_ms": 5_000}))
        .await;
    // Two nodes frozen: they answer nothing in time.
    nodes[0].signal(Signal::SIGSTOP);
    nodes[1].signal(Signal::SIGSTOP);
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(503, "no_quorum");
    nodes[0].signal(Signal::SIGCONT);
    nodes[1].signal(Signal::SIGCONT);
    // Their data lost (as a restart without persistence would): the lease is gone there.
    for node in &nodes[..2] {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut node.conn().await)
            .await
            .expect("FLUSHALL");
    }
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    assert!(
        !exists(&nodes[2], "jobs").await,
        "the minority's hold was let go"
    );
}

#[tokio::test]
async fn a_redisson_holder_on_two_nodes_excludes_us_and_we_take_nothing() {
    let (app, nodes) = with_nodes().await;
    let redisson = "8a4c2f1e-3b5d-4c6e-9f70-81a2b3c4d5e6:57";
    for node in &nodes[..2] {
        redis::pipe()
            .cmd("HSET")
            .arg("jobs")
            .arg(redisson)
            .arg(1)
            .cmd("PEXPIRE")
            .arg("jobs")
            .arg(30_000)
            .query_async::<()>(&mut node.conn().await)
            .await
            .expect("a Redisson hold");
    }
    app.acquire("jobs", json!({"kind": "redlock"}))
        .await
        .assert_problem(409, "lock_held");
    assert!(
        !exists(&nodes[2], "jobs").await,
        "the third node's grant was given back"
    );
}

#[tokio::test]
async fn a_waiter_wakes_on_an_unlock_message_from_the_nodes() {
    let (app, nodes) = with_nodes().await;
    let holder = app
        .lease("jobs", json!({"kind": "redlock", "ttl_ms": 60_000}))
        .await;
    let waiter = app.spawn_post(
        "/v1/locks/jobs/leases?wait_ms=20000",
        json!({"kind": "redlock", "ttl_ms": 5_000}),
    );
    // Refused once, it listens for unlock messages on every node.
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes {
        while node.pattern_subscriptions().await == 0 {
            assert!(Instant::now() < deadline, "the waiter never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let released_at = Instant::now();
    app.release(&holder, true).await.assert_status(200);
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert_eq!(reply.u64("nodes_acked"), 3);
    // Woken by the unlock message, not by the 60 s TTL or the 20 s wait.
    assert!(released_at.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn without_nodes_redlock_is_refused() {
    let app = spawn_app().await;
    app.acquire("jobs", json!({"kind": "redlock"}))
        .await
        .assert_problem(422, "redlock_disabled");
}

#[tokio::test]
async fn the_same_server_twice_is_refused_at_start() {
    let node = RedisServer::start();
    let other = RedisServer::start();
    let socket = node.socket();
    let dir = socket.parent().expect("dir").display().to_string();
    // Two spellings of one socket: the same server, found by its run id.
    let urls = vec![
        node.url(),
        format!("redis+unix://{dir}/./r.sock"),
        other.url(),
    ];
    let main = RedisServer::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut config = leasehold::server::ServerConfig::new(main.url());
    config.redlock = Some(RedlockSettings {
        nodes: urls,
        ca_file: None,
    });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let started = tokio::time::timeout(
        Duration::from_secs(10),
        leasehold::server::run(listener, config, shutdown.clone()),
    )
    .await
    .expect("refused at once");
    shutdown.cancel();
    let error = started.expect_err("refused").to_string();
    assert!(error.contains("same Redis server"), "{error}");
}

#[test]
fn an_even_count_or_fewer_than_three_is_refused() {
    let urls = |n: usize| -> Vec<String> { (0..n).map(|i| format!("redis://h{i}:6379")).collect() };
    assert!(leasehold::config::check_redlock_nodes(&urls(3)).is_ok());
    assert!(leasehold::config::check_redlock_nodes(&urls(2)).is_err());
    assert!(leasehold::config::check_redlock_nodes(&urls(4)).is_err());
    let twice = vec![
        "redis://a:1".to_owned(),
        "redis://a:1".to_owned(),
        "redis://b:1".to_owned(),
    ];
    assert!(leasehold::config::check_redlock_nodes(&twice).is_err());
}

#[tokio::test]
async fn the_lock_page_shows_the_name_on_each_redlock_node() {
    let (app, mut nodes) = with_nodes().await;
    let lease = Lease::from_reply(
        "jobs",
        &app.acquire(
            "jobs",
            json!({"kind": "redlock", "ttl_ms": 60_000, "holder": "nightly"}),
        )
        .await,
    );
    nodes[2].stop();
    let page = app
        .http
        .get(app.url("/locks/jobs"))
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("RedLock nodes"), "{html}");
    assert_eq!(html.matches("<td>held</td>").count(), 2, "{html}");
    assert_eq!(html.matches("<td>unreachable</td>").count(), 1, "{html}");
    assert!(html.contains("nightly"), "the holder's label");
    app.release(&lease, true).await.assert_status(200);
}

#[tokio::test]
async fn with_a_node_down_a_waiter_waits_for_a_holder_on_one_node_instead_of_failing() {
    let (app, mut nodes) = with_nodes().await;
    nodes[0].stop();
    // A Redisson client holds the lock on node 1 alone: with node 0 down no majority is
    // possible now, but the holder may let go within the wait.
    let redisson = "8a4c2f1e-3b5d-4c6e-9f70-81a2b3c4d5e6:57";
    redis::pipe()
        .cmd("HSET")
        .arg("jobs")
        .arg(redisson)
        .arg(1)
        .cmd("PEXPIRE")
        .arg("jobs")
        .arg(60_000)
        .query_async::<()>(&mut nodes[1].conn().await)
        .await
        .expect("a Redisson hold");
    let waiter = app.spawn_post(
        "/v1/locks/jobs/leases?wait_ms=20000",
        json!({"kind": "redlock", "ttl_ms": 5_000}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes[1..] {
        while node.pattern_subscriptions().await == 0 {
            assert!(Instant::now() < deadline, "the waiter never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let released_at = Instant::now();
    // Redisson's unlock: the field goes, the message goes out on its channel.
    redis::pipe()
        .cmd("DEL")
        .arg("jobs")
        .cmd("PUBLISH")
        .arg("redisson_lock__channel:{jobs}")
        .arg(0)
        .query_async::<()>(&mut nodes[1].conn().await)
        .await
        .expect("a Redisson unlock");
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert_eq!(reply.u64("nodes_acked"), 2);
    assert!(released_at.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_redlock_lease_reenters_on_every_node_up_to_the_depth_cap() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let app = spawn_app_tweaked(AppOptions::default(), |config| {
        config.limits.per_lock.reentry_depth = 2;
        config.redlock = Some(RedlockSettings {
            nodes: urls,
            ca_file: None,
        });
    })
    .await;
    let lease = app.lease("jobs", json!({"kind": "redlock"})).await;
    let again = app
        .acquire_with("jobs", 0, json!({"kind": "redlock"}), Some(&lease.token))
        .await;
    again.assert_status(200);
    assert_eq!(again.u64("reentry_count"), 2);
    assert_eq!(again.u64("nodes_acked"), 3);
    for node in &nodes {
        assert_eq!(
            hash_of(node, "jobs").await,
            vec![(format!("{}:1", lease.id), "2".to_owned())]
        );
    }
    app.acquire_with("jobs", 0, json!({"kind": "redlock"}), Some(&lease.token))
        .await
        .assert_problem(409, "reentry_too_deep");
    for node in &nodes {
        assert_eq!(
            hash_of(node, "jobs").await,
            vec![(format!("{}:1", lease.id), "2".to_owned())],
            "the third level was given back on every node"
        );
    }
    // One level, then the last: the lock is free everywhere.
    let one = app.release(&lease, false).await;
    one.assert_status(200);
    assert_eq!(one.u64("reentry_count"), 1);
    app.release(&lease, false).await.assert_status(200);
    for node in &nodes {
        assert!(!exists(node, "jobs").await);
    }
}

#[tokio::test]
async fn a_watch_says_lost_when_the_lease_runs_out_on_the_majority_with_a_node_down() {
    let (app, mut nodes) = with_nodes().await;
    nodes[0].stop();
    let lease = app
        .lease("jobs", json!({"kind": "redlock", "ttl_ms": 3_000}))
        .await;
    let started = Instant::now();
    let mut watch = app.watch(&lease).await;
    loop {
        let event = watch
            .next(Duration::from_secs(10))
            .await
            .expect("the watch says lost");
        if event.event == "lost" {
            assert!(
                event.data.contains("\"reason\":\"expired\""),
                "{}",
                event.data
            );
            break;
        }
    }
    assert!(started.elapsed() < Duration::from_secs(8));
}
