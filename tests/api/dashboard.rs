//! The dashboard's pages rendered against real Redis state, sign-in, CSRF refusals, force
//! release from the browser's forms, escaping of hostile input, and the `/v1/events` feed.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, AppOptions, TestApp, next_event, spawn_app, spawn_app_with};

/// An HTML page (or any non-JSON answer), read whole.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        self
    }

    pub fn assert_contains(&self, text: &str) -> &Self {
        assert!(
            self.body.contains(text),
            "{text:?} not in the page:\n{}",
            self.body
        );
        self
    }

    pub fn assert_lacks(&self, text: &str) -> &Self {
        assert!(
            !self.body.contains(text),
            "{text:?} is in the page:\n{}",
            self.body
        );
        self
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of the first `name="csrf"` hidden input.
    pub fn csrf(&self) -> String {
        let start = self
            .body
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no CSRF field in the page:\n{}", self.body))
            + r#"name="csrf" value=""#.len();
        let len = self.body[start..].find('"').expect("closing quote");
        self.body[start..start + len].to_owned()
    }

    /// The table row of the overview that shows `lock`.
    pub fn row(&self, lock: &str) -> &str {
        let marker = format!(r#"<tr data-lock="{lock}">"#);
        let start = self
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("no row for {lock}:\n{}", self.body));
        let end = self.body[start..].find("</tr>").expect("row end");
        &self.body[start..start + end]
    }
}

/// A browser-like client of one app: keeps its session cookie, follows no redirects and
/// sends `Origin` on POSTs like a browser does (unless told otherwise).
pub struct Browser {
    http: reqwest::Client,
    base: String,
    pub cookie: Option<String>,
}

impl Browser {
    pub fn new(app: &TestApp) -> Self {
        Self {
            http: leasehold::client::http_builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
            base: app.url(""),
            cookie: None,
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", cookie);
        }
        read(req.send().await.expect("request")).await
    }

    /// POSTs a form; `origin` is the Origin header to send (None: none at all).
    pub async fn post_form(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Page {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", cookie);
        }
        read(req.send().await.expect("request")).await
    }

    pub fn origin(&self) -> String {
        self.base.trim_end_matches('/').to_owned()
    }

    /// Signs in with `token`; keeps the session cookie when it worked.
    pub async fn sign_in(&mut self, token: &str) -> Page {
        let origin = self.origin();
        let page = self
            .post_form("/login", &[("token", token), ("next", "/")], Some(&origin))
            .await;
        if let Some(set) = page.header("set-cookie") {
            self.cookie = Some(set.split(';').next().expect("cookie pair").to_owned());
        }
        page
    }
}

async fn read(response: reqwest::Response) -> Page {
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.expect("body"),
    }
}

fn encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

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

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_without_the_token() {
    let app = spawn_app().await;
    let mut browser = Browser::new(&app);
    browser
        .get("/login")
        .await
        .assert_status(200)
        .assert_contains(r#"type="password""#);

    browser
        .sign_in("wrong-token-0123456789")
        .await
        .assert_status(401)
        .assert_contains("Wrong admin token");
    assert!(browser.cookie.is_none());

    // A sign-in form posted from another site is refused.
    let forged = browser
        .post_form(
            "/login",
            &[("token", ADMIN_TOKEN)],
            Some("http://evil.example"),
        )
        .await;
    forged.assert_status(403);
    assert!(forged.header("set-cookie").is_none());

    let page = browser.sign_in(ADMIN_TOKEN).await;
    page.assert_status(303);
    let set = page.header("set-cookie").expect("a session cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(ADMIN_TOKEN), "{set}");

    let overview = browser.get("/").await;
    overview.assert_contains("Sign out");
    let csrf = overview.csrf();
    let origin = browser.origin();
    // Signing out needs the CSRF token too.
    browser
        .post_form("/logout", &[], Some(&origin))
        .await
        .assert_status(403);
    let out = browser
        .post_form("/logout", &[("csrf", &csrf)], Some(&origin))
        .await;
    out.assert_status(303);
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
}

#[tokio::test]
async fn force_release_from_the_lock_page() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let lease = app
        .lease("stuck", json!({"holder": "crashed-job", "ttl_ms": 600_000}))
        .await;
    let waiter = app.spawn_waiter("stuck", 20_000);
    app.wait_for_waiters(1).await;

    let mut browser = Browser::new(&app);
    // Not signed in: no form, a sign-in link; the POST is refused.
    browser
        .get("/locks/stuck")
        .await
        .assert_lacks(r#"id="force-release""#)
        .assert_contains("/login?next=/locks/stuck");
    let origin = browser.origin();
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("confirm", "yes")],
            Some(&origin),
        )
        .await
        .assert_status(401);

    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let page = browser.get("/locks/stuck").await;
    page.assert_contains(r#"id="force-release""#);
    let csrf = page.csrf();
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", "job <crashed>"),
        ("confirm", "yes"),
    ];

    // GET changes nothing.
    browser
        .get("/locks/stuck/force-release")
        .await
        .assert_status(405);
    // Refusals: no Origin, a foreign Origin, a wrong CSRF token, no confirmation.
    browser
        .post_form("/locks/stuck/force-release", &form, None)
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &form,
            Some("http://evil.example"),
        )
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("csrf", "00ff"), ("reason", "x"), ("confirm", "yes")],
            Some(&origin),
        )
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("csrf", csrf.as_str()), ("reason", "x")],
            Some(&origin),
        )
        .await
        .assert_status(400);
    // The API's reason policy, one owner (`operator`): too long is 422 here too (it used to
    // be cut silently), told as a page with the problem's title.
    let long = "x".repeat(501);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[
                ("csrf", csrf.as_str()),
                ("reason", &long),
                ("confirm", "yes"),
            ],
            Some(&origin),
        )
        .await
        .assert_status(422)
        .assert_contains("The reason is too long")
        .assert_contains("at most 500 characters");
    app.heartbeat(&lease, json!({})).await.assert_status(200);

    let done = browser
        .post_form("/locks/stuck/force-release", &form, Some(&origin))
        .await;
    done.assert_status(303);
    assert_eq!(done.header("location"), Some("/locks/stuck?released=1"));

    // The waiter got the lock, the old lease is gone (410), and the event says who and why.
    waiter.await.expect("waiter").assert_status(201);
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    let event = next_event(&mut events, "force_released").await;
    assert_eq!(event["by"], "dashboard admin");
    assert_eq!(event["reason"], "job <crashed>");
    assert_eq!(event["lease_ids"], json!([lease.id]));

    let page = browser.get("/locks/stuck?released=1").await;
    page.assert_contains("Force-released: removed 1 holder.")
        .assert_contains("by dashboard admin; reason: job &#60;crashed&#62;; removed ")
        .assert_contains(&lease.id);
}

