//! Acquire, reenter, heartbeat, release, inspect and list: the lease lifecycle.

use serde_json::json;

use crate::helpers::{Lease, spawn_app};

#[tokio::test]
async fn a_new_lease_is_201_with_location_token_and_expiry() {
    let app = spawn_app().await;
    let reply = app
        .acquire(
            "jobs",
            json!({"ttl_ms": 5000, "holder": "worker-1", "metadata": {"job": 7}}),
        )
        .await;
    reply.assert_status(201);
    let id = reply.str("lease_id");
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/locks/jobs/leases/{id}").as_str())
    );
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let token = reply.str("token");
    assert!(
        token.starts_with("lht_") && token.len() == 47,
        "token {token}"
    );
    assert_eq!(reply.body["lock"], "jobs");
    assert_eq!(reply.body["holder"], "worker-1");
    assert_eq!(reply.body["reentry_count"], 1);
    assert_eq!(reply.body["ttl_ms"], 5000);
    assert!(reply.body["fencing_token"].as_u64().is_some_and(|f| f > 0));
    let expires = humantime::parse_rfc3339(&reply.str("expires_at")).expect("RFC 3339 expiry");
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .expect("expiry in the future");
    assert!(
        left.as_millis() > 4000 && left.as_millis() <= 5000,
        "expires in {left:?}"
    );
}

#[tokio::test]
async fn the_default_ttl_applies_when_none_is_given() {
    let app = spawn_app().await;
    let reply = app.acquire("jobs", json!({})).await;
    reply.assert_status(201);
    assert_eq!(reply.body["ttl_ms"], 30_000);
    // An empty body (no JSON at all) is the same as {}.
    let empty = app
        .http
        .post(app.url("/v1/locks/other/leases"))
        .send()
        .await
        .expect("request");
    assert_eq!(empty.status(), 201);
}

#[tokio::test]
async fn a_held_lock_is_409_naming_the_holder_with_retry_after() {
    let app = spawn_app().await;
    app.lease("jobs", json!({"ttl_ms": 20_000, "holder": "worker-1"}))
        .await;
    let reply = app.acquire("jobs", json!({"holder": "worker-2"})).await;
    reply.assert_problem(409, "lock_held");
    assert_eq!(reply.body["holder"], "worker-1");
    let retry_ms = reply.u64("retry_after_ms");
    assert!(
        retry_ms > 15_000 && retry_ms <= 20_000,
        "retry_after_ms {retry_ms}"
    );
    let header: u64 = reply
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert_eq!(header, retry_ms.div_ceil(1000), "whole seconds, rounded up");
    assert!(reply.body.get("token").is_none());
}

#[tokio::test]
async fn reentry_with_the_token_counts_up_and_keeps_the_lease() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 5000})).await;
    for expected in 2..=3 {
        let reply = app
            .acquire_with("jobs", 0, json!({}), Some(&lease.token))
            .await;
        reply.assert_status(200);
        assert_eq!(reply.str("lease_id"), lease.id);
        assert_eq!(reply.u64("reentry_count"), expected);
        assert_eq!(reply.u64("fencing_token"), lease.fencing_token);
        assert!(
            reply.body.get("token").is_none(),
            "the token is shown only once"
        );
    }
    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["holders"][0]["reentry_count"], 3);
}

#[tokio::test]
async fn reentry_resets_the_ttl() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 1000})).await;
    let reply = app
        .acquire_with("jobs", 0, json!({"ttl_ms": 60_000}), Some(&lease.token))
        .await;
    reply.assert_status(200);
    let remaining = app.inspect_lock("jobs").await.u64("remaining_ms");
    assert!(remaining > 50_000, "remaining {remaining}");
}

#[tokio::test]
async fn a_token_for_another_lock_cannot_reenter() {
    let app = spawn_app().await;
    let lease = app.lease("a", json!({})).await;
    app.acquire_with("b", 0, json!({}), Some(&lease.token))
        .await
        .assert_problem(403, "token_mismatch");
}

