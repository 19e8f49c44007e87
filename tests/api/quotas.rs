//! Quotas that bound bytes (issue 59): what one key and one tenant can make Redis keep.
//! The state budget (`limits::budget`) charges each part of what a caller makes Redis keep
//! its estimated size; these tests hold the estimates above what Redis measures, and repeat
//! the Redis-fill attempt that the names quota let through: semaphore leases of 1,000
//! permits with the longest holder labels and metadata, on name after name.

use serde_json::{Value, json};

use crate::helpers::{AppOptions, TestApp, spawn_app_with};
use leasehold::limits::ClientLimits;

/// The server's defaults for callers (what `leasehold serve` runs with).
fn defaults() -> ClientLimits {
    leasehold::server::ServerConfig::new("").clients
}

async fn used_memory(app: &TestApp) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

async fn set_maxmemory(app: &TestApp, bytes: u64) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .arg("maxmemory")
        .arg(bytes)
        .query_async::<()>(&mut app.redis.conn().await)
        .await
        .expect("CONFIG SET");
}

/// The biggest semaphore lease a key may take at its defaults: every permit, the longest
/// holder label, metadata near its bound.
fn heaviest(i: usize) -> Value {
    json!({
        "permits": 1000,
        "limit": 1000,
        "ttl_ms": 3_600_000,
        "holder": format!("{i:0>200}"),
        "metadata": {"pad": "x".repeat(4000)},
    })
}

#[tokio::test]
async fn one_key_at_its_default_quotas_cannot_fill_redis_through_two_instances() {
    let app = spawn_app_with(AppOptions {
        clients: defaults(),
        ..AppOptions::default()
    })
    .await;
    let cap = defaults().state_bytes;
    // Room for two keys' worth and a bit: what the attack filled before the budget.
    set_maxmemory(&app, 3 * cap).await;
    let (_, attacker) = app
        .create_key(json!({"name": "attacker", "roles": ["client"]}))
        .await;
    // Two instances, each taking room ahead in the key's account (its advance): together
    // they stay within the cap.
    let twin = app.spawn_twin().await;
    let attackers = [app.with_key(&attacker), twin.with_key(&attacker)];
    let before = used_memory(&app).await;
    let mut granted = 0;
    let refused = loop {
        let reply = attackers[granted % 2]
            .acquire_permits(&format!("fill-{granted}"), 0, heaviest(granted))
            .await;
        if reply.status != 201 {
            break reply;
        }
        granted += 1;
        assert!(granted < 10_000, "never refused");
    };
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "state bytes", "{}", refused.body);
    assert!(refused.header("retry-after").is_some());
    // Heartbeats and releases still work for it; the budget lets it hold what it has.
    let grown = used_memory(&app).await.saturating_sub(before);
    eprintln!("{granted} heaviest semaphore leases granted; Redis grew {grown} bytes (cap {cap})");
    assert!(granted > 10, "the budget refused too early: {granted}");
    assert!(
        grown <= cap + cap / 10,
        "Redis grew {grown} bytes, past the key's {cap}"
    );
    // Another key (and tenant) still gets leases: Redis is not full.
    let (_, other) = app
        .create_key(json!({"name": "bystander", "tenant": "acme", "roles": ["client"]}))
        .await;
    app.with_key(&other)
        .acquire("still-works", json!({}))
        .await
        .assert_status(201);
}