#[tokio::test]
async fn hostile_holder_metadata_and_reason_are_escaped() {
    let app = spawn_app().await;
    let hostile = "<script>alert(1)</script>";
    let lease = app
        .lease(
            "target",
            json!({
                "holder": hostile,
                "metadata": {"note": "</code><img src=x onerror=alert(2)>", "<b>": "\"'&"}
            }),
        )
        .await;
    let mut browser = Browser::new(&app);
    for path in ["/", "/locks/target"] {
        let page = browser.get(path).await;
        page.assert_status(200)
            .assert_lacks("<script>alert")
            .assert_lacks("<img src=x")
            .assert_lacks("<b>")
            .assert_contains("&#60;script&#62;alert(1)&#60;/script&#62;");
    }
    browser.sign_in(ADMIN_TOKEN).await;
    let csrf = browser.get("/locks/target").await.csrf();
    let origin = browser.origin();
    browser
        .post_form(
            "/locks/target/force-release",
            &[
                ("csrf", &csrf),
                ("reason", "<img src=y onerror=alert(3)>"),
                ("confirm", "yes"),
            ],
            Some(&origin),
        )
        .await
        .assert_status(303);
    let page = browser.get("/locks/target").await;
    page.assert_lacks("<img src=y").assert_contains(&lease.id);
}

#[tokio::test]
async fn a_private_dashboard_needs_a_session_or_the_admin_token() {
    let app = spawn_app_with(AppOptions {
        dashboard_private: true,
        ..AppOptions::default()
    })
    .await;
    let mut browser = Browser::new(&app);
    let page = browser.get("/locks/x").await;
    page.assert_status(303);
    assert_eq!(page.header("location"), Some("/login?next=/locks/x"));
    app.get("/v1/events")
        .await
        .assert_problem(401, "admin_token_required");
    let sse = app
        .http
        .get(app.url("/v1/events"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(sse.status(), 200);
    browser.sign_in(ADMIN_TOKEN).await;
    browser.get("/").await.assert_status(200);
}

/// Reads the next SSE `data:` message of a `/v1/events` response.
async fn next_data(response: &mut reqwest::Response, buffer: &mut String) -> serde_json::Value {
    let wait = async {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let message: String = buffer.drain(..end + 2).collect();
                if let Some(data) = message.lines().find_map(|l| l.strip_prefix("data: "))
                    && !data.is_empty()
                {
                    return serde_json::from_str(data).expect("event JSON");
                }
                continue;
            }
            let chunk = response.chunk().await.expect("chunk").expect("stream open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("an event within 10 s")
}

#[tokio::test]
async fn event_stream_filters_by_prefix_and_ends_on_shutdown() {
    let mut app = spawn_app().await;
    let response = app
        .http
        .get(app.url("/v1/events?prefix=orders:"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let mut stream = response;
    let mut buffer = String::new();

    app.lease("other", json!({})).await;
    let lease = app.lease("orders:7", json!({"holder": "shop"})).await;
    let event = next_data(&mut stream, &mut buffer).await;
    assert_eq!(event["type"], "acquired");
    assert_eq!(event["lock"], "orders:7");
    assert_eq!(event["lease_id"], lease.id.as_str());
    assert_eq!(event["holder"], "shop");

    // A connected event stream does not hold up a graceful shutdown.
    let started = Instant::now();
    app.shutdown.cancel();
    let task = app.task.take().expect("server task");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stopped with an SSE client connected")
        .expect("server task")
        .expect("server result");
    assert!(started.elapsed() < Duration::from_secs(5));
    let rest = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(rest.is_ok(), "the event stream ended");
}

#[tokio::test]
async fn one_redis_subscription_serves_every_listener() {
    let app = spawn_app().await;
    let mut streams = Vec::new();
    for _ in 0..5 {
        let response = app
            .http
            .get(app.url("/v1/events"))
            .send()
            .await
            .expect("request");
        streams.push(response);
    }
    let mut conn = app.redis.conn().await;
    let subscribers: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("leasehold:events")
        .query_async(&mut conn)
        .await
        .expect("PUBSUB NUMSUB");
    assert_eq!(subscribers[0].1, 1);
    let lease = app.lease("fanout", json!({})).await;
    for stream in &mut streams {
        let event = next_data(stream, &mut String::new()).await;
        assert_eq!(event["lease_id"], lease.id.as_str());
    }
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
