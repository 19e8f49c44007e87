//! No silent surprises: fence checks say whether a token is current, listings show what is
//! live, a capped wait is reported, and error texts speak the API's language.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{AppOptions, Reply, TestApp, spawn_app, spawn_app_with};

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

#[tokio::test]
async fn error_texts_name_no_rust_types_and_form_bodies_get_a_hint() {
    let app = spawn_app().await;
    let post = |path: &str, content_type: &'static str, body: &'static str| {
        app.http
            .post(app.url(path))
            .header("content-type", content_type)
            .body(body)
    };
    let json = "application/json";
    let cases = [
        post("/v1/locks/t/leases", json, r#""s""#),
        post("/v1/locks/t/leases", json, r#"[1]"#),
        post("/v1/locks/t/leases", json, r#"{"ttl_ms":"x"}"#),
        post("/v1/locks/t/leases", json, r#"{"ttl_ms":-1}"#),
        post("/v1/locks/t/leases", json, r#"{"kind":"bogus"}"#),
        post("/v1/semaphores/t/leases", json, r#"{"limit":5000000000}"#),
        post("/v1/locks/t/leases?wait_ms=soon", json, "{}"),
        post(
            "/v1/locks/t/leases?wait_ms=99999999999999999999999",
            json,
            "{}",
        ),
        post("/v1/locks/t/fence/check", json, r#"{"fencing_token":"7"}"#),
        app.http.get(app.url("/v1/locks/t/leases/not-a-uuid")),
        app.http.get(app.url("/v1/locks/a%FF")),
        app.http.get(app.url("/v1/locks/never-taken")),
    ];
    for request in cases {
        let reply = app.send(request).await;
        assert!(
            reply.status.is_client_error(),
            "{} {}",
            reply.status,
            reply.body
        );
        let detail = reply.str("detail");
        for rust in [
            "struct ",
            "enum ",
            "u64",
            "u32",
            "LockName(",
            "Failed to deserialize",
            "\\\"",
        ] {
            assert!(!detail.contains(rust), "{rust} in {detail:?}");
        }
    }

    // `curl -d 'ttl_ms=5000'`: form data, not JSON.
    let form = app
        .send(post(
            "/v1/locks/t/leases",
            "application/x-www-form-urlencoded",
            "ttl_ms=5000",
        ))
        .await;
    form.assert_problem(400, "malformed_json");
    assert!(
        form.str("detail")
            .contains("content-type: application/json"),
        "{}",
        form.body
    );
    // JSON sent with curl's default type still works.
    let curlish = app
        .send(post(
            "/v1/locks/t/leases",
            "application/x-www-form-urlencoded",
            r#"{"ttl_ms": 5000}"#,
        ))
        .await;
    curlish.assert_status(201);
}
