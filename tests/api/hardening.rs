//! What one key could do past its limits (issue 59), each found on loopback as an attacker
//! would: a revoked key's leases left standing, costly calls paid at the price of one, an
//! admin key lifting the operator's limits, lock-delay escaping the key's TTL and nobody
//! able to lift it, member names shown past a reader's patterns, watches outliving their key,
//! Redis addresses shown to callers `/v1/admin/redis` refuses, and sign-in guesses checked
//! past their limit.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, TestApp, spawn_app_tweaked, spawn_app_with};
use leasehold::limits::ClientLimits;

fn defaults() -> ClientLimits {
    leasehold::server::ServerConfig::new("").clients
}

/// A server with the defaults for callers, `tweak`ed.
async fn app_with(tweak: impl FnOnce(&mut leasehold::server::ServerConfig)) -> TestApp {
    spawn_app_tweaked(
        AppOptions {
            clients: defaults(),
            ..AppOptions::default()
        },
        tweak,
    )
    .await
}

#[tokio::test]
async fn revoking_a_key_ends_its_leases_and_an_admin_sees_what_a_key_holds() {
    let app = app_with(|_| {}).await;
    let (id, secret) = app
        .create_key(json!({"name": "doomed", "tenant": "acme", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    key.lease("a", json!({"ttl_ms": 3_600_000})).await;
    key.permits("b", json!({"limit": 5, "permits": 2, "ttl_ms": 3_600_000}))
        .await;
    // The operator sees them, though they are another tenant's.
    let held = app
        .admin(
            reqwest::Method::GET,
            &format!("/v1/admin/keys/{id}/leases"),
            None,
        )
        .await;
    held.assert_status(200);
    assert_eq!(held.body["tenant"], "acme");
    let mut locks: Vec<&str> = held.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .filter_map(|l| l["lock"].as_str())
        .collect();
    locks.sort_unstable();
    assert_eq!(locks, ["a", "b"], "{}", held.body);
    // Revoked, its leases end: the names are free for the tenant's other keys at once.
    let revoked = app
        .admin(
            reqwest::Method::DELETE,
            &format!("/v1/admin/keys/{id}"),
            None,
        )
        .await;
    revoked.assert_status(200);
    assert_eq!(revoked.body["ended_leases"], 2, "{}", revoked.body);
    let (_, other) = app
        .create_key(json!({"name": "next", "tenant": "acme", "roles": ["client"]}))
        .await;
    let other = app.with_key(&other);
    other.acquire("a", json!({})).await.assert_status(201);
    other
        .acquire_permits("b", 0, json!({"limit": 5, "permits": 5}))
        .await
        .assert_status(201);
    let audit = app
        .admin(reqwest::Method::GET, "/v1/admin/audit", None)
        .await;
    assert!(audit.body.to_string().contains("evict"), "{}", audit.body);
}

#[tokio::test]
async fn a_costly_call_is_paid_in_full_even_by_an_empty_budget() {
    let app = app_with(|config| {
        config.clients.rate_per_second = 1;
        config.clients.rate_burst = 20;
    })
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "prober", "roles": ["client", "reader"]}))
        .await;
    let key = app.with_key(&secret);
    let unknown = "/v1/locks/x/leases/01900000-0000-7000-8000-000000000000";
    // Two lookups of a lease that is not there (each reads the lock's history: 16 requests'
    // worth); the second costs more than the budget has left, and the rest is owed.
    key.get(unknown).await.assert_status(404);
    key.get(unknown).await.assert_status(404);
    let refused = key.get(unknown).await;
    refused.assert_problem(429, "rate_limited");
    let wait: u64 = refused
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .expect("Retry-After");
    assert!(
        wait >= 10,
        "the debt must be paid before the next request: Retry-After {wait}"
    );
}

