//! `Idempotency-Key`: a retry gets the first answer, and only its own caller does; another
//! caller sending the same key and request is refused, never handed the first lease's token.

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, Lease, Reply, TestApp, holder_of, spawn_app};

async fn acquire_keyed(app: &TestApp, lock: &str, key: &str) -> Reply {
    let request = app
        .http
        .post(app.url(&format!("/v1/locks/{lock}/leases")))
        .header("idempotency-key", key)
        .json(&json!({"ttl_ms": 60_000}));
    app.send(request).await
}

#[tokio::test]
async fn an_idempotency_key_replays_only_to_the_caller_that_sent_it() {
    let app = spawn_app().await;
    let (_, first) = app
        .create_key(json!({"name": "first", "roles": ["client"]}))
        .await;
    let (_, second) = app
        .create_key(json!({"name": "second", "roles": ["client"]}))
        .await;
    let granted = acquire_keyed(&app.with_key(&first), "jobs", "deploy-42").await;
    granted.assert_status(201);
    // The same caller retrying gets the first answer, token included.
    let replayed = acquire_keyed(&app.with_key(&first), "jobs", "deploy-42").await;
    replayed.assert_status(201);
    assert_eq!(replayed.body["token"], granted.body["token"]);
    // Another caller of the same tenant, same key and body: a conflict, no token.
    let other = acquire_keyed(&app.with_key(&second), "jobs", "deploy-42").await;
    other.assert_problem(422, "idempotency_key_reused");
    assert!(other.body.get("token").is_none(), "{}", other.body);
}

/// Found by the official clients: a fair acquire with a key that had to wait in line was
/// refused (422) on the key's first use, once its wait moved on to polling its ticket.
#[tokio::test]
async fn a_fair_acquire_with_a_key_waits_in_line_and_is_granted() {
    let app = spawn_app().await;
    let first = app.lease("deploy", json!({"kind": "fair"})).await;
    let waiting = {
        let app = app.view(None, true);
        tokio::spawn(async move {
            let request = app
                .http
                .post(app.url("/v1/locks/deploy/leases?wait_ms=10000"))
                .header("idempotency-key", "fresh-1")
                .json(&json!({"kind": "fair"}));
            app.send(request).await
        })
    };
    app.wait_for_waiters(1).await;
    app.release(&first, true).await.assert_status(200);
    let granted = waiting.await.expect("the waiter");
    granted.assert_status(201);
    // And a short wait that ends in line answers 202 with its ticket, not 422.
    let queued = app
        .send(
            app.http
                .post(app.url("/v1/locks/deploy/leases?wait_ms=200"))
                .header("idempotency-key", "fresh-2")
                .json(&json!({"kind": "fair"})),
        )
        .await;
    queued.assert_status(202);
}

/// Found by the official clients: a replayed release (and a replayed 202 ticket) did not say
/// so, though a replayed acquire does.
#[tokio::test]
async fn every_replayed_answer_says_so() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({})).await;
    let release = || {
        app.http
            .delete(app.url(&format!("/v1/locks/jobs/leases/{}?all=true", lease.id)))
            .bearer_auth(&lease.token)
            .header("idempotency-key", "release-1")
    };
    let first = app.send(release()).await;
    first.assert_status(200);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = app.send(release()).await;
    again.assert_status(200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let holder = app.lease("deploy", json!({"kind": "fair"})).await;
    let queue = || {
        app.http
            .post(app.url("/v1/locks/deploy/leases?wait_ms=0"))
            .header("idempotency-key", "ticket-1")
            .json(&json!({"kind": "fair"}))
    };
    let ticket = app.send(queue()).await;
    ticket.assert_status(202);
    assert_eq!(ticket.header("idempotent-replayed"), None);
    let again = app.send(queue()).await;
    again.assert_status(202);
    assert_eq!(again.body["ticket_id"], ticket.body["ticket_id"]);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    drop(holder);
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

// Found by the safety harness (retries that added levels).
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

// Found by safety seed 1 (subscriber-drop).
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

/// A retry whose first request took the caller's last lease is that lease's answer again, not
/// a refusal for the lease it already counts (a client that lost the first reply would
/// otherwise never learn its token). For every kind that keeps answers: a lock, a semaphore, a
/// multilease and an election's campaign.
#[tokio::test]
async fn a_retry_at_the_lease_quota_gets_the_first_answer() {
    let app = spawn_app().await;
    let asks: [(&str, Value); 4] = [
        ("/v1/locks/jobs/leases", json!({"ttl_ms": 60_000})),
        (
            "/v1/semaphores/pool/leases",
            json!({"permits": 1, "limit": 2, "ttl_ms": 60_000}),
        ),
        (
            "/v1/multileases",
            json!({"locks": [{"name": "a"}, {"name": "b"}], "ttl_ms": 60_000}),
        ),
        (
            "/v1/elections/leader/candidates",
            json!({"ttl_ms": 60_000, "value": "me"}),
        ),
    ];
    for (i, (path, body)) in asks.iter().enumerate() {
        // A key whose quota the first request fills (a multilease counts each member).
        let quota = if path.contains("multileases") { 2 } else { 1 };
        let (_, secret) = app
            .create_key(json!({
                "name": format!("quota-{i}"),
                "roles": ["client"],
                "quotas": {"max_leases": quota},
            }))
            .await;
        let key = app.with_key(&secret);
        let keyed = |idempotency: &str| {
            key.http
                .post(key.url(path))
                .header("idempotency-key", idempotency)
                .json(body)
        };
        let first = key.send(keyed("first")).await;
        first.assert_status(201);
        let replayed = key.send(keyed("first")).await;
        replayed.assert_status(201);
        assert_eq!(replayed.body["token"], first.body["token"], "{path}");
        assert_eq!(
            replayed.header("idempotent-replayed"),
            Some("true"),
            "{path}"
        );
        // A new request (another key) is still held to the quota.
        key.send(keyed("second"))
            .await
            .assert_problem(429, "quota_exceeded");
    }
}
