//! What one request may cost Redis: a listing reads the names index, not the keyspace, so its
//! cost does not grow with the names nobody uses any more, and a request that costs Redis
//! more than one (a listing, a lease looked up in a lock's history) counts as more against
//! its caller's rate.

use leasehold::limits::ClientLimits;
use serde_json::json;

use crate::helpers::{AppOptions, TestApp, spawn_app, spawn_app_with};

/// `INFO commandstats` as (command, calls).
async fn command_calls(app: &TestApp) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

async fn reset_stats(app: &TestApp) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut app.redis.conn().await)
        .await
        .expect("CONFIG RESETSTAT");
}

#[tokio::test]
async fn a_listing_reads_the_names_index_not_the_keyspace() {
    let app = spawn_app().await;
    // Many keys of other programs, and names nobody holds any more.
    redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(50_000)
        .arg("other")
        .query_async::<()>(&mut app.redis.conn().await)
        .await
        .expect("DEBUG POPULATE");
    for i in 0..100 {
        let lease = app.lease(&format!("gone-{i}"), json!({})).await;
        app.release(&lease, true).await.assert_status(200);
    }
    for name in ["a", "b", "c"] {
        app.lease(name, json!({})).await;
    }
    reset_stats(&app).await;
    let page = app.get("/v1/locks?prefix=&limit=10").await;
    page.assert_status(200);
    let names: Vec<&str> = page.body["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    let calls = command_calls(&app).await;
    assert!(
        !calls.iter().any(|(c, _)| c == "scan"),
        "no walk of the keyspace: {calls:?}"
    );
    // The page read at most 4 x 10 names from the index.
    let zrange = calls.iter().find(|(c, _)| c == "zrange").map(|(_, n)| *n);
    assert_eq!(zrange, Some(1), "{calls:?}");
}

#[tokio::test]
async fn names_found_dead_twice_leave_the_index() {
    let app = spawn_app().await;
    for i in 0..20 {
        let lease = app.lease(&format!("gone-{i:02}"), json!({})).await;
        app.release(&lease, true).await.assert_status(200);
    }
    app.lease("kept", json!({})).await;
    let mut conn = app.redis.conn().await;
    let indexed = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("ZCARD")
                .arg("{leasehold/}:names")
                .query_async::<u64>(&mut conn)
                .await
                .expect("ZCARD")
        }
    };
    assert_eq!(indexed(&mut conn).await, 21);
    // A first listing marks the dead; one after the grace (here: marks made to look old)
    // takes them out.
    app.get("/v1/locks").await.assert_status(200);
    let marks: Vec<String> = redis::cmd("HKEYS")
        .arg("{leasehold/}:names:dead")
        .query_async(&mut conn)
        .await
        .expect("HKEYS");
    assert_eq!(marks.len(), 20, "{marks:?}");
    for name in &marks {
        redis::cmd("HSET")
            .arg("{leasehold/}:names:dead")
            .arg(name)
            .arg(1)
            .query_async::<()>(&mut conn)
            .await
            .expect("HSET");
    }
    app.get("/v1/locks").await.assert_status(200);
    assert_eq!(indexed(&mut conn).await, 1);
    // Taken again, a name is listed again at once (here through another instance: this one
    // skips names it wrote within the last minute, which a real grace outlasts).
    app.spawn_peer().await.lease("gone-03", json!({})).await;
    let page = app.get("/v1/locks").await;
    assert_eq!(
        page.body["locks"].as_array().map(Vec::len),
        Some(2),
        "{}",
        page.body
    );
}

/// A server whose callers may send 10 requests a second, in bursts of 100.
async fn slow_rate_app() -> (TestApp, TestApp) {
    let app = spawn_app_with(AppOptions {
        clients: ClientLimits {
            rate_per_second: 10,
            rate_burst: 100,
            ..leasehold::server::ServerConfig::new("").clients
        },
        ..AppOptions::default()
    })
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "ops", "roles": ["client", "reader"]}))
        .await;
    let caller = app.with_key(&secret);
    (app, caller)
}

#[tokio::test]
async fn a_listing_costs_one_request_per_name_it_may_show() {
    let (_app, caller) = slow_rate_app().await;
    caller.get("/v1/locks?limit=60").await.assert_status(200);
    let refused = caller.get("/v1/locks?limit=60").await;
    refused.assert_problem(429, "rate_limited");
    assert!(refused.header("retry-after").is_some());
}

#[tokio::test]
async fn a_lease_looked_up_in_vain_costs_more_than_one_request() {
    let (_app, caller) = slow_rate_app().await;
    caller.lease("jobs", json!({})).await;
    // Each miss (a lease nobody holds: looked up in the lock's history) costs 16 requests.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let reply = caller
            .get(&format!(
                "/v1/locks/jobs/leases/0190c5f0-0000-8000-8000-00000000000{i}"
            ))
            .await;
        statuses.push(reply.status.as_u16());
    }
    assert_eq!(statuses[..6], [404; 6], "{statuses:?}");
    assert_eq!(statuses[7], 429, "{statuses:?}");
}
