//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `.ci/test` installs them). Opens the overview, takes a
//! lease through the API and sees the page update without a reload, then signs in and
//! force-releases the lock from its page. Screenshots go to `target/screenshots/`.

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::helpers::browser::{
    Driver, browser, save_screenshot, sign_in, skip_without_browser, wait_for,
};
use crate::helpers::{Lease, TestApp, spawn_app};

async fn seed(app: &TestApp) {
    let lease = app
        .lease(
            "billing:invoices",
            json!({"holder": "invoicer@app-1", "ttl_ms": 600_000, "metadata": {"batch": 117}}),
        )
        .await;
    app.acquire_with("billing:invoices", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    for reader in ["reporter@bi-1", "reporter@bi-2"] {
        app.lease(
            "catalog",
            json!({"kind": "read", "holder": reader, "ttl_ms": 600_000}),
        )
        .await;
    }
    app.lease(
        "deploy",
        json!({"kind": "fair", "holder": "deployer@ci-7", "ttl_ms": 600_000}),
    )
    .await;
    app.acquire_permits(
        "gpu-pool",
        0,
        json!({"limit": 8, "permits": 3, "holder": "trainer-7", "ttl_ms": 600_000}),
    )
    .await
    .assert_status(201);
}

#[tokio::test]
async fn dashboard_updates_live_and_force_releases_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    seed(&app).await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;
    let lease = a_new_lease_shows_without_a_reload(&client, &app).await;
    force_release_from_the_lock_page(&client, &app, &lease).await;
    client.close().await.expect("close the browser");
}

/// The overview, connected to its event stream, shows a lease taken through the API without
/// a reload, well before the page's periodic refresh (5 s) could have fetched it. Returns
/// that lease.
async fn a_new_lease_shows_without_a_reload(client: &Client, app: &TestApp) -> Lease {
    client.goto(&app.url("/")).await.expect("open the overview");
    wait_for(
        client,
        "document.querySelector('#live[data-connected]')",
        Duration::from_secs(10),
        "the overview's event stream",
    )
    .await;
    client
        .execute("window.__sameDocument = true;", vec![])
        .await
        .expect("mark the document");
    let body = client.source().await.expect("source");
    assert!(body.contains("invoicer@app-1") && body.contains("gpu-pool"));
    assert!(!body.contains("settler@web-2"));

    let taken = Instant::now();
    let lease = app
        .lease(
            "payments:settle",
            json!({"holder": "settler@web-2", "ttl_ms": 600_000, "metadata": {"run": "nightly"}}),
        )
        .await;
    wait_for(
        client,
        "document.querySelector('tr[data-lock=\"payments:settle\"]')",
        Duration::from_secs(4),
        "the new lease on the overview",
    )
    .await;
    let latency = taken.elapsed();
    assert_eq!(
        client
            .execute("return window.__sameDocument === true;", vec![])
            .await
            .expect("script"),
        json!(true),
        "the page was reloaded"
    );
    eprintln!("the overview showed the new lease after {latency:?}");
    let overview = save_screenshot(client, "overview.png").await;
    eprintln!("screenshot: {}", overview.display());
    lease
}

/// Signs in, opens the lock's page and force-releases `lease`'s lock with a reason: the page
/// confirms it, and the lease is lost.
async fn force_release_from_the_lock_page(client: &Client, app: &TestApp, lease: &Lease) {
    sign_in(client, app, "/locks/payments:settle").await;
    wait_for(
        client,
        "document.querySelector('#force-release')",
        Duration::from_secs(10),
        "the lock page with its force-release form",
    )
    .await;
    let page = client.source().await.expect("source");
    assert!(page.contains(&lease.id) && page.contains("settler@web-2"));
    client
        .find(Locator::Css("#force-release input[name=reason]"))
        .await
        .expect("reason field")
        .send_keys("settlement run hung")
        .await
        .expect("type a reason");
    client
        .find(Locator::Css("#force-release input[name=confirm]"))
        .await
        .expect("confirmation box")
        .click()
        .await
        .expect("tick");
    let lock_page = save_screenshot(client, "lock-page.png").await;
    eprintln!("screenshot: {}", lock_page.display());
    client
        .find(Locator::Css("#force-release button[type=submit]"))
        .await
        .expect("force-release button")
        .click()
        .await
        .expect("force release");
    wait_for(
        client,
        "document.querySelector('.flash')",
        Duration::from_secs(10),
        "the force release's confirmation",
    )
    .await;
    let page = client.source().await.expect("source");
    assert!(page.contains("Force-released: removed 1 holder."));
    assert!(page.contains("by dashboard admin; reason: settlement run hung"));
    app.heartbeat(lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    let released = save_screenshot(client, "lock-page-released.png").await;
    eprintln!("screenshot: {}", released.display());
}
