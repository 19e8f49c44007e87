//! API keys and tenants: anonymous callers only while that is safe, tenants that never see
//! each other's locks (API, events, dashboard), revocation and rotation seen by every
//! instance, name patterns, tenant admins, and the audit log of admin actions.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, FormFields, TestApp, spawn_app, spawn_app_with};

/// The names `GET /v1/locks` shows `view`, sorted.
async fn listed(view: &TestApp) -> Vec<String> {
    let body = view.get("/v1/locks").await.body;
    let mut names: Vec<String> = body["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| l["name"].as_str().expect("name").to_owned())
        .collect();
    names.sort();
    names
}

/// A key of `tenant` with `roles` (every name).
async fn key(
    app: &TestApp,
    name: &str,
    tenant: &str,
    roles: serde_json::Value,
) -> (String, String) {
    app.create_key(json!({"name": name, "tenant": tenant, "roles": roles}))
        .await
}

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

#[tokio::test]
async fn tenants_never_see_each_others_locks() {
    let app = spawn_app().await;
    let (_, a) = key(&app, "svc", "a", json!(["client", "reader"])).await;
    let (_, b) = key(&app, "svc", "b", json!(["client", "reader"])).await;
    let (a, b) = (app.with_key(&a), app.with_key(&b));

    // Two teams' "deploy" are two locks.
    let la = a.lease("deploy", json!({"holder": "team-a"})).await;
    let lb = b.lease("deploy", json!({"holder": "team-b"})).await;
    assert_eq!(
        a.inspect_lock("deploy").await.body["holders"][0]["holder"],
        "team-a"
    );
    assert_eq!(
        b.inspect_lock("deploy").await.body["holders"][0]["holder"],
        "team-b"
    );
    // One's lease is nothing to the other, even with its token.
    b.get(&la.path).await.assert_problem(404, "lease_not_found");
    b.release(&la, true)
        .await
        .assert_problem(404, "lease_not_found");
    assert_eq!(a.inspect_lease(&la).await.body["state"], "held");
    // The default tenant (the operator's) has no such lock.
    let op = app.with_key(ADMIN_TOKEN);
    op.inspect_lock("deploy")
        .await
        .assert_problem(404, "lock_not_found");
    // In Redis: a prefix per tenant, so a Redisson client of tenant a names it "a/deploy".
    let mut redis = app.redis.conn().await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("a/deploy")
        .query_async(&mut redis)
        .await
        .expect("hkeys");
    assert_eq!(fields, [format!("{}:1", la.id)]);
    let exists: bool = redis::cmd("EXISTS")
        .arg("deploy")
        .query_async(&mut redis)
        .await
        .expect("exists");
    assert!(!exists, "no lock in the default space");
    let state: bool = redis::cmd("EXISTS")
        .arg("{a/deploy}:leasehold")
        .query_async(&mut redis)
        .await
        .expect("exists");
    assert!(state, "the lock's state hash is in a's space too");

    // The listing: each tenant's own locks; the default tenant sees neither.
    assert_eq!(listed(&a).await, ["deploy"]);
    assert_eq!(listed(&b).await, ["deploy"]);
    assert!(
        listed(&op).await.is_empty(),
        "the default tenant lists no tenant's locks"
    );
    // A watch of a's lease from b: no such lease in b's space.
    let watch = b
        .http
        .get(b.url(&format!("{}/watch", la.path)))
        .bearer_auth(&la.token)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 404);

    // The event stream: a's events only.
    let mut stream = a
        .http
        .get(a.url("/v1/events"))
        .send()
        .await
        .expect("events");
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    first_comment(&mut stream, &mut buffer).await;
    b.lease("b-only", json!({})).await;
    a.lease("a-only", json!({})).await;
    // a's own earlier event may still be on its way (events go out in batches, a few ms
    // later): what matters is that b's never comes.
    loop {
        let event = next_data(&mut stream, &mut buffer).await;
        assert_ne!(event["lock"], "b-only", "{event}");
        if event["lock"] == "a-only" {
            break;
        }
        assert_eq!(event["lock"], "deploy", "{event}");
    }

    // The dashboard: a's locks only.
    b.lease("b-secret", json!({})).await;
    let page = a
        .http
        .get(a.url("/"))
        .send()
        .await
        .expect("overview")
        .text()
        .await
        .expect("html");
    assert!(
        page.contains("a-only") && page.contains(r#"data-lock="deploy""#),
        "{page}"
    );
    assert!(
        !page.contains("b-secret") && !page.contains("b-only"),
        "{page}"
    );
    let other = a
        .http
        .get(a.url("/locks/b-secret"))
        .send()
        .await
        .expect("lock page");
    assert_eq!(other.status(), 404);
    drop(lb);
}

async fn first_comment(response: &mut reqwest::Response, buffer: &mut String) {
    while !buffer.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("in time")
            .expect("chunk")
            .expect("open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
    if let Some(end) = buffer.find("\n\n") {
        buffer.drain(..end + 2);
    }
}

async fn next_data(response: &mut reqwest::Response, buffer: &mut String) -> serde_json::Value {
    let wait = async {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let message: String = buffer.drain(..end + 2).collect();
                if let Some(data) = message.lines().find_map(|l| l.strip_prefix("data: "))
                    && !data.is_empty()
                {
                    return serde_json::from_str(data).expect("event JSON");
                }
                continue;
            }
            let chunk = response.chunk().await.expect("chunk").expect("stream open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("an event within 10 s")
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
    // The limit is on wrong attempts: someone with the right token, from the same address
    // (on loopback: any local user), still signs in.
    let right = http
        .post(app.url("/login"))
        .header("origin", app.url(""))
        .form_fields(&[("token", crate::helpers::ADMIN_TOKEN)])
        .send()
        .await
        .expect("sign in");
    assert!(
        matches!(right.status().as_u16(), 200 | 303),
        "{}",
        right.status()
    );
}
