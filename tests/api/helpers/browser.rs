//! A real browser for dashboard tests: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `.ci/test` installs them). Screenshots go to
//! `target/screenshots/`.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::{ADMIN_TOKEN, TestApp, children};

pub const CHROMEDRIVER: &str = "chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether a browser test is skipped (and says so): only when there is no chromedriver and
/// `LEASEHOLD_SKIP_BROWSER_TESTS` is set; a missing chromedriver otherwise fails the test.
pub fn skip_without_browser() -> bool {
    let skip =
        which(CHROMEDRIVER).is_none() && std::env::var_os("LEASEHOLD_SKIP_BROWSER_TESTS").is_some();
    if skip {
        eprintln!("skipping: no chromedriver and LEASEHOLD_SKIP_BROWSER_TESTS is set");
    }
    skip
}

/// A chromedriver on a port it picked itself, killed on drop or when the test process dies;
/// the Chromium it starts is killed when chromedriver dies.
pub struct Driver {
    child: Child,
    port: u16,
    /// Holds `chromium`, the script chromedriver starts Chromium with.
    launcher: tempfile::TempDir,
}

impl Driver {
    /// Starts chromedriver, again (at most three times) when it exits before it says its
    /// port: under CI's load it has been seen to exit at once, once in hundreds of starts,
    /// which is chromedriver's trouble, not the test's.
    pub fn start() -> Self {
        let launcher = tempfile::Builder::new()
            .prefix("lh-chromium")
            .tempdir()
            .expect("temp dir");
        let script = launcher.path().join("chromium");
        std::fs::write(&script, guarded_launch(CHROMIUM)).expect("write the launcher");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut failures = Vec::new();
        for attempt in 1..=3 {
            match Self::launch(&launcher, attempt) {
                Ok((child, port)) => {
                    return Self {
                        child,
                        port,
                        launcher,
                    };
                }
                Err(failure) => failures.push(failure),
            }
        }
        panic!("chromedriver never said its port:\n{}", failures.join("\n"));
    }

    /// One chromedriver on a port it picks; its stderr goes to a file beside the launcher so
    /// that a start that fails says why.
    fn launch(launcher: &tempfile::TempDir, attempt: u32) -> Result<(Child, u16), String> {
        let log = launcher
            .path()
            .join(format!("chromedriver-{attempt}.stderr"));
        let stderr = std::fs::File::create(&log).expect("chromedriver's stderr file");
        let mut command = children::guarded(CHROMEDRIVER);
        command
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = children::spawn(command)
            .expect("chromedriver is installed (bash .ci/test installs chromium chromium-driver)");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut said = Vec::new();
        let port = loop {
            let Some(Ok(line)) = lines.next() else {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                let errors = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "attempt {attempt}: {status}; stdout: {said:?}; stderr: {errors:?}"
                ));
            };
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').parse().expect("a port number");
            }
            said.push(line);
        };
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Ok((child, port))
    }

    /// The program chromedriver is to start as Chromium.
    fn chromium(&self) -> PathBuf {
        self.launcher.path().join("chromium")
    }
}

/// A shell script that runs `program` with its arguments, guarded as [`children::guarded`]
/// guards our own children: Chromium is chromedriver's child, and would outlive it.
fn guarded_launch(program: &str) -> String {
    let guarded = children::guarded(program);
    let words: Vec<String> = std::iter::once(guarded.get_program())
        .chain(guarded.get_args())
        .map(|word| format!("'{}'", word.to_string_lossy()))
        .collect();
    format!("#!/bin/sh\nexec {} \"$@\"\n", words.join(" "))
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": driver.chromium(),
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

pub fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    dir
}

pub async fn save_screenshot(client: &Client, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshots_dir().join(name);
    std::fs::write(&path, png).expect("write screenshot");
    path
}

/// Signs in with the admin token on the sign-in page, which sends the browser on to `next`
/// (the caller waits for what that page shows).
pub async fn sign_in(client: &Client, app: &TestApp, next: &str) {
    client
        .goto(&app.url(&format!("/login?next={next}")))
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
}

/// The value of `script` (a function body: it says `return ...` for a value).
pub async fn js(client: &Client, script: &str) -> Value {
    client.execute(script, vec![]).await.expect("script")
}

/// Polls `check` (a JS expression) until it is true, for at most `limit`.
pub async fn wait_for(client: &Client, check: &str, limit: Duration, what: &str) {
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

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}
