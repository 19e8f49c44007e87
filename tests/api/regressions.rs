//! Failures the safety harness (`benches/safety`) found or the issue on proving mutual
//! exclusion named, each pinned by an example: a user relies on every one of these.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::helpers::{
    ADMIN_TOKEN, AppOptions, Lease, Reply, TestApp, Ticket, spawn_app, spawn_app_with,
};

/// A fair lock held by someone, and a ticket queued behind it (202).
async fn queued_ticket(app: &TestApp) -> (Lease, Reply) {
    let holder = app.lease("fifo", json!({"kind": "fair"})).await;
    let queued = app
        .acquire("fifo", json!({"kind": "fair", "holder": "t"}))
        .await;
    queued.assert_status(202);
    (holder, queued)
}

fn location(reply: &Reply) -> String {
    reply.header("location").expect("Location").to_owned()
}

/// The lock's only holder right now.
async fn holder_of(app: &TestApp, lock: &str) -> Value {
    let view = app.inspect_lock(lock).await;
    assert_eq!(
        view.body["holders"].as_array().map(Vec::len),
        Some(1),
        "{}",
        view.body
    );
    view.body["holders"][0].clone()
}

#[tokio::test]
async fn a_ticket_polled_again_after_its_grant_gets_the_same_grant_and_keeps_it() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    app.release(&holder, false).await.assert_status(200);
    let granted = app.poll_ticket(&at, &token, 5_000).await;
    granted.assert_status(201);
    let again = app.poll_ticket(&at, &token, 0).await;
    again.assert_status(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.str("lease_id"), granted.str("lease_id"));
    assert_eq!(again.u64("fencing_token"), granted.u64("fencing_token"));
    // The lease is still held: nobody else gets the lock, and its holder can heartbeat.
    assert_eq!(
        holder_of(&app, "fifo").await["lease_id"],
        granted.str("lease_id")
    );
    app.acquire("fifo", json!({"kind": "fair"}))
        .await
        .assert_status(202);
    let lease = Ticket::from_reply("fifo", &queued).lease(&granted);
    app.heartbeat(&lease, json!({})).await.assert_status(200);
}

#[tokio::test]
async fn two_polls_of_one_ticket_at_once_both_get_the_grant_and_it_stays() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    let poll = || {
        let req = app
            .http
            .post(app.url(&format!("{at}?wait_ms=10000")))
            .bearer_auth(&token);
        tokio::spawn(async move { Reply::read(req.send().await.expect("request")).await })
    };
    let (first, second) = (poll(), poll());
    app.wait_for_waiters(2).await;
    app.release(&holder, false).await.assert_status(200);
    let (first, second) = (first.await.expect("task"), second.await.expect("task"));
    for reply in [&first, &second] {
        reply.assert_status(201);
        assert_eq!(reply.str("lease_id"), queued.str("ticket_id"));
    }
    assert_eq!(
        holder_of(&app, "fifo").await["lease_id"],
        queued.str("ticket_id")
    );
}

