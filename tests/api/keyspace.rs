//! Lock names never reach Leasehold's own data: API keys, sessions, the dashboard's secret, the
//! audit log and the events backlog live under the hash tag `{leasehold/}`, which no lock,
//! semaphore or tenant name can produce, and a deployment written by an earlier version has
//! its data moved there on start, none of it lost. Keys other programs keep in the same Redis
//! are never changed or revealed.

use std::time::Duration;

use serde_json::json;

use crate::dashboard::Browser;
use crate::helpers::{ADMIN_TOKEN, TestApp, next_event, spawn_app};

/// The names of Leasehold's own keys before they moved under `{leasehold/}`.
const OWN_NAMES: [&str; 7] = [
    "leasehold:keys",
    "leasehold:key-names",
    "leasehold:audit",
    "leasehold:dashboard-secret",
    "leasehold:events:recent",
    "leasehold:session:0000000000000000000000000000000000000000000000000000000000000000",
    "leasehold:key:0000000000000000000000000000000000000000000000000000000000000000",
];

async fn redis_keys(app: &TestApp, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

#[tokio::test]
async fn a_lease_named_like_the_audit_log_leaves_the_audit_log_alone() {
    let app = spawn_app().await;
    app.lease("leasehold:audit", json!({"ttl_ms": 60_000}))
        .await;
    app.lease("stuck", json!({"holder": "a"})).await;
    app.force_release("stuck", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let audit = app
        .admin(reqwest::Method::GET, "/v1/admin/audit", None)
        .await;
    audit.assert_status(200);
    assert_eq!(
        audit.body["entries"][0]["target"], "stuck",
        "{}",
        audit.body
    );
    // The lock is still a lock, held by its lease.
    let lock = app.inspect_lock("leasehold:audit").await;
    lock.assert_status(200);
    assert_eq!(lock.body["holders"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_lease_named_like_the_key_store_does_not_swallow_the_keys_made_later() {
    let app = spawn_app().await;
    app.lease("leasehold:keys", json!({"ttl_ms": 60_000})).await;
    let (_, secret) = app
        .create_key(json!({"name": "ci", "roles": ["client"]}))
        .await;
    // The squatter's lock goes (force-released here; its TTL would do the same), and with its
    // hash anything written into it.
    app.force_release("leasehold:keys", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    app.with_key(&secret)
        .acquire("jobs", json!({}))
        .await
        .assert_status(201);
    // A key exists, so a loopback caller without one is refused.
    app.view(None, true)
        .acquire("jobs2", json!({}))
        .await
        .assert_problem(401, "api_key_required");
}

#[tokio::test]
async fn a_semaphore_named_like_the_dashboard_secret_cannot_set_it() {
    let app = spawn_app().await;
    app.permits(
        "leasehold:dashboard-secret",
        json!({"limit": 5, "permits": 1, "ttl_ms": 60_000}),
    )
    .await;
    let mut browser = Browser::new(&app);
    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    browser.get("/").await.assert_status(200);
    let mut conn = app.redis.conn().await;
    let secret: Option<String> = redis::cmd("GET")
        .arg("{leasehold/}:dashboard-secret")
        .query_async(&mut conn)
        .await
        .expect("GET");
    let secret = secret.expect("the secret is kept under {leasehold/}");
    assert_eq!(secret.len(), 43, "256 random bits, not a semaphore's count");
    let permits: String = redis::cmd("GET")
        .arg("leasehold:dashboard-secret")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(permits, "4", "the semaphore keeps its own count");
}

#[tokio::test]
async fn a_lock_named_like_the_events_backlog_leaves_the_backlog_alone() {
    let app = spawn_app().await;
    let mut live = app.events().await;
    app.lease("leasehold:events:recent", json!({"ttl_ms": 60_000}))
        .await;
    let lease = app.lease("nightly", json!({"holder": "cron"})).await;
    app.release(&lease, true).await.assert_status(200);
    // Once the release went out live, a new listener finds it in the backlog.
    loop {
        let event = next_event(&mut live, "released").await;
        if event["lock"] == "nightly" {
            break;
        }
    }
    let backlog = backlog_text(&app).await;
    assert!(
        backlog.contains("\"lock\":\"nightly\"") && backlog.contains("released"),
        "the backlog misses nightly's release: {backlog}"
    );
}

#[tokio::test]
async fn every_name_of_leaseholds_own_data_is_an_ordinary_lock() {
    let app = spawn_app().await;
    for name in OWN_NAMES {
        let lease = app.lease(name, json!({"ttl_ms": 60_000})).await;
        app.release(&lease, true).await.assert_status(200);
        let sem = app.permits(name, json!({"limit": 2, "permits": 1})).await;
        app.release(&sem, true).await.assert_status(200);
    }
    // Leasehold's own data was written where no lock name reaches.
    app.create_key(json!({"name": "ops", "roles": ["reader"]}))
        .await;
    let own = redis_keys(&app, "*leasehold/*").await;
    assert!(
        own.iter().all(|k| k.starts_with("{leasehold/}:")),
        "{own:?}"
    );
    assert!(own.contains(&"{leasehold/}:keys".to_owned()), "{own:?}");
}

#[tokio::test]
async fn an_upgraded_deployment_keeps_its_keys_sessions_audit_and_secret() {
    let mut old = spawn_app().await;
    let mut live = old.events().await;
    old.lease("stuck", json!({})).await;
    old.force_release("stuck", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let lease = old.lease("nightly", json!({})).await;
    old.release(&lease, true).await.assert_status(200);
    while next_event(&mut live, "released").await["lock"] != "nightly" {}
    let (_, secret) = old
        .create_key(json!({"name": "ci", "roles": ["client", "reader"]}))
        .await;
    let mut browser = Browser::new(&old);
    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    // What the same data looked like before: every own key under `leasehold:` instead.
    let mut conn = old.redis.conn().await;
    let own = redis_keys(&old, "{leasehold/}:*").await;
    for key in &own {
        // (The names index and the sweepers' turn are newer than the layout this stands
        // for.)
        if key.starts_with("{leasehold/}:names") || key == "{leasehold/}:sweeper" {
            continue;
        }
        let legacy = key.replacen("{leasehold/}:", "leasehold:", 1);
        redis::cmd("RENAME")
            .arg(key)
            .arg(&legacy)
            .query_async::<()>(&mut conn)
            .await
            .expect("RENAME");
    }
    // And a lock someone took on the old key store's name since, with the records in it.
    redis::cmd("HSET")
        .arg("leasehold:keys")
        .arg("0190c5f0-0000-7000-8000-000000000000:1")
        .arg(1)
        .query_async::<()>(&mut conn)
        .await
        .expect("HSET");
    // The old instance stops; a new one starts on the same Redis and moves the data.
    old.shutdown.cancel();
    if let Some(task) = old.task.take() {
        let _ = task.await;
    }
    let new = old.spawn_peer().await;
    new.with_key(&secret)
        .acquire("jobs", json!({}))
        .await
        .assert_status(201);
    let mut moved = Browser::new(&new);
    moved.cookie = browser.cookie.clone();
    moved.get("/").await.assert_status(200);
    let audit = new
        .admin(reqwest::Method::GET, "/v1/admin/audit", None)
        .await;
    audit.assert_status(200);
    let targets: Vec<&str> = audit.body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["target"].as_str())
        .collect();
    assert_eq!(targets, ["ci", "stuck"], "{}", audit.body);
    assert!(
        backlog_text(&new.with_key(&secret))
            .await
            .contains("\"lock\":\"nightly\""),
        "the events backlog moved too"
    );
    // Nothing is left under the old names but the lock that was never ours (and the quota
    // ledger, whose keys carry their owner's hash tag and were never in a name's reach).
    let left: Vec<String> = redis_keys(&new, "leasehold:*")
        .await
        .into_iter()
        .filter(|k| !k.starts_with("leasehold:quota:{"))
        .collect();
    assert_eq!(left, ["leasehold:keys"]);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("leasehold:keys")
        .query_async(&mut conn)
        .await
        .expect("HKEYS");
    assert_eq!(fields, ["0190c5f0-0000-7000-8000-000000000000:1"]);
}

/// What `GET /v1/events?backlog=50` sends at once (read for 300 ms).
async fn backlog_text(app: &TestApp) -> String {
    use futures_util::StreamExt as _;
    let response = app
        .http
        .get(app.url("/v1/events?backlog=50"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout(Duration::from_millis(300), stream.next()).await
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

#[tokio::test]
async fn keys_of_other_programs_are_never_changed_or_revealed() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg("41")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let _: () = redis::cmd("HSET")
        .arg("profile")
        .arg("email")
        .arg("someone@example.com")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    for name in ["counter", "profile"] {
        let reply = app.acquire(name, json!({})).await;
        reply.assert_problem(409, "kind_conflict");
        assert_eq!(reply.body["held_as"], "foreign");
        assert!(!reply.body.to_string().contains("email"));
        let reply = app.acquire_permits(name, 0, json!({"limit": 50})).await;
        reply.assert_problem(409, "kind_conflict");
        assert_eq!(reply.body["held_as"], "foreign");
        let view = app.inspect_lock(name).await;
        assert_eq!(view.body["kind"], "foreign");
        assert_eq!(view.body["holders"], json!([]));
        app.force_release(name, Some(ADMIN_TOKEN))
            .await
            .assert_problem(409, "kind_conflict");
    }
    let counter: String = redis::cmd("GET")
        .arg("counter")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(counter, "41");
    let profile: Vec<String> = redis::cmd("HGETALL")
        .arg("profile")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(profile, ["email", "someone@example.com"]);
}