/// Runs `write` and checks that what Redis grew by stays below what the budget charged.
async fn charged_at_least_measured(
    app: &TestApp,
    key_id: &str,
    what: &str,
    write: impl AsyncFnOnce(),
) {
    let account = format!("leasehold:quota:{{key:{key_id}}}:bytes");
    let charged = async || -> u64 {
        // Charges after a call are sent every 250 ms.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        redis::cmd("HGET")
            .arg(&account)
            .arg("#")
            .query_async::<Option<u64>>(&mut app.redis.conn().await)
            .await
            .expect("HGET")
            .unwrap_or(0)
    };
    let (memory, budget) = (used_memory(app).await, charged().await);
    write().await;
    // Charged first: its wait lets what Redis holds only while it answers (client buffers,
    // a batch of live events in flight) go, so that what is measured is what Redis keeps.
    let charged = charged().await.saturating_sub(budget);
    // The least of three readings: what Redis keeps, not a moment's buffers.
    let mut kept = u64::MAX;
    for _ in 0..3 {
        kept = kept.min(used_memory(app).await);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let grown = kept.saturating_sub(memory);
    eprintln!("{what}: Redis grew {grown} bytes, the budget charged {charged}");
    assert!(
        charged >= grown,
        "{what}: charged {charged} bytes for {grown} Redis keeps"
    );
}

#[tokio::test]
async fn the_budget_charges_at_least_what_redis_keeps() {
    let app = spawn_app_with(AppOptions {
        clients: defaults(),
        ..AppOptions::default()
    })
    .await;
    let (id, secret) = app
        .create_key(json!({"name": "measured", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    let long = "h".repeat(200);
    charged_at_least_measured(&app, &id, "100 names, one held lease each", async || {
        for i in 0..100 {
            key.lease(
                &format!("n-{i}"),
                json!({"ttl_ms": 600_000, "holder": long}),
            )
            .await;
        }
    })
    .await;
    charged_at_least_measured(
        &app,
        &id,
        "10 semaphore leases of 1,000 permits",
        async || {
            for i in 0..10 {
                key.acquire_permits(&format!("s-{i}"), 0, heaviest(i))
                    .await
                    .assert_status(201);
            }
        },
    )
    .await;
    let lease = key
        .lease("busy", json!({"ttl_ms": 600_000, "holder": long}))
        .await;
    charged_at_least_measured(&app, &id, "500 heartbeats of one lease", async || {
        for _ in 0..500 {
            key.heartbeat(&lease, json!({})).await.assert_status(200);
        }
    })
    .await;
    charged_at_least_measured(&app, &id, "50 names, 20 cycles each", async || {
        for i in 0..50 {
            for _ in 0..20 {
                let lease = key
                    .lease(
                        &format!("c-{i}"),
                        json!({"holder": long, "metadata": {"m": "x".repeat(1000)}}),
                    )
                    .await;
                key.release(&lease, true).await.assert_status(200);
            }
        }
    })
    .await;
}

/// A busy caller's acquires are admitted against this instance's advance in its account (a
/// part of its own, 1/32 of the cap), which the next flush renews; the charges it covered
/// reach Redis with that flush.
#[tokio::test]
async fn an_instance_holds_an_advance_in_a_busy_callers_account() {
    let app = spawn_app_with(AppOptions {
        clients: defaults(),
        ..AppOptions::default()
    })
    .await;
    let (id, secret) = app
        .create_key(json!({"name": "busy", "roles": ["client"]}))
        .await;
    let key = app.with_key(&secret);
    for i in 0..20 {
        let lease = key.lease(&format!("b-{}", i % 4), json!({})).await;
        key.release(&lease, true).await.assert_status(200);
    }
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let account: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg(format!("leasehold:quota:{{key:{id}}}:bytes"))
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("HGETALL");
    let advances: Vec<u64> = account
        .iter()
        .filter(|(member, _)| member.starts_with("r:"))
        .map(|(_, size)| *size)
        .collect();
    assert_eq!(advances, vec![defaults().state_bytes / 32], "{account:?}");
    // Every name's state and history arrived; no lease record is left.
    for i in 0..4 {
        assert!(account.contains_key(&format!("n:b-{i}")), "{account:?}");
        assert!(account.contains_key(&format!("h:b-{i}")), "{account:?}");
    }
    assert!(!account.keys().any(|m| m.starts_with("l:")), "{account:?}");
}