#[tokio::test]
async fn an_admin_key_grants_within_the_operators_ceilings() {
    let app = app_with(|config| config.tenant_caps.keys = 3).await;
    let (_, admin) = app
        .create_key(json!({"name": "acme-admin", "tenant": "acme", "roles": ["admin"]}))
        .await;
    let create = |name: String, quotas: serde_json::Value| {
        let tenant_admin = app.with_key(&admin);
        async move {
            tenant_admin
                .send(
                    tenant_admin
                        .http
                        .post(tenant_admin.url("/v1/admin/keys"))
                        .json(&json!({"name": name, "roles": ["client"], "quotas": quotas})),
                )
                .await
        }
    };
    let lifted = create(
        "greedy".into(),
        json!({"max_leases": 1_000_000_000_000_u64}),
    )
    .await;
    lifted.assert_problem(403, "quota_above_ceiling");
    assert_eq!(lifted.body["quota"], "max_leases");
    create("big".into(), json!({"max_state_bytes": u64::MAX}))
        .await
        .assert_problem(403, "quota_above_ceiling");
    // Minted at once, past the tenant's cap of 3 keys (its admin key is one): two more only.
    let made =
        futures_util::future::join_all((0..10).map(|i| create(format!("minted-{i}"), json!({}))))
            .await;
    let created = made.iter().filter(|r| r.status == 201).count();
    assert_eq!(
        created,
        2,
        "{:?}",
        made.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(
        made.iter()
            .filter(|r| r.status != 201)
            .all(|r| r.body["code"] == "too_many_keys")
    );
    // The operator's token is not bound by them.
    app.create_key(
        json!({"name": "ops-made", "tenant": "acme", "quotas": {"max_leases": 1_000_000}}),
    )
    .await;
}

#[tokio::test]
async fn a_tenants_keys_share_one_rate() {
    let app = app_with(|config| {
        config.tenant_caps.rate_per_second = 1;
        config.tenant_caps.rate_burst = 4;
    })
    .await;
    let mut keys = Vec::new();
    for i in 0..4 {
        let (_, secret) = app
            .create_key(json!({"name": format!("k{i}"), "tenant": "acme", "roles": ["reader"]}))
            .await;
        keys.push(app.with_key(&secret));
    }
    let mut statuses = Vec::new();
    for key in &keys {
        for _ in 0..2 {
            statuses.push(key.get("/v1/locks/x").await.status.as_u16());
        }
    }
    assert!(
        statuses.iter().filter(|&&s| s == 429).count() >= 3,
        "eight requests of four keys against a tenant burst of 4: {statuses:?}"
    );
}

#[tokio::test]
async fn lock_delay_stays_within_the_keys_ttl_and_an_admin_can_lift_it() {
    let app = spawn_app_with(AppOptions::default()).await;
    let (_, secret) = app
        .create_key(json!({"name": "short", "roles": ["client"], "quotas": {"max_ttl_ms": 5_000}}))
        .await;
    app.with_key(&secret)
        .acquire("d", json!({"ttl_ms": 5_000, "lock_delay_ms": 60_000}))
        .await
        .assert_problem(422, "invalid_lock_delay");
    // A delay left by a force release: lifted by a second one.
    let (_, secret) = app
        .create_key(json!({"name": "long", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    key.lease("d", json!({"ttl_ms": 60_000, "lock_delay_ms": 60_000}))
        .await;
    app.force_release("d", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    key.acquire("d", json!({}))
        .await
        .assert_problem(409, "lock_delay");
    let lifted = app.force_release("d", Some(ADMIN_TOKEN)).await;
    lifted.assert_status(200);
    assert_eq!(lifted.body["delay_lifted"], true, "{}", lifted.body);
    assert_eq!(lifted.body["released"], true, "{}", lifted.body);
    key.acquire("d", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_multilease_names_only_the_locks_a_reader_may_see() {
    let app = spawn_app_with(AppOptions::default()).await;
    let multi = app
        .send(
            app.http.post(app.url("/v1/multileases")).json(
                &json!({"locks": [{"name": "jobs-1"}, {"name": "payroll"}], "ttl_ms": 60_000}),
            ),
        )
        .await;
    multi.assert_status(201);
    let (_, reader) = app
        .create_key(json!({"name": "jobs-reader", "roles": ["reader"], "patterns": ["jobs-*"]}))
        .await;
    let lock = app.with_key(&reader).get("/v1/locks/jobs-1").await;
    lock.assert_status(200);
    let membership = &lock.body["holders"][0]["multilease"];
    assert_eq!(membership["locks"], json!(["jobs-1"]), "{}", lock.body);
    assert_eq!(membership["hidden_locks"], 1, "{}", lock.body);
    assert!(!lock.body.to_string().contains("payroll"));
    let listed = app.with_key(&reader).get("/v1/locks").await;
    assert!(
        !listed.body.to_string().contains("payroll"),
        "{}",
        listed.body
    );
}

#[tokio::test]
async fn a_lease_watch_ends_when_the_key_that_opened_it_is_revoked() {
    let app = spawn_app_with(AppOptions::default()).await;
    let (id, secret) = app
        .create_key(json!({"name": "watcher", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    let lease = key.lease("w", json!({"ttl_ms": 60_000})).await;
    let mut watch = key.watch(&lease).await;
    app.admin(
        reqwest::Method::DELETE,
        &format!("/v1/admin/keys/{id}?end_leases=false"),
        None,
    )
    .await
    .assert_status(200);
    // Revocation reaches the instance within a second or two; the stream then ends (`next`
    // fails the test when nothing comes within its bound).
    while watch.next(Duration::from_secs(10)).await.is_some() {}
}

#[tokio::test]
async fn readyz_and_the_redis_page_name_redis_only_to_the_deployments_admins() {
    let app = spawn_app_with(AppOptions::default()).await;
    let master = app.redis.socket().display().to_string();
    let anonymous = app.get("/readyz").await;
    anonymous.assert_status(200);
    assert!(
        anonymous.body.get("redis_master").is_none(),
        "{}",
        anonymous.body
    );
    let admin = app
        .send(app.http.get(app.url("/readyz")).bearer_auth(ADMIN_TOKEN))
        .await;
    assert!(admin.body["redis_master"].is_string(), "{}", admin.body);
    // A default-tenant reader sees the page but not the addresses.
    let (_, reader) = app
        .create_key(json!({"name": "looker", "roles": ["reader"]}))
        .await;
    let page = app
        .http
        .get(app.url("/redis"))
        .header("leasehold-key", &reader)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("text");
    assert!(
        !page.contains(&master),
        "the socket path was shown to a reader"
    );
}

#[tokio::test]
async fn sign_in_guesses_past_the_limit_are_not_checked() {
    let app = spawn_app_with(AppOptions::default()).await;
    let mut browser = crate::dashboard::Browser::new(&app);
    for _ in 0..5 {
        browser
            .sign_in("wrong-token-0123456789")
            .await
            .assert_status(401);
    }
    // Over the limit: even the right token is not looked at.
    browser.sign_in(ADMIN_TOKEN).await.assert_status(429);
    assert!(browser.cookie.is_none());
}
