//! The 3 a.m. operator's questions, answered in a real browser (headless Chromium): who is
//! waiting (every kind, on the lock page and the overview), what just happened (an expiry
//! nobody observed, in the history with the time it ran out, and on the timeline), how long
//! it has been held. Screenshots go to `target/screenshots/` (the book's come from here).

use std::time::Duration;

use fantoccini::Client;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::helpers::browser::{Driver, browser, save_screenshot, skip_without_browser, wait_for};
use crate::helpers::{Reply, TestApp, spawn_app};

/// Waits (bounded) until `GET path` shows `count` waiting requests in `field`.
async fn until_waiting(app: &TestApp, path: &str, field: &str, count: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.get(path).await.body[field] != count {
        assert!(std::time::Instant::now() < deadline, "no waiter on {path}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn waiters_of_every_kind_and_an_unobserved_expiry_show_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    let _waiters = waiters_of_every_kind(&app).await;
    let expires_at = a_locks_busy_minute(&app).await;

    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;
    check_the_overview(&client, &app).await;
    check_the_waiting_tables(&client, &app).await;
    check_the_expiry(&client, &app, &expires_at).await;
    check_the_events_page(&client, &app).await;
    check_the_overview_at_phone_width(&client, &app).await;
    client.close().await.expect("close the browser");
}

/// A reentrant lock with a waiter, a read/write lock with a waiting writer, a semaphore with
/// a waiter for permits; the waiters' requests are returned, to be kept waiting.
async fn waiters_of_every_kind(app: &TestApp) -> Vec<JoinHandle<Reply>> {
    app.lease(
        "billing:invoices",
        json!({"holder": "invoicer@app-1", "ttl_ms": 600_000}),
    )
    .await;
    let w1 = app.spawn_post(
        "/v1/locks/billing:invoices/leases?wait_ms=25000",
        json!({"holder": "invoicer@app-2"}),
    );
    for reader in ["reporter@bi-1", "reporter@bi-2"] {
        app.lease(
            "catalog",
            json!({"kind": "read", "holder": reader, "ttl_ms": 600_000}),
        )
        .await;
    }
    let w2 = app.spawn_post(
        "/v1/locks/catalog/leases?wait_ms=25000",
        json!({"kind": "write", "holder": "importer@etl-3"}),
    );
    app.permits(
        "gpu-pool",
        json!({"limit": 4, "permits": 4, "holder": "trainer-7", "ttl_ms": 600_000}),
    )
    .await;
    let w3 = app.spawn_post(
        "/v1/semaphores/gpu-pool/leases?wait_ms=25000",
        json!({"limit": 4, "permits": 2, "holder": "trainer-9"}),
    );
    until_waiting(app, "/v1/locks/billing:invoices", "waiting_count", 1).await;
    until_waiting(app, "/v1/locks/catalog", "waiting_count", 1).await;
    until_waiting(app, "/v1/semaphores/gpu-pool", "waiting_count", 1).await;
    vec![w1, w2, w3]
}

/// A lock's busy minute: a hold with a reentry handed to a waiter, a force release, then a
/// short hold nobody heartbeats or looks at again. Returns when that last one expires.
async fn a_locks_busy_minute(app: &TestApp) -> String {
    let first = app
        .lease(
            "nightly-report",
            json!({"holder": "cron@db1", "ttl_ms": 60_000}),
        )
        .await;
    app.acquire_with("nightly-report", 0, json!({}), Some(&first.token))
        .await
        .assert_status(200);
    let next_holder = app.spawn_post(
        "/v1/locks/nightly-report/leases?wait_ms=10000",
        json!({"holder": "cron@db2", "ttl_ms": 60_000}),
    );
    until_waiting(app, "/v1/locks/nightly-report", "waiting_count", 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.release(&first, true).await.assert_status(200);
    let second = crate::helpers::Lease::from_reply(
        "nightly-report",
        &next_holder.await.expect("the waiter"),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.release(&second, true).await.assert_status(200);
    app.lease(
        "nightly-report",
        json!({"holder": "cron@db3", "ttl_ms": 60_000}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.admin(
        reqwest::Method::DELETE,
        "/v1/admin/locks/nightly-report?reason=stuck",
        None,
    )
    .await
    .assert_status(200);
    let grant = app
        .acquire(
            "nightly-report",
            json!({"holder": "cron@db1", "ttl_ms": 400}),
        )
        .await;
    grant.assert_status(201);
    grant.str("expires_at")
}

/// The overview, sorted by waiters: each lock's waiter, and how long the catalog has been
/// held.
async fn check_the_overview(client: &Client, app: &TestApp) {
    client
        .goto(&app.url("/?sort=waiters"))
        .await
        .expect("overview");
    wait_for(
        client,
        "document.querySelector('[data-live-status][data-up]')",
        Duration::from_secs(10),
        "the live indicator",
    )
    .await;
    let waiters = |lock: &str| {
        format!("document.querySelector('tr[data-lock=\"{lock}\"] td.waiters').textContent.trim()")
    };
    for lock in ["billing:invoices", "catalog", "gpu-pool"] {
        let shown = client
            .execute(&format!("return {};", waiters(lock)), vec![])
            .await
            .expect("script");
        assert_eq!(shown, json!("1"), "{lock}'s waiter on the overview");
    }
    let held = client
        .execute(
            "return document.querySelector('tr[data-lock=\"catalog\"] td.held-for').textContent.trim();",
            vec![],
        )
        .await
        .expect("script");
    assert!(
        held.as_str()
            .is_some_and(|t| t.ends_with(" s") || t.ends_with(" ms")),
        "{held}"
    );
    save_screenshot(client, "overview-operator.png").await;
}

/// Each lock's page: its waiter, what it wants, and the instance it waits on.
async fn check_the_waiting_tables(client: &Client, app: &TestApp) {
    for (lock, who, wants) in [
        ("billing:invoices", "invoicer@app-2", "reentrant"),
        ("catalog", "importer@etl-3", "write"),
        ("gpu-pool", "trainer-9", "2 permits"),
    ] {
        client
            .goto(&app.url(&format!("/locks/{lock}")))
            .await
            .expect("lock page");
        let row = client
            .execute(
                "return document.querySelector('table.waiting tbody tr').textContent;",
                vec![],
            )
            .await
            .expect("script");
        let row = row.as_str().unwrap_or_default();
        assert!(row.contains(who) && row.contains(wants), "{lock}: {row}");
        assert!(
            row.contains(&format!(":{}", std::process::id())),
            "the instance: {row}"
        );
    }
}

/// The expiry: recorded by the server within a few seconds, at the time it ran out, and on
/// the timeline as a hold ending in an expiry mark.
async fn check_the_expiry(client: &Client, app: &TestApp, expires_at: &str) {
    client
        .goto(&app.url("/locks/nightly-report?window=1m"))
        .await
        .expect("lock page");
    wait_for(
        client,
        "document.querySelector('tr.ev-expired')",
        Duration::from_secs(8),
        "the expiry in the history (the page refreshes itself)",
    )
    .await;
    let at = client
        .execute(
            "return document.querySelector('tr.ev-expired td').textContent;",
            vec![],
        )
        .await
        .expect("script");
    assert!(
        at.as_str().is_some_and(|t| t.starts_with(expires_at)),
        "expired at {expires_at}, shown {at}"
    );
    let timeline = client
        .execute(
            "return [document.querySelectorAll('.timeline .hold rect').length, \
             document.querySelectorAll('.timeline .mark.expired').length, \
             document.querySelectorAll('.timeline .mark.force_released').length, \
             document.querySelectorAll('.timeline .mark.reentered').length, \
             0, \
             Array.from(document.querySelectorAll('.timeline .hold title')).map(t => t.textContent).join('|')];",
            vec![],
        )
        .await
        .expect("script");
    assert_eq!(timeline[0], json!(4), "four holds: {timeline}");
    assert_eq!(timeline[1], json!(1), "one expiry mark: {timeline}");
    assert_eq!(timeline[2], json!(1), "one force-release mark: {timeline}");
    assert_eq!(timeline[3], json!(1), "one reentry mark: {timeline}");
    // (Past waits of a non-fair lock leave no history; live ones and fair tickets are drawn.)
    let titles = timeline[5].as_str().unwrap_or_default();
    assert!(
        titles.contains("cron@db1 held from") && titles.contains("(expired), fencing token"),
        "{titles}"
    );
    client
        .execute(
            "document.querySelector('.timeline').scrollIntoView({block: 'center'});",
            vec![],
        )
        .await
        .expect("scroll");
    save_screenshot(client, "lock-page-timeline.png").await;
}

/// The events page starts with the latest events from Redis.
async fn check_the_events_page(client: &Client, app: &TestApp) {
    client.goto(&app.url("/events")).await.expect("events page");
    wait_for(
        client,
        "document.querySelectorAll('#feed tr.ev-expired').length > 0",
        Duration::from_secs(5),
        "the backlog on the events page",
    )
    .await;
    save_screenshot(client, "events.png").await;
}

/// Phone width: the overview still fits.
async fn check_the_overview_at_phone_width(client: &Client, app: &TestApp) {
    client.set_window_size(420, 900).await.expect("resize");
    client.goto(&app.url("/")).await.expect("overview");
    let wide = client
        .execute("return document.documentElement.scrollWidth;", vec![])
        .await
        .expect("script");
    assert!(
        wide.as_u64().is_some_and(|w| w <= 420),
        "no sideways scroll at 420 px: {wide}"
    );
    save_screenshot(client, "overview-phone.png").await;
}
