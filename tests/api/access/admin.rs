//! The audit log of admin actions, and dashboard sessions opened with a key: ended everywhere
//! on sign-out, sign-in rate-limited per address.

use reqwest::Method;
use serde_json::json;

use super::key;
use crate::helpers::{FormFields, spawn_app};

#[tokio::test]
async fn admin_actions_are_audited_with_who_why_and_what_they_removed() {
    let app = spawn_app().await;
    let (_, ops) = key(&app, "ops-alice", "a", json!(["admin", "reader"])).await;
    let (_, svc) = key(&app, "svc", "a", json!(["client"])).await;
    let lease = app
        .with_key(&svc)
        .lease("stuck", json!({"ttl_ms": 600_000}))
        .await;
    let ops = app.with_key(&ops);
    let forced = ops
        .send(
            ops.http
                .delete(ops.url("/v1/admin/locks/stuck?reason=job+crashed")),
        )
        .await;
    forced.assert_status(200);

    let audit = ops.get("/v1/admin/audit").await;
    audit.assert_status(200);
    let entry = &audit.body["entries"][0];
    assert_eq!(entry["action"], "force_release");
    assert_eq!(entry["by"], "ops-alice");
    assert_eq!(entry["tenant"], "a");
    assert_eq!(entry["target"], "stuck");
    assert_eq!(entry["reason"], "job crashed");
    assert_eq!(entry["details"]["removed"], json!([lease.id]));
    // The tenant admin sees its tenant's entries only: not the operator's key creations.
    assert!(
        audit.body["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .all(|e| e["tenant"] == "a"),
        "{}",
        audit.body
    );
    // The operator sees everything, key changes included, by "admin token".
    let all = app.admin(Method::GET, "/v1/admin/audit", None).await;
    let created: Vec<&serde_json::Value> = all.body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "key_created")
        .collect();
    assert_eq!(created.len(), 2);
    assert!(created.iter().all(|e| e["by"] == "admin token"));
    // And the lock's own history names the key too.
    let page = ops
        .http
        .get(ops.url("/locks/stuck"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(
        page.contains("ops-alice") && page.contains("job crashed"),
        "{page}"
    );
}

#[tokio::test]
async fn a_dashboard_session_opened_with_a_key_ends_everywhere_on_sign_out() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let (_, secret) = key(&app, "viewer", "a", json!(["reader"])).await;
    let http = leasehold::client::http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let signed_in = http
        .post(app.url("/login"))
        .header("origin", app.url(""))
        .form_fields(&[("token", secret.as_str()), ("next", "/")])
        .send()
        .await
        .expect("sign in");
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    assert!(!cookie.contains(&secret));
    // The peer accepts the session: it lives in Redis.
    let page = http
        .get(peer.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("overview");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("viewer"), "the header names the key: {html}");
    let csrf = html
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token")
        .to_owned();
    let out = http
        .post(app.url("/logout"))
        .header("origin", app.url(""))
        .header("cookie", &cookie)
        .form_fields(&[("csrf", csrf.as_str())])
        .send()
        .await
        .expect("sign out");
    assert_eq!(out.status(), 303);
    let after = http
        .get(peer.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("overview");
    assert_eq!(after.status(), 303, "the peer no longer knows the session");
    assert_eq!(
        after
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok()),
        Some("/login?next=/")
    );
}

#[tokio::test]
async fn dashboard_sign_in_is_rate_limited_per_address() {
    let app = spawn_app().await;
    let http = leasehold::client::http_builder()
        .build()
        .expect("an HTTP client");
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let reply = http
            .post(app.url("/login"))
            .header("origin", app.url(""))
            .form_fields(&[("token", "wrong-token-0123456789")])
            .send()
            .await
            .expect("sign in");
        statuses.push((
            reply.status().as_u16(),
            reply
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ));
    }
    eprintln!("eight wrong sign-ins in a row: {statuses:?}");
    assert!(statuses[..5].iter().all(|(s, _)| *s == 401), "{statuses:?}");
    assert!(
        statuses[5..]
            .iter()
            .all(|(s, after)| *s == 429 && after.is_some()),
        "{statuses:?}"
    );
    // Every attempt counts, before its token is looked at: past the limit even the right
    // token is not checked (a weak token is guessed no faster than the limit; issue 59).
    let right = http
        .post(app.url("/login"))
        .header("origin", app.url(""))
        .form_fields(&[("token", crate::helpers::ADMIN_TOKEN)])
        .send()
        .await
        .expect("sign in");
    assert_eq!(right.status().as_u16(), 429);
}
