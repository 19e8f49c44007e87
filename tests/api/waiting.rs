//! Server-side waiting: woken by pub/sub or the holder's TTL, never lost, never orphaned.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{AppOptions, next_event, spawn_app, spawn_app_with};

#[tokio::test]
async fn a_waiter_gets_the_lock_when_the_holder_releases() {
    let app = spawn_app().await;
    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    let released_at = Instant::now();
    app.release(&holder, false).await.assert_status(200);
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert!(reply.u64("fencing_token") > holder.fencing_token);
    // Woken by the unlock message, not by the 60 s TTL or the 20 s wait running out.
    assert!(released_at.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_waiter_gets_the_lock_when_the_holders_ttl_runs_out() {
    let app = spawn_app().await;
    let holder = app.lease("jobs", json!({"ttl_ms": 300})).await;
    let reply = app.acquire_with("jobs", 10_000, json!({}), None).await;
    reply.assert_status(201);
    assert!(reply.u64("fencing_token") > holder.fencing_token);
}

#[tokio::test]
async fn a_wait_that_runs_out_is_409() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 60_000, "holder": "w1"}))
        .await;
    let started = Instant::now();
    let reply = app.acquire_with("jobs", 300, json!({}), None).await;
    reply.assert_problem(409, "lock_held");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(reply.body["holder"], "w1");
}

#[tokio::test]
async fn many_waiters_each_get_the_lock_once() {
    let app = spawn_app().await;
    let first = app.lease("jobs", json!({})).await;
    let tasks: Vec<_> = (0..8).map(|_| app.spawn_waiter("jobs", 20_000)).collect();
    app.wait_for_waiters(8).await;
    app.release(&first, false).await.assert_status(200);
    let mut fences = vec![first.fencing_token];
    // Each winner releases in turn; every waiter must get exactly one grant.
    let mut pending = tasks;
    while !pending.is_empty() {
        let (reply, _, rest) = futures_util::future::select_all(pending).await;
        pending = rest;
        let reply = reply.expect("task");
        let lease = crate::helpers::Lease::from_reply("jobs", &reply);
        fences.push(lease.fencing_token);
        app.release(&lease, false).await.assert_status(200);
    }
    let mut sorted = fences.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 9, "fencing tokens are unique: {fences:?}");
}

#[tokio::test]
async fn a_client_that_disconnects_stops_waiting() {
    let app = spawn_app().await;
    let holder = app.lease("jobs", json!({})).await;
    let impatient = leasehold::client::http_builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(app.url("/v1/locks/jobs/leases?wait_ms=20000"))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    // The server noticed the closed connection and dropped the waiter...
    app.wait_for_waiters(0).await;
    // ...so the release leaves the lock free instead of granting it to nobody.
    app.release(&holder, false).await.assert_status(200);
    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["held"], false);
    assert_eq!(
        lock.u64("fencing_counter"),
        holder.fencing_token,
        "no lease was granted to the waiter that left"
    );
}

#[tokio::test]
async fn a_grant_whose_client_went_away_is_rolled_back() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    // Load the scripts first, so the paused EVALSHA below is the grant itself (on a cold
    // Redis it would only fetch NOSCRIPT, and nothing would be granted).
    let warm = app.lease("warm-up", json!({})).await;
    app.release(&warm, false).await.assert_status(200);
    next_event(&mut events, "released").await;
    // Hold back every write for a moment: the acquire script reaches Redis, and the client
    // gives up before the answer can come back.
    let mut admin = app.redis.conn().await;
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(700)
        .arg("WRITE")
        .query_async::<()>(&mut admin)
        .await
        .expect("CLIENT PAUSE");
    let impatient = leasehold::client::http_builder()
        .timeout(Duration::from_millis(200))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(app.url("/v1/locks/jobs/leases"))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    // When Redis resumes, the grant happens and is rolled back at once, not after 30 s.
    let acquired = next_event(&mut events, "acquired").await;
    let released = next_event(&mut events, "released").await;
    assert_eq!(released["lease_id"], acquired["lease_id"]);
    assert_eq!(released["reason"], "client_gone");
    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["held"], false);
    app.acquire("jobs", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_subscriber_reconnect_wakes_every_waiter() {
    let app = spawn_app().await;
    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    let mut conn = app.redis.conn().await;
    // Free the lock without an unlock message (as if it were lost), then cut the subscriber.
    redis::cmd("DEL")
        .arg("jobs")
        .query_async::<()>(&mut conn)
        .await
        .expect("DEL");
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async::<()>(&mut conn)
        .await
        .expect("CLIENT KILL");
    let started = Instant::now();
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the reconnect"
    );
    assert_ne!(reply.str("lease_id"), holder.id);
}

