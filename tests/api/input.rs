//! What the server takes from callers and shows to others: request ids, lock names, holder
//! labels and admin reasons that could forge or hide something are refused or replaced.

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, spawn_app};

#[tokio::test]
async fn a_request_id_that_could_forge_log_fields_is_replaced() {
    let app = spawn_app().await;
    let sent = |id: String| {
        let app = &app;
        async move {
            app.http
                .get(app.url("/healthz"))
                .header("x-request-id", id)
                .send()
                .await
                .expect("request")
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .expect("an x-request-id")
        }
    };
    assert_eq!(sent("job-42.retry:1".into()).await, "job-42.retry:1");
    for bad in [
        "a\" level=error msg=\"forged".to_owned(),
        "x".repeat(8_000),
        "with space".to_owned(),
    ] {
        let echoed = sent(bad.clone()).await;
        assert_ne!(echoed, bad);
        assert!(uuid::Uuid::parse_str(&echoed).is_ok(), "{echoed}");
    }
}

#[tokio::test]
async fn dot_and_dot_dot_are_no_lock_names() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let app = spawn_app().await;
    // Sent as they are (an HTTP client library would normalise them away first, as curl
    // does without --path-as-is).
    for path in [
        "/v1/locks/./leases",
        "/v1/locks/../leases",
        "/v1/locks/%2E%2E/leases",
    ] {
        let mut stream = tokio::net::TcpStream::connect(app.addr)
            .await
            .expect("connect");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 422"), "{path}: {answer}");
        assert!(answer.contains("invalid_lock_name"), "{path}: {answer}");
    }
    app.acquire("...", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn holder_labels_may_not_hide_or_turn_text() {
    let app = spawn_app().await;
    for label in [
        "admin\u{202E}txt.exe",
        "worker\u{200B}-1",
        "\u{2066}cron\u{2069}",
        "dep\u{FEFF}loy",
    ] {
        app.acquire("jobs", json!({"holder": label}))
            .await
            .assert_problem(422, "invalid_body");
    }
    app.acquire("jobs", json!({"holder": "Zoë's cron 🕒"}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn an_admin_reason_is_one_line() {
    let app = spawn_app().await;
    app.lease("stuck", json!({})).await;
    let reply = app
        .http
        .delete(app.url("/v1/admin/locks/stuck?reason=ok%0Aby%3A%20someone%20else"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(reply.status(), 400);
    app.force_release("stuck", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
}

#[tokio::test]
async fn a_tenants_reader_may_not_read_every_tenants_metrics() {
    let app = spawn_app().await;
    let (_, tenant_reader) = app
        .create_key(json!({"name": "acme-ops", "tenant": "acme", "roles": ["reader"]}))
        .await;
    app.with_key(&tenant_reader)
        .get("/metrics")
        .await
        .assert_problem(403, "tenant_not_allowed");
    let (_, deployment_reader) = app
        .create_key(json!({"name": "prometheus", "roles": ["reader"]}))
        .await;
    let scraped = app
        .http
        .get(app.url("/metrics"))
        .header("leasehold-key", &deployment_reader)
        .send()
        .await
        .expect("scrape");
    assert_eq!(scraped.status(), 200);
}

#[tokio::test]
async fn a_key_the_admin_token_makes_for_a_tenant_is_audited_in_that_tenant() {
    let app = spawn_app().await;
    app.create_key(json!({"name": "acme-ci", "tenant": "acme", "roles": ["client"]}))
        .await;
    let (_, acme_admin) = app
        .create_key(json!({"name": "acme-admin", "tenant": "acme", "roles": ["admin"]}))
        .await;
    let audit = app.with_key(&acme_admin).get("/v1/admin/audit").await;
    audit.assert_status(200);
    let targets: Vec<&str> = audit.body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["target"].as_str())
        .collect();
    assert_eq!(targets, ["acme-admin", "acme-ci"], "{}", audit.body);
}
