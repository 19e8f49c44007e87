//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `.ci/test` installs them). Opens the overview, takes a
//! lease through the API and sees the page update without a reload, then signs in and
//! force-releases the lock from its page. Screenshots go to `target/screenshots/`.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

const CHROMEDRIVER: &str = "chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// A chromedriver on a port it picked itself, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Self {
        let mut child = Command::new(CHROMEDRIVER)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is installed (bash .ci/test installs chromium chromium-driver)");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromedriver printed its port")
                .expect("chromedriver output");
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').parse().expect("a port number");
            }
        };
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Self { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--window-size=1360,900",
                format!("--user-data-dir={}", profile.display()),
            ]
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session")
}

fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    dir
}

async fn save_screenshot(client: &Client, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshots_dir().join(name);
    std::fs::write(&path, png).expect("write screenshot");
    path
}

/// Polls `check` (a JS expression) until it is true, for at most `limit`.
async fn wait_for(client: &Client, check: &str, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let ok = client
            .execute(&format!("return Boolean({check});"), vec![])
            .await
            .expect("script");
        if ok == json!(true) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
    if which(CHROMEDRIVER).is_none() && std::env::var_os("LEASEHOLD_SKIP_BROWSER_TESTS").is_some() {
        eprintln!("skipping: no chromedriver and LEASEHOLD_SKIP_BROWSER_TESTS is set");
        return;
    }
    let app = spawn_app().await;
    seed(&app).await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;

    // The overview, connected to its event stream.
    client.goto(&app.url("/")).await.expect("open the overview");
    wait_for(
        &client,
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

    // A lease taken through the API shows up without a reload, well before the page's
    // periodic refresh (5 s) could have fetched it.
    let taken = Instant::now();
    let lease = app
        .lease(
            "payments:settle",
            json!({"holder": "settler@web-2", "ttl_ms": 600_000, "metadata": {"run": "nightly"}}),
        )
        .await;
    wait_for(
        &client,
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
    let overview = save_screenshot(&client, "overview.png").await;
    eprintln!("screenshot: {}", overview.display());

    // Sign in, open the lock's page, force-release it with a reason.
    client
        .goto(&app.url("/login?next=/locks/payments:settle"))
        .await
        .expect("open sign-in");
    client
        .find(Locator::Css("input[name=token]"))
        .await
        .expect("token field")
        .send_keys(ADMIN_TOKEN)
        .await
        .expect("type the token");
    client
        .find(Locator::Css("form.login button[type=submit]"))
        .await
        .expect("sign-in button")
        .click()
        .await
        .expect("sign in");
    wait_for(
        &client,
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
    let lock_page = save_screenshot(&client, "lock-page.png").await;
    eprintln!("screenshot: {}", lock_page.display());
    client
        .find(Locator::Css("#force-release button[type=submit]"))
        .await
        .expect("force-release button")
        .click()
        .await
        .expect("force release");
    wait_for(
        &client,
        "document.querySelector('.flash')",
        Duration::from_secs(10),
        "the force release's confirmation",
    )
    .await;
    let page = client.source().await.expect("source");
    assert!(page.contains("Force-released: removed 1 holder."));
    assert!(page.contains("by dashboard admin; reason: settlement run hung"));
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    let released = save_screenshot(&client, "lock-page-released.png").await;
    eprintln!("screenshot: {}", released.display());

    client.close().await.expect("close the browser");
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}