#[tokio::test]
async fn wait_is_capped_by_the_configured_maximum() {
    let app = crate::helpers::spawn_app_with(crate::helpers::AppOptions {
        max_wait_ms: 200,
        ..Default::default()
    })
    .await;
    app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let started = Instant::now();
    app.acquire_with("jobs", 60_000, json!({}), None)
        .await
        .assert_problem(409, "lock_held");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn shutdown_answers_waiting_requests_with_503() {
    let mut app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("jobs", 25000);
    app.wait_for_waiters(1).await;
    let started = Instant::now();
    app.shutdown.cancel();
    let reply = waiter.await.expect("waiter task");
    reply.assert_problem(503, "shutting_down");
    let task = app.task.take().expect("server task");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stops promptly")
        .expect("task")
        .expect("clean exit");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn instances_sharing_a_redis_wake_each_others_waiters() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    peer.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    let waiter = peer.spawn_waiter("jobs", 20000);
    peer.wait_for_waiters(1).await;
    app.release(&holder, false).await.assert_status(200);
    let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken through Redis by the other instance's release")
        .expect("task");
    reply.assert_status(201);
    // Either instance serves any lease.
    let lease = crate::helpers::Lease::from_reply("jobs", &reply);
    app.heartbeat(&lease, json!({})).await.assert_status(200);
}

/// A waiter sleeps until the expiry its refusal named (at most). A heartbeat that shortens the
/// holder's TTL wakes it to look again, so a holder that then stops (crashes, no release) holds
/// the waiter up until the new expiry, not the old one.
#[tokio::test]
async fn a_heartbeat_that_shortens_the_ttl_wakes_the_waiters() {
    let app = spawn_app().await;
    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("jobs", 10_000);
    app.wait_for_waiters(1).await;
    let shortened_at = Instant::now();
    app.heartbeat(&holder, json!({"ttl_ms": 300}))
        .await
        .assert_status(200);
    // The holder stops here: it neither heartbeats again nor releases.
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert!(reply.u64("fencing_token") > holder.fencing_token);
    // Without the wake-up it slept until its 10 s wait ran out (the 60 s expiry was what its
    // refusal named).
    assert!(
        shortened_at.elapsed() < Duration::from_secs(5),
        "granted {:?} after the heartbeat",
        shortened_at.elapsed()
    );
}

/// Every release publishes an unlock message (Redisson's waiters need it); an instance listens
/// for them only while one of its requests waits, so Redis does not deliver every release of
/// every lock to every instance. The first waiter arms the subscription and is still woken by
/// the release; some time after the last wait it is dropped again.
#[tokio::test]
async fn unlock_messages_are_listened_for_only_while_requests_wait() {
    let app = spawn_app().await;
    let patterns = async || app.redis.pattern_subscriptions().await;
    // Settle: the subscriber is connected (with no other tenant's stream open, it holds no
    // pattern at all).
    app.wait_until_ready().await;
    let quiet = patterns().await;
    assert_eq!(quiet, 0, "nobody waits and no tenant streams: no pattern");
    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    app.release(&holder, false).await.assert_status(200);
    assert_eq!(patterns().await, quiet, "nobody waits: no unlock patterns");

    let holder = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    let waiter = app.spawn_waiter("jobs", 20_000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while patterns().await != quiet + 4 {
        assert!(
            Instant::now() < deadline,
            "the waiter did not arm the unlock patterns"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released_at = Instant::now();
    app.release(&holder, false).await.assert_status(200);
    let reply = waiter.await.expect("waiter task");
    reply.assert_status(201);
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "woken by the unlock message, not the 60 s TTL"
    );

    // Dropped within the linger (10 s) plus the subscriber's check interval (5 s).
    let deadline = Instant::now() + Duration::from_secs(25);
    while patterns().await != quiet {
        assert!(
            Instant::now() < deadline,
            "the unlock patterns outlived the last wait"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_wait_cut_to_the_servers_limit_is_reported() {
    let app = spawn_app_with(AppOptions {
        max_wait_ms: 300,
        ..AppOptions::default()
    })
    .await;
    let granted = app.acquire_with("cut", 300_000, json!({}), None).await;
    granted.assert_status(201);
    assert_eq!(granted.body["wait_ms"], 300, "{}", granted.body);
    assert_eq!(granted.header("leasehold-wait-ms"), Some("300"));

    let refused = app.acquire_with("cut", 300_000, json!({}), None).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(refused.body["wait_ms"], 300, "{}", refused.body);
    assert_eq!(refused.header("leasehold-wait-ms"), Some("300"));

    let asked_less = app.acquire_with("cut", 100, json!({}), None).await;
    assert_eq!(asked_less.body["wait_ms"], 100);

    let url = app.url("/v1/semaphores/cut-pool/leases?wait_ms=90000");
    let permits = app
        .send(app.http.post(url).json(&json!({"limit": 1})))
        .await;
    permits.assert_status(201);
    assert_eq!(permits.header("leasehold-wait-ms"), Some("300"));
}
