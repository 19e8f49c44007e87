//! API keys: anonymous callers only while no key exists, a bad key's own refusal, name
//! patterns, revocation and rotation seen by every instance, management through the admin API.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use super::key;
use crate::helpers::{ADMIN_TOKEN, AppOptions, TestApp, spawn_app, spawn_app_with};

#[tokio::test]
async fn anonymous_callers_are_let_in_on_loopback_only_until_a_key_exists() {
    let app = spawn_app().await;
    app.lease("before", json!({})).await;
    let (_, secret) = key(&app, "svc", "", json!(["client", "reader"])).await;
    app.acquire("after", json!({}))
        .await
        .assert_problem(401, "api_key_required");
    let keyed = app.with_key(&secret);
    keyed.acquire("after", json!({})).await.assert_status(201);
    // The operator's token still works where a reader would.
    let op = app
        .send(
            app.http
                .get(app.url("/v1/locks/after"))
                .header("leasehold-key", ADMIN_TOKEN),
        )
        .await;
    op.assert_status(200);

    // --allow-anonymous keeps anonymous callers in once keys exist.
    let open = spawn_app_with(AppOptions {
        allow_anonymous: true,
        ..AppOptions::default()
    })
    .await;
    key(&open, "svc", "", json!(["client"])).await;
    open.acquire("still-open", json!({}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn a_bad_key_is_refused_with_its_own_code() {
    let app = spawn_app().await;
    key(&app, "svc", "", json!(["client"])).await;
    let wrong = app.with_key("lhk_not-a-key-at-all");
    let reply = wrong.acquire("x", json!({})).await;
    reply.assert_problem(401, "api_key_invalid");
    assert_eq!(reply.header("www-authenticate"), Some("Leasehold-Key"));
}

/// Polls `view` with `acquire` until it answers `status` (bounded): how long that took.
async fn until_status(view: &TestApp, lock: &str, status: u16) -> Duration {
    let started = Instant::now();
    loop {
        let reply = view.acquire(lock, json!({"ttl_ms": 1000})).await;
        if reply.status.as_u16() == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still {} after 10 s",
            reply.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_revoked_key_is_refused_by_every_instance_within_seconds() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let (id, secret) = key(&app, "svc", "", json!(["client"])).await;
    // The peer has the key cached from a request just now.
    peer.with_key(&secret)
        .acquire("warm", json!({}))
        .await
        .assert_status(201);
    let revoked_at = Instant::now();
    app.revoke_key(&id).await;
    app.with_key(&secret)
        .acquire("here", json!({}))
        .await
        .assert_problem(401, "api_key_invalid");
    let seen = until_status(&peer.with_key(&secret), "there", 401).await;
    let elapsed = revoked_at.elapsed();
    eprintln!(
        "revocation seen by the second instance after {seen:?} ({elapsed:?} from the revoke)"
    );
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn a_rotated_key_keeps_its_old_secret_for_the_grace_only() {
    let app = spawn_app().await;
    let (id, old) = key(&app, "svc", "", json!(["client"])).await;
    let rotated = app
        .admin(
            Method::POST,
            &format!("/v1/admin/keys/{id}/rotate"),
            Some(json!({"grace_ms": 1500})),
        )
        .await;
    rotated.assert_status(200);
    let new = rotated.str("secret");
    assert_ne!(new, old);
    assert!(rotated.body["key"]["rotating_until"].is_string());
    app.with_key(&new)
        .acquire("a", json!({}))
        .await
        .assert_status(201);
    app.with_key(&old)
        .acquire("b", json!({}))
        .await
        .assert_status(201);
    let gone = until_status(&app.with_key(&old), "c", 401).await;
    assert!(gone >= Duration::from_millis(1000), "{gone:?}");
    app.with_key(&new)
        .acquire("d", json!({}))
        .await
        .assert_status(201);

    // No grace: the old secret stops at once.
    let rotated = app
        .admin(
            Method::POST,
            &format!("/v1/admin/keys/{id}/rotate"),
            Some(json!({"grace_ms": 0})),
        )
        .await;
    let newest = rotated.str("secret");
    app.with_key(&new)
        .acquire("e", json!({}))
        .await
        .assert_problem(401, "api_key_invalid");
    app.with_key(&newest)
        .acquire("e", json!({}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn name_patterns_bound_what_a_key_may_touch() {
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "jobs", "roles": ["client", "reader"], "patterns": ["jobs:*", "report"]}))
        .await;
    let jobs = app.with_key(&secret);
    jobs.lease("jobs:nightly", json!({})).await;
    jobs.lease("report", json!({})).await;
    jobs.acquire("deploy", json!({}))
        .await
        .assert_problem(403, "name_not_allowed");
    jobs.inspect_lock("deploy")
        .await
        .assert_problem(403, "name_not_allowed");
}

#[tokio::test]
async fn keys_are_managed_through_the_admin_api_with_clear_refusals() {
    let app = spawn_app().await;
    let (_, _) = key(&app, "ci", "a", json!(["client"])).await;
    let again = app
        .admin(
            Method::POST,
            "/v1/admin/keys",
            Some(json!({"name": "ci", "tenant": "a"})),
        )
        .await;
    again.assert_problem(409, "key_name_taken");
    // Same name, another tenant: fine.
    key(&app, "ci", "b", json!(["client"])).await;
    for bad in [
        json!({"name": "x", "patterns": ["a b"]}),
        json!({"name": "x", "tenant": "a/b"}),
        json!({"name": ""}),
        json!({"name": "x", "roles": ["root"]}),
    ] {
        let reply = app
            .admin(Method::POST, "/v1/admin/keys", Some(bad.clone()))
            .await;
        assert_eq!(reply.status, 422, "{bad}: {}", reply.body);
    }
    let list = app.admin(Method::GET, "/v1/admin/keys", None).await;
    list.assert_status(200);
    let keys = list.body["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 2);
    assert!(
        !list.body.to_string().contains("lhk_"),
        "a listing never shows a secret: {}",
        list.body
    );

    // An admin key of tenant a manages a's keys only.
    let (_, tenant_admin) = key(&app, "ops", "a", json!(["admin"])).await;
    let ops = app.with_key(&tenant_admin);
    let listed = ops.get("/v1/admin/keys").await;
    let names: Vec<&str> = listed.body["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["tenant"].as_str().expect("tenant"))
        .collect();
    assert!(names.iter().all(|t| *t == "a"), "{names:?}");
    let b_key = keys
        .iter()
        .find(|k| k["tenant"] == "b")
        .and_then(|k| k["id"].as_str())
        .expect("b's key");
    ops.send(ops.http.delete(ops.url(&format!("/v1/admin/keys/{b_key}"))))
        .await
        .assert_problem(404, "key_not_found");
    ops.send(
        ops.http
            .post(ops.url("/v1/admin/keys"))
            .json(&json!({"name": "sneaky", "tenant": "b"})),
    )
    .await
    .assert_problem(403, "tenant_not_allowed");
    let made = ops
        .send(
            ops.http
                .post(ops.url("/v1/admin/keys"))
                .json(&json!({"name": "svc-2"})),
        )
        .await;
    made.assert_status(201);
    assert_eq!(
        made.body["key"]["tenant"], "a",
        "a tenant admin's keys are its tenant's"
    );
}