#[tokio::test]
async fn heartbeat_extends_the_lease_and_may_change_its_ttl() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 1000})).await;
    let reply = app.heartbeat(&lease, json!({"ttl_ms": 60_000})).await;
    reply.assert_status(200);
    assert_eq!(reply.body["ttl_ms"], 60_000);
    assert_eq!(reply.body["lease_id"], lease.id);
    assert_eq!(reply.body["fencing_token"], lease.fencing_token);
    assert!(app.inspect_lock("jobs").await.u64("remaining_ms") > 50_000);
    // Later heartbeats keep the new TTL.
    assert_eq!(
        app.heartbeat(&lease, json!({})).await.body["ttl_ms"],
        60_000
    );
}

#[tokio::test]
async fn heartbeat_after_expiry_is_410_and_never_reacquires() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 200})).await;
    // A waiter gets the lock when the TTL runs out: from then on the first lease is lost.
    let next = app.acquire_with("jobs", 5000, json!({}), None).await;
    next.assert_status(201);
    let reply = app.heartbeat(&lease, json!({})).await;
    reply.assert_problem(410, "lease_lost");
    assert_eq!(reply.body["reason"], "expired");
    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["holders"].as_array().map(Vec::len), Some(1));
    assert_eq!(lock.body["holders"][0]["lease_id"], next.body["lease_id"]);
    assert_eq!(app.inspect_lease(&lease).await.body["state"], "expired");
}

#[tokio::test]
async fn release_goes_one_level_at_a_time_then_frees_the_lock() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    let first = app.release(&lease, false).await;
    first.assert_status(200);
    assert_eq!(first.body["released"], false);
    assert_eq!(first.body["reentry_count"], 1);
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    let second = app.release(&lease, false).await;
    assert_eq!(second.body["released"], true);
    assert_eq!(second.body["reentry_count"], 0);
    app.acquire("jobs", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn release_all_drops_every_level() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    for _ in 0..3 {
        app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
            .await
            .assert_status(200);
    }
    let reply = app.release(&lease, true).await;
    reply.assert_status(200);
    assert_eq!(reply.body["released"], true);
    assert_eq!(reply.body["reentry_count"], 0);
}

#[tokio::test]
async fn a_released_lease_is_gone_for_every_call() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    app.release(&lease, false).await.assert_status(200);
    let again = app.release(&lease, false).await;
    again.assert_problem(410, "lease_lost");
    assert_eq!(again.body["reason"], "released");
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_problem(410, "lease_lost");
    let view = app.inspect_lease(&lease).await;
    view.assert_status(200);
    assert_eq!(view.body["state"], "released");
    assert!(view.body["ended_at"].is_string());
}

#[tokio::test]
async fn tokens_are_checked_on_heartbeat_and_release() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    let other = app.lease("other", json!({})).await;
    app.heartbeat_as(&lease, &other.token, json!({}))
        .await
        .assert_problem(403, "token_mismatch");
    app.release_as(&lease, &other.token, false)
        .await
        .assert_problem(403, "token_mismatch");
    app.release_as(&lease, "not-a-token", false)
        .await
        .assert_problem(401, "token_malformed");
    let missing = app.send(app.http.delete(app.url(&lease.path))).await;
    missing.assert_problem(401, "token_missing");
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    // Still held after all the refused attempts.
    app.heartbeat(&lease, json!({})).await.assert_status(200);
}

#[tokio::test]
async fn unknown_leases_are_404() {
    let app = spawn_app().await;
    let ghost = Lease {
        lock: "jobs".into(),
        id: "01890000-0000-7000-8000-000000000000".into(),
        token: app.lease("jobs", json!({})).await.token,
        fencing_token: 0,
        path: "/v1/locks/jobs/leases/01890000-0000-7000-8000-000000000000".into(),
    };
    app.heartbeat(&ghost, json!({}))
        .await
        .assert_problem(404, "lease_not_found");
    app.inspect_lease(&ghost)
        .await
        .assert_problem(404, "lease_not_found");
    app.get("/v1/locks/jobs/leases/not-a-uuid")
        .await
        .assert_problem(404, "lease_not_found");
}

#[tokio::test]
async fn inspecting_a_lease_never_shows_its_token() {
    let app = spawn_app().await;
    let lease = app
        .lease("jobs", json!({"holder": "w", "metadata": {"host": "a"}}))
        .await;
    let view = app.inspect_lease(&lease).await;
    view.assert_status(200);
    assert_eq!(view.body["state"], "held");
    assert_eq!(view.body["holder"], "w");
    assert_eq!(view.body["metadata"], json!({"host": "a"}));
    assert_eq!(view.body["reentry_count"], 1);
    assert!(view.u64("remaining_ms") > 0);
    assert!(!view.body.to_string().contains(&lease.token[4..]));
    assert!(view.body.get("token").is_none());
}

