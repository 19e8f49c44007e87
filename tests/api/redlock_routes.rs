//! RedLock leases on the routes that span stores: an expiry recorded once by the sweeper (and
//! not while heartbeats keep the lease), the listing merged with the main Redis's names page
//! by page, an admin's force release on every node, and who waits listed with the name's
//! other waiters.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Lease, TestApp};
use crate::matrix::kinds::{backlog, with_nodes};

/// The events of `lock` the backlog holds now.
async fn events_of(app: &TestApp, lock: &str) -> Vec<Value> {
    backlog(app)
        .await
        .into_iter()
        .filter(|e| e["lock"] == lock)
        .collect()
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// The main Redis's index of RedLock leases (`lua/redlock.lua`).
async fn indexed(app: &TestApp) -> u64 {
    redis::cmd("ZCARD")
        .arg("{leasehold/}:redlock:due")
        .query_async(&mut app.redis.conn().await)
        .await
        .expect("ZCARD")
}

#[tokio::test]
async fn a_redlock_expiry_is_recorded_once_and_the_name_is_free() {
    let (app, nodes) = with_nodes().await;
    let lease = app
        .lease("nightly", json!({"kind": "redlock", "ttl_ms": 400}))
        .await;
    assert_eq!(indexed(&app).await, 1);
    app.inspect_lock("nightly").await.assert_status(200);
    // The sweeper reads the due list every second.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
    let events = loop {
        let events = events_of(&app, "nightly").await;
        if count(&events, "expired") > 0 || tokio::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(count(&events, "acquired"), 1, "{events:?}");
    assert_eq!(count(&events, "expired"), 1, "recorded once: {events:?}");
    let expired = events
        .iter()
        .find(|e| e["type"] == "expired")
        .expect("expired");
    assert_eq!(expired["lease_id"], lease.id.as_str());
    assert_eq!(expired["kind"], "redlock");
    assert_eq!(indexed(&app).await, 0, "the index lets it go");
    app.inspect_lock("nightly")
        .await
        .assert_problem(404, "lock_not_found");
    app.heartbeat(&lease, json!({})).await.assert_status(410);
    // Each node recorded its copy's expiry in its own history.
    for node in &nodes {
        let entries: u64 = redis::cmd("XLEN")
            .arg("{nightly}:leasehold:history")
            .query_async(&mut node.conn().await)
            .await
            .expect("XLEN");
        assert!(entries >= 1, "a node's history holds the expiry");
    }
}

#[tokio::test]
async fn a_redlock_lease_kept_alive_by_heartbeats_is_not_recorded_expired() {
    let (app, _nodes) = with_nodes().await;
    let lease = app
        .lease("kept", json!({"kind": "redlock", "ttl_ms": 900}))
        .await;
    // Past its first TTL several times over; the sweeper finds it held each time.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.heartbeat(&lease, json!({})).await.assert_status(200);
    }
    let events = events_of(&app, "kept").await;
    assert_eq!(count(&events, "expired"), 0, "{events:?}");
    assert!(count(&events, "renewed") >= 10, "{events:?}");
    assert_eq!(indexed(&app).await, 1);
    app.release(&lease, false).await.assert_status(200);
    assert_eq!(indexed(&app).await, 0);
    let events = events_of(&app, "kept").await;
    assert_eq!(count(&events, "released"), 1, "{events:?}");
}

#[tokio::test]
async fn the_listing_merges_redlock_names_with_the_main_redis_page_by_page() {
    let (app, _nodes) = with_nodes().await;
    let mut expected = BTreeSet::new();
    let mut held: Vec<Lease> = Vec::new();
    for i in 0..6 {
        let (name, kind) = if i % 2 == 0 {
            (format!("mix-{i}-red"), "redlock")
        } else {
            (format!("mix-{i}-main"), "reentrant")
        };
        held.push(
            app.lease(&name, json!({"kind": kind, "ttl_ms": 30_000}))
                .await,
        );
        expected.insert(name);
    }
    // One name held both ways: listed once, with both holders.
    app.lease("mix-9", json!({"kind": "reentrant", "ttl_ms": 30_000}))
        .await;
    app.lease("mix-9", json!({"kind": "redlock", "ttl_ms": 30_000}))
        .await;
    expected.insert("mix-9".to_owned());
    let mut listed = Vec::new();
    let mut cursor = String::new();
    for _ in 0..20 {
        let page = app
            .get(&format!("/v1/locks?prefix=mix-&limit=2&cursor={cursor}"))
            .await;
        page.assert_status(200);
        for lock in page.body["locks"].as_array().expect("locks") {
            let name = lock["name"].as_str().expect("a name").to_owned();
            if name == "mix-9" {
                assert_eq!(lock["holders"], 2, "{lock}");
            }
            listed.push(name);
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(unique.len(), listed.len(), "no name twice: {listed:?}");
    assert_eq!(unique, expected, "every name once, in order: {listed:?}");
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, listed);
    let red = app.inspect_lock("mix-0-red").await;
    red.assert_status(200);
    assert_eq!(red.body["kind"], "redlock");
    assert_eq!(red.body["holders"][0]["lease_id"], held[0].id.as_str());
}

#[tokio::test]
async fn an_admin_force_release_removes_a_redlock_lease_on_every_node_once() {
    let (app, nodes) = with_nodes().await;
    let lease = app
        .lease("ops", json!({"kind": "redlock", "ttl_ms": 30_000}))
        .await;
    let forced = app
        .force_release("ops", Some(crate::helpers::ADMIN_TOKEN))
        .await;
    forced.assert_status(200);
    assert_eq!(forced.body["released"], true, "{}", forced.body);
    assert_eq!(forced.body["removed"].as_array().map(Vec::len), Some(1));
    for node in &nodes {
        let held: u64 = redis::cmd("EXISTS")
            .arg("ops")
            .query_async(&mut node.conn().await)
            .await
            .expect("EXISTS");
        assert_eq!(held, 0, "the lock is gone from every node");
    }
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    let events = events_of(&app, "ops").await;
    assert_eq!(count(&events, "force_released"), 1, "{events:?}");
    // Free at once for anyone.
    app.acquire("ops", json!({"kind": "redlock"}))
        .await
        .assert_status(201);
}

/// The name's waiting list as `GET /v1/locks/{name}` shows it, once it satisfies `done`
/// (bounded: the list is written in the background).
async fn waiting_until(app: &TestApp, lock: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    for _ in 0..100 {
        let view = app.get(&format!("/v1/locks/{lock}")).await;
        seen = view.body["waiting"].as_array().cloned().unwrap_or_default();
        if done(&seen) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{lock}: the waiting list never came right: {seen:?}");
}

#[tokio::test]
async fn a_redlock_waiter_is_listed_with_the_names_waiters_and_leaves_the_list_when_granted() {
    let (app, _nodes) = with_nodes().await;
    let red = app
        .lease("red-line", json!({"kind": "redlock", "ttl_ms": 30_000}))
        .await;
    // The lock of the same name on the main Redis: a RedLock waiter does not wait for it.
    let main = app.lease("red-line", json!({"ttl_ms": 30_000})).await;
    let mut watch = app.watch(&main).await;
    let waiter = app.spawn_post(
        "/v1/locks/red-line/leases?wait_ms=10000",
        json!({"kind": "redlock", "holder": "second"}),
    );
    let listed = waiting_until(&app, "red-line", |w| !w.is_empty()).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "redlock", "{listed:?}");
    assert_eq!(listed[0]["holder"], "second", "{listed:?}");
    let page = app
        .http
        .get(app.url("/locks/red-line"))
        .send()
        .await
        .expect("request");
    let html = page.text().await.expect("html");
    let table = html
        .split_once("<table class=\"waiting\">")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("the lock page lists no waiter: {html}"));
    assert!(
        table.contains("second") && table.contains("redlock"),
        "{table}"
    );
    watch.assert_quiet(Duration::from_millis(1_200)).await;
    app.release(&red, true).await.assert_status(200);
    let granted = waiter.await.expect("waiter");
    granted.assert_status(201);
    assert_eq!(granted.body["kind"], "redlock");
    waiting_until(&app, "red-line", <[Value]>::is_empty).await;
    app.release(&main, true).await.assert_status(200);
}
