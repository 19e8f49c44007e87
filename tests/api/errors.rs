//! Bad input gets a clear problem+json answer with the right status, never a 500 or a panic.

use serde_json::json;

use crate::helpers::{Reply, spawn_app};

#[tokio::test]
async fn invalid_lock_names_are_422() {
    let app = spawn_app().await;
    let long = "x".repeat(201);
    for name in ["a%7Bb%7D", "a%7Db", "sp%20ace", "caf%C3%A9", long.as_str()] {
        let reply = app.acquire(name, json!({})).await;
        reply.assert_problem(422, "invalid_lock_name");
        app.inspect_lock(name)
            .await
            .assert_problem(422, "invalid_lock_name");
    }
}

#[tokio::test]
async fn ttl_out_of_range_is_422() {
    let app = spawn_app().await;
    for ttl in [0, 99, 3_600_001] {
        let reply = app.acquire("jobs", json!({"ttl_ms": ttl})).await;
        reply.assert_problem(422, "invalid_ttl");
        assert!(reply.str("detail").contains("between 100 and 3600000"));
    }
    let lease = app.lease("jobs", json!({})).await;
    app.heartbeat(&lease, json!({"ttl_ms": 5}))
        .await
        .assert_problem(422, "invalid_ttl");
}

#[tokio::test]
async fn malformed_json_is_400_and_wrong_shapes_are_422() {
    let app = spawn_app().await;
    let post = |body: &'static str| {
        app.http
            .post(app.url("/v1/locks/jobs/leases"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    Reply::read(post("{not json").await.expect("request"))
        .await
        .assert_problem(400, "malformed_json");
    Reply::read(post("{\"ttl_ms\":").await.expect("request"))
        .await
        .assert_problem(400, "malformed_json");
    for body in [
        r#"{"ttl_ms":"soon"}"#,
        r#"{"ttl_ms":-1}"#,
        r#"{"ttl":5000}"#,
        r#"{"holder":7}"#,
        r#"[1,2]"#,
        r#"{"metadata":[1]}"#,
        r#"{"holder":""}"#,
    ] {
        let reply = Reply::read(post(body).await.expect("request")).await;
        assert!(
            reply.status == 422,
            "{body} gave {} {}",
            reply.status,
            reply.body
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
    }
}

#[tokio::test]
async fn other_media_types_are_415_and_large_bodies_413() {
    let app = spawn_app().await;
    let xml = app
        .http
        .post(app.url("/v1/locks/jobs/leases"))
        .header("content-type", "text/xml")
        .body("<ttl/>")
        .send()
        .await
        .expect("request");
    Reply::read(xml)
        .await
        .assert_problem(415, "unsupported_media_type");
    // curl -d sends application/x-www-form-urlencoded: read it as JSON.
    let curlish = app
        .http
        .post(app.url("/v1/locks/curl/leases"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#"{"ttl_ms":5000}"#)
        .send()
        .await
        .expect("request");
    Reply::read(curlish).await.assert_status(201);
    let big = format!(r#"{{"holder":"{}"}}"#, "x".repeat(70_000));
    let reply = app
        .http
        .post(app.url("/v1/locks/jobs/leases"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .expect("request");
    Reply::read(reply)
        .await
        .assert_problem(413, "payload_too_large");
}

#[tokio::test]
async fn bad_query_values_are_400() {
    let app = spawn_app().await;
    let reply = Reply::read(
        app.http
            .post(app.url("/v1/locks/jobs/leases?wait_ms=soon"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    reply.assert_problem(400, "invalid_query");
    let reply = Reply::read(
        app.http
            .post(app.url("/v1/locks/jobs/leases?wait=5"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    reply.assert_problem(400, "invalid_query");
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems() {
    let app = spawn_app().await;
    app.get("/v2/locks").await.assert_problem(404, "not_found");
    let put = app
        .http
        .put(app.url("/v1/locks/jobs"))
        .send()
        .await
        .expect("request");
    Reply::read(put)
        .await
        .assert_problem(405, "method_not_allowed");
    let doc = app
        .http
        .get(app.url("/problems/lock_held"))
        .send()
        .await
        .expect("request");
    assert_eq!(doc.status(), 200);
    assert!(doc.text().await.expect("text").contains("409"));
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    app.get("/healthz").await.assert_status(200);
    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    assert_eq!(ready.body["subscriber"], "connected");
}

#[tokio::test]
async fn api_answers_are_never_cached_errors_included() {
    let app = spawn_app().await;
    // A problem from a /v1 route (the lease does not exist) carries the same no-store as a
    // grant: it tells about live state too.
    let missing = app
        .get("/v1/locks/jobs/leases/0192f0c4-0000-7000-8000-000000000000")
        .await;
    missing.assert_status(404);
    assert_eq!(missing.header("cache-control"), Some("no-store"));
    let listing = app.get("/v1/locks").await;
    listing.assert_status(200);
    assert_eq!(listing.header("cache-control"), Some("no-store"));
    // Outside the API (health checks) nothing is added.
    let health = app.get("/healthz").await;
    health.assert_status(200);
    assert_eq!(health.header("cache-control"), None);
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