#[tokio::test]
async fn inspecting_a_lock_shows_holders_and_404s_when_unknown() {
    let app = spawn_app().await;
    app.inspect_lock("jobs")
        .await
        .assert_problem(404, "lock_not_found");
    let lease = app
        .lease("jobs", json!({"holder": "w", "ttl_ms": 9000}))
        .await;
    let lock = app.inspect_lock("jobs").await;
    lock.assert_status(200);
    assert_eq!(lock.body["held"], true);
    assert_eq!(lock.body["fencing_counter"], lease.fencing_token);
    let holder = &lock.body["holders"][0];
    assert_eq!(holder["lease_id"], lease.id);
    assert_eq!(holder["holder_id"], format!("{}:1", lease.id));
    assert_eq!(holder["holder"], "w");
    assert_eq!(holder["reentry_count"], 1);
    assert!(lock.u64("remaining_ms") <= 9000);
    // Free but known: 200 with no holders, the counter kept.
    app.release(&lease, false).await.assert_status(200);
    let free = app.inspect_lock("jobs").await;
    free.assert_status(200);
    assert_eq!(free.body["held"], false);
    assert_eq!(free.body["holders"], json!([]));
    assert_eq!(free.body["fencing_counter"], lease.fencing_token);
}

#[tokio::test]
async fn every_change_publishes_an_event() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let lease = app.lease("jobs", json!({"holder": "w"})).await;
    let acquired = crate::helpers::next_event(&mut events, "acquired").await;
    assert_eq!(acquired["lock"], "jobs");
    assert_eq!(acquired["lease_id"], lease.id);
    assert_eq!(acquired["holder"], "w");
    assert_eq!(acquired["fencing_token"], lease.fencing_token);
    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    assert_eq!(
        crate::helpers::next_event(&mut events, "reentered").await["reentry_count"],
        2
    );
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    crate::helpers::next_event(&mut events, "renewed").await;
    app.release(&lease, true).await.assert_status(200);
    let released = crate::helpers::next_event(&mut events, "released").await;
    assert_eq!(released["reentry_count"], 0);
    assert_eq!(released["reason"], "released");

    let short = app.lease("jobs", json!({"ttl_ms": 150})).await;
    app.acquire_with("jobs", 5000, json!({}), None)
        .await
        .assert_status(201);
    let expired = crate::helpers::next_event(&mut events, "expired").await;
    assert_eq!(expired["lease_id"], short.id);
}

#[tokio::test]
async fn the_listing_shows_live_locks_and_semaphores_by_prefix() {
    let app = spawn_app().await;
    app.lease("jobs:a", json!({"holder": "worker-1"})).await;
    app.lease("jobs:b", json!({})).await;
    app.permits("jobs:pool", json!({"limit": 4, "permits": 3}))
        .await;
    app.lease("other", json!({})).await;
    let released = app.lease("jobs:gone", json!({})).await;
    app.release(&released, true).await.assert_status(200);

    let page = app.get("/v1/locks?prefix=jobs:").await;
    page.assert_status(200);
    let names: Vec<&str> = page.body["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| l["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["jobs:a", "jobs:b", "jobs:pool"]);
    let a = &page.body["locks"][0];
    assert_eq!(a["holder"], "worker-1");
    assert_eq!(a["kind"], "reentrant");
    let pool = &page.body["locks"][2];
    assert_eq!(pool["kind"], "semaphore");
    assert_eq!(
        (pool["used"].as_u64(), pool["limit"].as_u64()),
        (Some(3), Some(4))
    );
    assert!(page.body["next_cursor"].is_null());

    app.get("/v1/locks?limit=0")
        .await
        .assert_problem(400, "invalid_query");
    app.get("/v1/locks?cursor=a%7B")
        .await
        .assert_problem(400, "invalid_query");
    app.get("/v1/locks?prefix=a%7B")
        .await
        .assert_problem(422, "invalid_lock_name");
}
