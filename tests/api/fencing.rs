//! Fencing tokens: strictly increasing across holders, kept on reentry, never reset (not even by
//! a Redis that loses its data); a fence check says whether a token is the holder's now.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Lease, Reply, TestApp, spawn_app};

#[tokio::test]
async fn fencing_tokens_grow_across_holders_and_survive_release_and_expiry() {
    let app = spawn_app().await;
    let mut seen = Vec::new();
    for round in 0..4 {
        let lease = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
        // Reentry keeps the token.
        let again = app
            .acquire_with("jobs", 0, json!({}), Some(&lease.token))
            .await;
        assert_eq!(again.u64("fencing_token"), lease.fencing_token);
        seen.push(lease.fencing_token);
        if round % 2 == 0 {
            app.release(&lease, true).await.assert_status(200);
        } else {
            // Let it expire: shorten its TTL, then a waiting acquire returns once it ran out.
            app.heartbeat(&lease, json!({"ttl_ms": 100}))
                .await
                .assert_status(200);
            let next = app.acquire_with("jobs", 5000, json!({}), None).await;
            let next = crate::helpers::Lease::from_reply("jobs", &next);
            seen.push(next.fencing_token);
            app.release(&next, true).await.assert_status(200);
        }
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {seen:?}"
    );
    assert_eq!(
        app.inspect_lock("jobs").await.u64("fencing_counter"),
        *seen.last().unwrap_or(&0)
    );
}

#[tokio::test]
async fn each_lock_has_its_own_counter() {
    let app = spawn_app().await;
    let a = app.lease("a", json!({})).await;
    let b = app.lease("b", json!({})).await;
    assert_eq!(
        app.inspect_lock("a").await.u64("fencing_counter"),
        a.fencing_token
    );
    assert_eq!(
        app.inspect_lock("b").await.u64("fencing_counter"),
        b.fencing_token
    );
}

// Found by the safety harness (fences went backwards after Redis lost its data).
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

async fn check(app: &TestApp, lock: &str, body: Value) -> Reply {
    let url = app.url(&format!("/v1/locks/{lock}/fence/check"));
    app.send(app.http.post(url).json(&body)).await
}

#[tokio::test]
async fn a_fence_check_says_whether_the_token_is_the_holders_now() {
    let app = spawn_app().await;
    let first = app.lease("bucket", json!({"ttl_ms": 60_000})).await;
    let reply = check(
        &app,
        "bucket",
        json!({"fencing_token": first.fencing_token}),
    )
    .await;
    reply.assert_status(200);
    assert_eq!(reply.body["current"], true, "{}", reply.body);
    assert_eq!(reply.body["fencing_token"], first.fencing_token);
    assert_eq!(reply.body["fencing_counter"], first.fencing_token);

    // A newer holder: the first token is stale.
    app.release(&first, true).await.assert_status(200);
    let second = app.lease("bucket", json!({"ttl_ms": 60_000})).await;
    let stale = check(
        &app,
        "bucket",
        json!({"fencing_token": first.fencing_token}),
    )
    .await;
    assert_eq!(stale.body["current"], false, "{}", stale.body);
    let now = check(
        &app,
        "bucket",
        json!({"fencing_token": second.fencing_token}),
    )
    .await;
    assert_eq!(now.body["current"], true, "{}", now.body);

    // Expired: nobody holds the lock, so no token is current.
    let short = app.lease("short", json!({"ttl_ms": 200})).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let expired = check(&app, "short", json!({"fencing_token": short.fencing_token})).await;
    assert_eq!(expired.body["current"], false, "{}", expired.body);

    // A lock never taken holds no current token; a request without one is refused.
    let never = check(&app, "never-taken", json!({"fencing_token": 1})).await;
    assert_eq!(never.body["current"], false);
    assert_eq!(never.body["fencing_counter"], 0);
    check(&app, "bucket", json!({}))
        .await
        .assert_problem(422, "invalid_body");
}

#[tokio::test]
async fn read_holders_each_have_a_current_token() {
    let app = spawn_app().await;
    let a = app.lease("shared", json!({"kind": "read"})).await;
    let b = app.lease("shared", json!({"kind": "read"})).await;
    for lease in [&a, &b] {
        let reply = check(
            &app,
            "shared",
            json!({"fencing_token": lease.fencing_token}),
        )
        .await;
        assert_eq!(reply.body["current"], true, "{}", reply.body);
    }
}
