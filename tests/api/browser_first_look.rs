//! The dashboard as an operator first meets it, in headless Chromium: signed in, the header
//! (admin badge and sign-out) stays one row; a new lock's timeline is zoomed to what is there;
//! the events page shows the events' own facts (not the stream's `at_us` and `event_id`) with
//! lease ids on one line. Screenshots go to `target/screenshots/` (the book's images in
//! `docs/book/src/images/` are copied from there).

use std::time::Duration;

use fantoccini::Client;
use serde_json::json;

use crate::helpers::browser::{
    Driver, browser, js, save_screenshot, sign_in, skip_without_browser, wait_for,
};
use crate::helpers::{TestApp, spawn_app};

/// Signs in from the overview: the header shows the admin's badge.
async fn sign_in_to_the_overview(client: &Client, app: &TestApp) {
    sign_in(client, app, "/").await;
    wait_for(
        client,
        "document.querySelector('header .badge.admin')",
        Duration::from_secs(10),
        "the signed-in header",
    )
    .await;
}

#[tokio::test]
async fn a_first_look_signed_in_header_timeline_and_events_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    let lease = app
        .lease(
            "nightly-report",
            json!({"holder": "cron@db1", "ttl_ms": 600_000, "metadata": {"job": "report"}}),
        )
        .await;
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    app.lease("deploy", json!({"kind": "fair", "holder": "deployer@ci-7"}))
        .await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;
    sign_in_to_the_overview(&client, &app).await;

    check_the_header_is_one_row(&client).await;
    check_a_new_locks_timeline(&client, &app).await;
    check_the_events_page(&client, &app, &lease.id).await;
    client.close().await.expect("close the browser");
}

/// The header is one row: the badge, the sign-out button and the nav share a line.
async fn check_the_header_is_one_row(client: &Client) {
    let header = js(
        client,
        "const h = document.querySelector('header').getBoundingClientRect(); \
         const b = document.querySelector('header .badge.admin').getBoundingClientRect(); \
         const s = document.querySelector('header .who button').getBoundingClientRect(); \
         const n = document.querySelector('header nav a').getBoundingClientRect(); \
         return {height: h.height, badge: b.top, button: s.top, nav: n.top, \
                 badgeHeight: b.height, buttonBottom: s.bottom, headerBottom: h.bottom};",
    )
    .await;
    save_screenshot(client, "overview-signed-in.png").await;
    let num = |k: &str| header[k].as_f64().expect("a number");
    assert!(num("height") < 56.0, "the header wraps: {header}");
    assert!(
        (num("badge") - num("button")).abs() < 12.0,
        "badge and button apart: {header}"
    );
    assert!(
        num("buttonBottom") <= num("headerBottom"),
        "the button spills out: {header}"
    );
    assert!(num("badgeHeight") < 28.0, "the badge wraps: {header}");
}

/// A lock taken a moment ago: the timeline opens at the shortest window, not an hour.
async fn check_a_new_locks_timeline(client: &Client, app: &TestApp) {
    client
        .goto(&app.url("/locks/nightly-report"))
        .await
        .expect("the lock page");
    let current = js(
        client,
        "return document.querySelector('.windows a[aria-current]').textContent;",
    )
    .await;
    assert_eq!(current, json!("1m"));
    let bar = js(
        client,
        "const r = document.querySelector('.timeline .hold rect'); \
         return r.getBoundingClientRect().width / \
                document.querySelector('.timeline svg').getBoundingClientRect().width;",
    )
    .await;
    assert!(bar.as_f64().expect("a ratio") > 0.0, "no hold drawn");
    save_screenshot(client, "lock-timeline.png").await;
}

/// The events page: the backlog, no stream internals, lease ids on one line.
async fn check_the_events_page(client: &Client, app: &TestApp, lease_id: &str) {
    client.goto(&app.url("/events")).await.expect("events page");
    wait_for(
        client,
        "document.querySelectorAll('#feed tr').length >= 3",
        Duration::from_secs(10),
        "the events backlog",
    )
    .await;
    let feed = js(
        client,
        "const rows = [...document.querySelectorAll('#feed tr')]; \
         const lease = rows.map(r => r.querySelector('td.lease')).filter(td => td.textContent); \
         const lines = td => { const r = document.createRange(); r.selectNodeContents(td); \
                               return r.getClientRects().length; }; \
         return {text: document.querySelector('#feed').textContent, \
                 lines: Math.max(...lease.map(lines)), \
                 titles: lease.map(td => td.title.length)};",
    )
    .await;
    let text = feed["text"].as_str().expect("text");
    assert!(
        !text.contains("at_us") && !text.contains("event_id"),
        "{text}"
    );
    assert!(text.contains(&lease_id[..8]), "{text}");
    assert_eq!(feed["lines"], json!(1), "a lease id wraps: {feed}");
    assert!(
        feed["titles"]
            .as_array()
            .is_some_and(|t| t.iter().all(|n| n == 36)),
        "the whole id is the tooltip: {feed}"
    );
    save_screenshot(client, "events-first-look.png").await;
}