#[tokio::test]
async fn a_read_lease_reentered_with_a_longer_ttl_keeps_its_last_level() {
    let app = spawn_app().await;
    let reader = app
        .lease("catalog", json!({"kind": "read", "ttl_ms": 300}))
        .await;
    app.acquire_with(
        "catalog",
        0,
        json!({"kind": "read", "ttl_ms": 10_000}),
        Some(&reader.token),
    )
    .await
    .assert_status(200);
    let released = app.release(&reader, false).await;
    released.assert_status(200);
    assert_eq!(released.body["reentry_count"], 1);
    // Past the first level's own TTL: the lease's TTL is now 10 s for every level.
    tokio::time::sleep(Duration::from_millis(600)).await;
    app.acquire("catalog", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");
    app.inspect_lease(&reader).await.body["state"]
        .as_str()
        .map_or_else(|| panic!("no state"), |s| assert_eq!(s, "held"));
    app.release(&reader, false).await.assert_status(200);
    app.lease("catalog", json!({"kind": "write"})).await;
}

#[tokio::test]
async fn all_true_releases_every_level_of_both_modes() {
    let app = spawn_app().await;
    let lease = app.lease("catalog", json!({"kind": "write"})).await;
    for kind in ["write", "read", "read"] {
        app.acquire_with("catalog", 0, json!({"kind": kind}), Some(&lease.token))
            .await
            .assert_status(200);
    }
    let released = app.release(&lease, true).await;
    released.assert_status(200);
    assert_eq!(released.body["released"], true);
    assert_eq!(released.body["reentry_count"], 0);
    assert_eq!(app.inspect_lock("catalog").await.body["held"], false);
    app.lease("catalog", json!({"kind": "write"})).await;
}

#[tokio::test]
async fn an_abandoned_ticket_blocks_other_kinds_only_for_its_liveness_window() {
    let app = spawn_app_with(AppOptions {
        ticket_timeout_ms: 300,
        ..Default::default()
    })
    .await;
    let (holder, _abandoned) = queued_ticket(&app).await;
    app.release(&holder, false).await.assert_status(200);
    app.acquire("fifo", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
    // Its place runs out (never polled); then the name is free for any kind.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = app.acquire("fifo", json!({})).await;
        if reply.status == 201 {
            break;
        }
        reply.assert_problem(409, "kind_conflict");
        assert!(
            Instant::now() < deadline,
            "the dead ticket still blocks the name"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_semaphore_whose_permits_are_back_can_be_a_lock_again() {
    let app = spawn_app().await;
    let lease = app.permits("pool", json!({"limit": 3})).await;
    app.acquire("pool", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
    app.release(&lease, false).await.assert_status(200);
    let lock = app.lease("pool", json!({})).await;
    assert!(lock.fencing_token > lease.fencing_token);
    // And back to a semaphore, with any limit, once the lock is free.
    app.release(&lock, false).await.assert_status(200);
    app.acquire_permits("pool", 0, json!({"limit": 7}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn a_lease_whose_name_became_a_semaphore_is_lost_not_an_error() {
    let app = spawn_app().await;
    for kind in ["reentrant", "read"] {
        let name = format!("x-{kind}");
        let lease = app
            .lease(&name, json!({"kind": kind, "ttl_ms": 60_000}))
            .await;
        app.force_release(&name, Some(ADMIN_TOKEN))
            .await
            .assert_status(200);
        app.acquire_permits(&name, 0, json!({"limit": 2}))
            .await
            .assert_status(201);
        app.heartbeat(&lease, json!({}))
            .await
            .assert_problem(410, "lease_lost");
        app.release(&lease, true)
            .await
            .assert_problem(410, "lease_lost");
        app.acquire_with(&name, 0, json!({}), Some(&lease.token))
            .await
            .assert_problem(410, "lease_lost");
        assert_eq!(
            app.inspect_lease(&lease).await.body["state"],
            "force_released"
        );
    }
}

#[tokio::test]
async fn an_admin_can_clear_a_semaphore_and_change_its_limit() {
    let app = spawn_app().await;
    let held = app
        .acquire_permits("pool", 0, json!({"limit": 3, "permits": 2}))
        .await;
    held.assert_status(201);
    let changed = app
        .admin(
            reqwest::Method::PUT,
            "/v1/admin/semaphores/pool/limit",
            Some(json!({"limit": 5})),
        )
        .await;
    changed.assert_status(200);
    assert_eq!(changed.body["previous"], 3);
    assert_eq!(changed.body["available"], 3);
    app.acquire_permits("pool", 0, json!({"limit": 3}))
        .await
        .assert_problem(409, "limit_mismatch");
    app.acquire_permits("pool", 0, json!({"limit": 5, "permits": 3}))
        .await
        .assert_status(201);
    let cleared = app
        .admin(
            reqwest::Method::DELETE,
            "/v1/admin/semaphores/pool?clear=true&reason=resize",
            None,
        )
        .await;
    cleared.assert_status(200);
    assert_eq!(cleared.body["removed"].as_array().map(Vec::len), Some(2));
    app.get("/v1/semaphores/pool")
        .await
        .assert_problem(404, "lock_not_found");
    let old = Lease::from_reply("pool", &held);
    let gone = app
        .get(&format!("/v1/semaphores/pool/leases/{}", old.id))
        .await;
    assert_eq!(gone.body["state"], "force_released");
    app.acquire_permits("pool", 0, json!({"limit": 2}))
        .await
        .assert_status(201);
    app.admin(
        reqwest::Method::PUT,
        "/v1/admin/semaphores/nothing/limit",
        Some(json!({"limit": 5})),
    )
    .await
    .assert_problem(404, "lock_not_found");
}

#[tokio::test]
async fn semaphore_sizes_are_capped() {
    let app = spawn_app().await;
    let started = Instant::now();
    app.acquire_permits("huge", 0, json!({"limit": 100_000}))
        .await
        .assert_problem(422, "invalid_body");
    let biggest = app
        .acquire_permits("big", 0, json!({"limit": 1000, "permits": 1000}))
        .await;
    biggest.assert_status(201);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn keys_of_other_programs_are_never_changed_or_revealed() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg("41")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let _: () = redis::cmd("HSET")
        .arg("profile")
        .arg("email")
        .arg("someone@example.com")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    for name in ["counter", "profile"] {
        let reply = app.acquire(name, json!({})).await;
        reply.assert_problem(409, "kind_conflict");
        assert_eq!(reply.body["held_as"], "foreign");
        assert!(!reply.body.to_string().contains("email"));
        let reply = app.acquire_permits(name, 0, json!({"limit": 50})).await;
        reply.assert_problem(409, "kind_conflict");
        assert_eq!(reply.body["held_as"], "foreign");
        let view = app.inspect_lock(name).await;
        assert_eq!(view.body["kind"], "foreign");
        assert_eq!(view.body["holders"], json!([]));
        app.force_release(name, Some(ADMIN_TOKEN))
            .await
            .assert_problem(409, "kind_conflict");
    }
    let counter: String = redis::cmd("GET")
        .arg("counter")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(counter, "41");
    let profile: Vec<String> = redis::cmd("HGETALL")
        .arg("profile")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(profile, ["email", "someone@example.com"]);
}

#[tokio::test]
async fn a_poll_that_meets_a_frozen_redis_keeps_the_ticket_in_line() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    app.redis.signal(Signal::SIGSTOP);
    let failed = app.poll_ticket(&at, &token, 0).await;
    app.redis.signal(Signal::SIGCONT);
    failed.assert_problem(503, "redis_unavailable");
    let still = app.poll_ticket(&at, &token, 0).await;
    still.assert_status(202);
    assert_eq!(still.body["position"], 1);
    app.release(&holder, false).await.assert_status(200);
    app.poll_ticket(&at, &token, 5_000).await.assert_status(201);
}

#[tokio::test]
async fn an_instance_shutting_down_mid_poll_keeps_the_ticket_in_line() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    let waiting = {
        let req = peer
            .http
            .post(peer.url(&format!("{at}?wait_ms=20000")))
            .bearer_auth(&token);
        tokio::spawn(async move { Reply::read(req.send().await.expect("request")).await })
    };
    peer.wait_for_waiters(1).await;
    peer.shutdown.cancel();
    waiting
        .await
        .expect("task")
        .assert_problem(503, "shutting_down");
    let still = app.poll_ticket(&at, &token, 0).await;
    still.assert_status(202);
    assert_eq!(still.body["position"], 1);
    app.release(&holder, false).await.assert_status(200);
    app.poll_ticket(&at, &token, 5_000).await.assert_status(201);
}

/// A new lease on `lock`, built afresh for each retry of it.
fn acquire_request(app: &TestApp, lock: &str, body: Value) -> reqwest::RequestBuilder {
    app.http
        .post(app.url(&format!("/v1/locks/{lock}/leases")))
        .json(&body)
}

/// One more level of `lease`, built afresh for each retry of it.
fn reentry_request(app: &TestApp, lease: &Lease) -> reqwest::RequestBuilder {
    acquire_request(app, &lease.lock, json!({})).bearer_auth(&lease.token)
}

#[tokio::test]
async fn a_retried_request_with_an_idempotency_key_gets_the_first_answer() {
    let app = spawn_app().await;
    let new = || acquire_request(&app, "jobs", json!({"holder": "a"}));
    let first = app.send_with_key(new(), "new-1").await;
    first.assert_status(201);
    let retry = app.send_with_key(new(), "new-1").await;
    retry.assert_status(201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    for field in ["lease_id", "token", "fencing_token", "expires_at"] {
        assert_eq!(retry.body[field], first.body[field], "{field}");
    }
    let lease = Lease::from_reply("jobs", &first);
    let reenter = || reentry_request(&app, &lease);
    let once = app.send_with_key(reenter(), "again-1").await;
    let twice = app.send_with_key(reenter(), "again-1").await;
    assert_eq!(once.body["reentry_count"], 2);
    assert_eq!(twice.body["reentry_count"], 2, "a retry adds no level");
    assert_eq!(holder_of(&app, "jobs").await["reentry_count"], 2);
    let release = || {
        app.http
            .delete(app.url(&format!("/v1/locks/jobs/leases/{}", lease.id)))
            .bearer_auth(&lease.token)
    };
    let once = app.send_with_key(release(), "release-1").await;
    let twice = app.send_with_key(release(), "release-1").await;
    assert_eq!(once.body["reentry_count"], 1);
    assert_eq!(
        twice.body["reentry_count"], 1,
        "a retry releases no second level"
    );
    assert_eq!(holder_of(&app, "jobs").await["reentry_count"], 1);
    // The same key with another request is refused.
    let other = app
        .http
        .post(app.url("/v1/locks/jobs/leases"))
        .json(&json!({"holder": "b"}));
    app.send_with_key(other, "new-1")
        .await
        .assert_problem(422, "idempotency_key_reused");
}

#[tokio::test]
async fn a_retry_after_a_force_release_is_told_the_lease_is_lost() {
    // Found by the safety harness's full tier: a reentry answered, the lock force-released,
    // then the reentry's retry. A replayed grant would tell the client it holds a lock it
    // does not; the retry answers for the lease as it is now.
    let app = spawn_app().await;
    let new = || acquire_request(&app, "jobs", json!({}));
    let first = app.send_with_key(new(), "new-2").await;
    first.assert_status(201);
    let lease = Lease::from_reply("jobs", &first);
    let reenter = || reentry_request(&app, &lease);
    app.send_with_key(reenter(), "again-2")
        .await
        .assert_status(200);
    app.force_release("jobs", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    app.send_with_key(reenter(), "again-2")
        .await
        .assert_problem(410, "lease_lost");
    app.send_with_key(new(), "new-2")
        .await
        .assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn fences_keep_growing_when_redis_loses_its_data() {
    let mut app = spawn_app().await;
    let before = app.lease("jobs", json!({})).await;
    // The test Redis keeps nothing: a restart is a total data loss.
    app.redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let reply = app.acquire("jobs", json!({})).await;
        if reply.status == 201 {
            break Lease::from_reply("jobs", &reply);
        }
        assert!(Instant::now() < deadline, "no recovery: {}", reply.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        after.fencing_token > before.fencing_token,
        "{} after {}",
        after.fencing_token,
        before.fencing_token
    );
}

#[tokio::test]
async fn a_force_release_answered_503_does_not_happen_later() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    app.redis.signal(Signal::SIGSTOP);
    let forced = app.force_release("jobs", Some(ADMIN_TOKEN)).await;
    // The script now sits in the frozen Redis's input; it runs when Redis wakes, past its
    // deadline, and must change nothing.
    app.redis.signal(Signal::SIGCONT);
    forced.assert_problem(503, "redis_unavailable");
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    assert_eq!(holder_of(&app, "jobs").await["lease_id"], lease.id);
}

#[tokio::test]
async fn a_redis_that_evicts_keys_is_refused_at_startup() {
    let redis = crate::helpers::RedisServer::start();
    let mut conn = redis.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET");
    let error = crate::helpers::serve_once(&redis)
        .await
        .expect_err("an evicting Redis is refused");
    assert!(error.to_string().contains("noeviction"), "{error}");
}
