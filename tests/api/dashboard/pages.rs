//! The overview and a lock's page, rendered against real Redis state: kinds, modes, holders,
//! waiters, paging, the history and its timeline.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Browser;
use crate::helpers::{TestApp, spawn_app};

async fn fair_ticket(app: &TestApp, lock: &str, holder: &str) -> String {
    let reply = app
        .acquire_with(lock, 50, json!({"kind": "fair", "holder": holder}), None)
        .await;
    reply.assert_status(202);
    reply.str("ticket_id")
}

#[tokio::test]
async fn overview_lists_live_locks_with_kinds_modes_holders_and_waiters() {
    let app = spawn_app().await;
    let reentrant = app
        .lease(
            "jobs:nightly",
            json!({"holder": "cron@db1", "ttl_ms": 60_000}),
        )
        .await;
    app.acquire_with("jobs:nightly", 0, json!({}), Some(&reentrant.token))
        .await
        .assert_status(200);
    app.lease("catalog", json!({"kind": "read", "holder": "reader-a"}))
        .await;
    app.lease("catalog", json!({"kind": "read", "holder": "reader-b"}))
        .await;
    app.lease("deploy", json!({"kind": "fair", "holder": "deployer"}))
        .await;
    let _ticket = fair_ticket(&app, "deploy", "next-deployer").await;
    app.acquire_permits(
        "gpu-pool",
        0,
        json!({"limit": 5, "permits": 2, "holder": "trainer-7"}),
    )
    .await
    .assert_status(201);
    // Used once, free now: not live, not listed.
    let gone = app.lease("jobs:done", json!({})).await;
    app.release(&gone, true).await.assert_status(200);

    let browser = Browser::new(&app);
    let page = browser.get("/").await;
    page.assert_status(200);
    assert!(
        page.header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
    );
    let csp = page.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"));

    let row = page.row("jobs:nightly");
    assert!(
        row.contains("reentrant") && row.contains("cron@db1"),
        "{row}"
    );
    assert!(
        row.contains("<td data-label=\"Reentries\">2</td>"),
        "reentry count 2: {row}"
    );
    assert!(row.contains(" s</td>"), "a TTL left: {row}");
    let row = page.row("catalog");
    assert!(row.contains("rw") && row.contains("read"), "{row}");
    assert!(
        row.contains("reader-a") && row.contains("reader-b"),
        "{row}"
    );
    let row = page.row("deploy");
    assert!(row.contains("fair") && row.contains("deployer"), "{row}");
    assert!(
        row.contains("class=\"waiters\">1</td>"),
        "one waiter: {row}"
    );
    let row = page.row("gpu-pool");
    assert!(
        row.contains("semaphore") && row.contains("2 of 5 permits"),
        "{row}"
    );
    assert!(row.contains("trainer-7"), "{row}");
    page.assert_lacks("jobs:done");

    let filtered = browser.get("/?prefix=jobs:").await;
    filtered
        .assert_status(200)
        .assert_contains(r#"data-lock="jobs:nightly""#);
    filtered
        .assert_lacks(r#"data-lock="catalog""#)
        .assert_lacks(r#"data-lock="gpu-pool""#);
    assert!(
        filtered
            .body
            .contains(r#"data-events="/v1/events?prefix=jobs:""#)
    );

    browser.get("/?prefix=a%20b").await.assert_status(400);
}

#[tokio::test]
async fn overview_pages_through_many_locks() {
    let app = spawn_app().await;
    for i in 0..130 {
        app.lease(&format!("many-{i:03}"), json!({})).await;
    }
    let browser = Browser::new(&app);
    let mut seen = std::collections::BTreeSet::new();
    let mut path = "/?prefix=many-".to_owned();
    for _ in 0..20 {
        let page = browser.get(&path).await;
        page.assert_status(200);
        for part in page.body.split(r#"<tr data-lock=""#).skip(1) {
            let name = part.split('"').next().expect("name");
            assert!(seen.insert(name.to_owned()), "{name} listed twice");
        }
        let Some(end) = page.body.find(r#"" rel="next">"#) else {
            break;
        };
        let start = page.body[..end].rfind(r#"<a href=""#).expect("link start") + 9;
        path = page.body[start..end]
            .replace("&#38;", "&")
            .replace("&amp;", "&");
    }
    assert_eq!(seen.len(), 130);
}

#[tokio::test]
async fn lock_page_shows_holders_queue_and_history() {
    let app = spawn_app().await;
    let lease = app
        .lease(
            "deploy",
            json!({"kind": "fair", "holder": "alice", "metadata": {"job": "release-42"}}),
        )
        .await;
    app.acquire_with("deploy", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    let ticket = fair_ticket(&app, "deploy", "bob").await;

    let page = Browser::new(&app).get("/locks/deploy").await;
    page.assert_status(200)
        .assert_contains(&lease.id)
        .assert_contains("alice")
        .assert_contains("{&#34;job&#34;:&#34;release-42&#34;}")
        .assert_contains(&format!("<td>{}</td>", lease.fencing_token))
        .assert_contains(&ticket)
        .assert_contains("<td>1</td><td>bob</td>");
    // History, newest first: queued, reentered, acquired, by their times. (Times are in
    // milliseconds, and the three can fall in one: then any order of theirs is right.)
    let history = &page.body[page.body.find("<h2>History</h2>").expect("history")..];
    let rows: Vec<(&str, &str)> = history
        .split("<tr class=\"ev-")
        .skip(1)
        .filter_map(|row| {
            let (kind, rest) = row.split_once('"')?;
            let at = rest.split_once("<td>")?.1.split_once(" (")?.0;
            Some((kind, at))
        })
        .collect();
    let at = |kind: &str| {
        rows.iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, at)| *at)
            .unwrap_or_else(|| panic!("{kind} in the history: {rows:?}"))
    };
    assert!(
        at("queued") >= at("reentered") && at("reentered") >= at("acquired"),
        "{rows:?}"
    );
    assert!(
        rows.windows(2).all(|w| w[0].1 >= w[1].1),
        "newest first: {rows:?}"
    );

    // Read/write: a write holder that downgraded keeps both holds.
    let writer = app
        .lease("catalog", json!({"kind": "write", "holder": "migrator"}))
        .await;
    app.acquire_with("catalog", 0, json!({"kind": "read"}), Some(&writer.token))
        .await
        .assert_status(200);
    let page = Browser::new(&app).get("/locks/catalog").await;
    page.assert_status(200)
        .assert_contains("Write holder: <strong>migrator (1 write holds)</strong>")
        .assert_contains("Read holders: <strong>migrator (1)</strong>")
        .assert_contains("<dt>Mode</dt><dd>write</dd>");

    // Semaphores have their own page layout.
    app.acquire_permits(
        "gpu-pool",
        0,
        json!({"limit": 3, "permits": 2, "holder": "trainer"}),
    )
    .await
    .assert_status(201);
    let page = Browser::new(&app).get("/locks/gpu-pool").await;
    page.assert_status(200)
        .assert_contains("2 of 3 in use")
        .assert_contains("trainer")
        .assert_lacks("Fair queue");

    Browser::new(&app)
        .get("/locks/never-used")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn history_is_kept_in_redis_and_shared_by_instances() {
    let app = spawn_app().await;
    let lease = app.lease("shared", json!({"holder": "one"})).await;
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    app.release(&lease, true).await.assert_status(200);
    let peer = app.spawn_peer().await;
    let page = Browser::new(&peer).get("/locks/shared").await;
    page.assert_status(200)
        .assert_contains(">released<")
        .assert_contains(">renewed<")
        .assert_contains(">acquired<")
        .assert_contains("Nobody holds it.");
}

/// The overview stays fast with 10,000 live locks: a page costs O(page) Redis work.
#[tokio::test]
async fn overview_renders_quickly_with_ten_thousand_live_locks() {
    use futures_util::StreamExt as _;
    let app = spawn_app().await;
    let started = Instant::now();
    futures_util::stream::iter(0..10_000)
        .map(|i| {
            let app = &app;
            async move {
                app.acquire(
                    &format!("bulk:{i:05}"),
                    json!({"holder": format!("worker-{i}"), "ttl_ms": 600_000}),
                )
                .await
                .assert_status(201);
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    eprintln!("took 10,000 leases in {:?}", started.elapsed());
    let browser = Browser::new(&app);
    let mut times = Vec::new();
    for path in [
        "/",
        "/",
        "/",
        "/?prefix=bulk:09",
        "/?prefix=bulk:09",
        "/?prefix=bulk:0999",
    ] {
        let started = Instant::now();
        let page = browser.get(path).await;
        let took = started.elapsed();
        page.assert_status(200);
        let rows = page.body.matches("<tr data-lock=").count();
        assert!(rows > 0, "{path} listed nothing");
        eprintln!("GET {path}: {rows} rows in {took:?}");
        times.push(took);
    }
    let worst = times.iter().max().copied().unwrap_or_default();
    assert!(worst < Duration::from_secs(2), "a render took {worst:?}");
}

/// A request that waited for a plain (non-fair) lock leaves its wait in the history, so the
/// lock page's timeline draws it after the wait is over, as it does a fair ticket's.
#[tokio::test]
async fn a_finished_wait_on_a_reentrant_lock_is_on_the_timeline() {
    let app = spawn_app().await;
    let first = app
        .lease("nightly", json!({"holder": "first", "ttl_ms": 60_000}))
        .await;
    let waiting = app.spawn_post(
        "/v1/locks/nightly/leases?wait_ms=5000",
        json!({"holder": "patient", "ttl_ms": 60_000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.release(&first, true).await.assert_status(200);
    let granted = waiting.await.expect("the waiting request");
    granted.assert_status(201);
    let page = Browser::new(&app).get("/locks/nightly").await;
    page.assert_status(200);
    assert!(
        page.body.contains("patient waited from"),
        "no wait bar for the request that waited:\n{}",
        page.body
    );
    assert!(page.body.contains(">waited<"), "the history lists the wait");
}

#[tokio::test]
async fn a_lock_page_shows_its_holder_as_part_of_a_multilease() {
    let app = spawn_app().await;
    let reply = app
        .send(app.http.post(app.url("/v1/multileases")).json(&json!({
            "locks": [{"name": "orders"}, {"name": "stock"}],
            "holder": "billing",
            "metadata": {"run": 3}
        })))
        .await;
    reply.assert_status(201);
    let id = reply.str("lease_id");
    let page = Browser::new(&app).get("/locks/orders").await;
    page.assert_status(200)
        .assert_contains("billing")
        .assert_contains(&format!(
            "part of multilease <span class=\"id\">{id}</span>"
        ))
        .assert_contains("with <a href=\"/locks/stock\">stock</a>")
        .assert_contains("{&#34;run&#34;:3}");
    assert!(
        !page.body.contains("leasehold:multilease"),
        "the membership is not shown as metadata"
    );
}
