//! An election's dashboard page in a real browser (headless Chromium over WebDriver, as
//! `browser.rs`): the page follows the election's observe stream, so a new leader shows
//! without a reload and before the page's periodic refresh; the events page shows the
//! election's lock events as the election's.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::dashboard::elections::{hand_over, stand};
use crate::helpers::browser::{Driver, browser, save_screenshot, skip_without_browser, wait_for};
use crate::helpers::spawn_app;

#[tokio::test]
async fn an_elections_page_follows_its_leader_live_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    let a = stand(&app, "scheduler", "node-a", "10.0.0.1:8080").await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;

    client
        .goto(&app.url("/elections/scheduler"))
        .await
        .expect("open the election's page");
    wait_for(
        &client,
        "document.querySelector('#live[data-connected]')",
        Duration::from_secs(10),
        "the election's observe stream",
    )
    .await;
    client
        .execute("window.__sameDocument = true;", vec![])
        .await
        .expect("mark the document");
    let body = client.source().await.expect("source");
    assert!(body.contains("node-a") && body.contains("10.0.0.1:8080"));

    // The leader resigns and the next candidate leads: the page shows it without a reload,
    // well before its periodic refresh (5 s). The next candidate stands only now: its place in
    // line is kept 5 s without a poll, and starting the browser can take longer than that.
    let b = stand(&app, "scheduler", "node-b", "10.0.0.2:8080").await;
    let changed = Instant::now();
    hand_over(&app, &a, &b).await;
    wait_for(
        &client,
        "(function(){var d=document.querySelector('dd.holder');return d&&d.textContent==='node-b'?d:null;})()",
        Duration::from_secs(4),
        "the new leader on the election's page",
    )
    .await;
    eprintln!(
        "the election's page showed the new leader after {:?}",
        changed.elapsed()
    );
    assert_eq!(
        client
            .execute("return window.__sameDocument === true;", vec![])
            .await
            .expect("script"),
        json!(true),
        "the page was reloaded"
    );
    let term = app.get("/v1/elections/scheduler").await.u64("term");
    let page = client.source().await.expect("source");
    assert!(
        page.contains(&format!("<dd class=\"term\">{term}</dd>")),
        "the new term shown"
    );
    let shot = save_screenshot(&client, "election-page.png").await;
    eprintln!("screenshot: {}", shot.display());

    // The events page: the election's terms, shown as the election's, never as its lock.
    client.goto(&app.url("/events")).await.expect("open events");
    wait_for(
        &client,
        "document.querySelector('#feed tr.election a[href=\"/elections/scheduler\"]')",
        Duration::from_secs(10),
        "the election's events on the events page",
    )
    .await;
    let feed: String = client
        .execute(
            "return document.getElementById('feed').textContent;",
            vec![],
        )
        .await
        .expect("script")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(feed.contains("election scheduler"), "{feed}");
    assert!(feed.contains(&format!("new term {term}")), "{feed}");
    assert!(feed.contains("resigned"), "{feed}");
    assert!(!feed.contains("election/scheduler"), "{feed}");
    client.close().await.expect("close the browser");
}
