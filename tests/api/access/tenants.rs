//! Tenants never see each other's locks: not through the API, the events or the dashboard.

use std::time::Duration;

use serde_json::json;

use super::key;
use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

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
    in_redis_each_tenant_has_its_prefix(&app, &la.id).await;

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

    events_are_the_tenants_own(&a, &b).await;
    dashboard_shows_the_tenants_own(&a, &b).await;
    drop(lb);
}

/// In Redis: a prefix per tenant, so a Redisson client of tenant a names it "a/deploy"
/// (held by a's lease `lease_id`).
async fn in_redis_each_tenant_has_its_prefix(app: &TestApp, lease_id: &str) {
    let mut redis = app.redis.conn().await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("a/deploy")
        .query_async(&mut redis)
        .await
        .expect("hkeys");
    assert_eq!(fields, [format!("{lease_id}:1")]);
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
}

/// The event stream `a` reads: a's events only, whatever `b` does meanwhile.
async fn events_are_the_tenants_own(a: &TestApp, b: &TestApp) {
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
}

/// The dashboard `a` sees: a's locks only, none of `b`'s.
async fn dashboard_shows_the_tenants_own(a: &TestApp, b: &TestApp) {
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
