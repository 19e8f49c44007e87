//! The elections view and an election's page (issue 55): the leader, the line, the history of
//! terms, the admin's end of a term (CSRF, same origin, confirmation, audited), unknown and
//! bad names as problem pages, and no election shown as a lock.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use super::Browser;
use crate::helpers::cluster::wait_until;
use crate::helpers::{ADMIN_TOKEN, Reply, TestApp, spawn_app};

/// A candidate as its campaign answered: its URL and token.
pub(crate) struct Candidate {
    pub location: String,
    pub token: String,
    pub id: String,
}

/// Stands `holder` as a candidate of election `name` with `value` (answering 201 or 202).
pub(crate) async fn stand(app: &TestApp, name: &str, holder: &str, value: &str) -> Candidate {
    let reply = app
        .send(
            app.http
                .post(app.url(&format!("/v1/elections/{name}/candidates?wait_ms=0")))
                .json(&json!({"value": value, "holder": holder, "ttl_ms": 60_000})),
        )
        .await;
    assert!(
        matches!(reply.status.as_u16(), 201 | 202),
        "campaign: {} {}",
        reply.status,
        reply.body
    );
    Candidate {
        location: reply.header("location").expect("a Location").to_owned(),
        token: reply.str("token"),
        id: reply.str("candidate_id"),
    }
}

/// A candidate's call with its token.
pub(crate) async fn call(app: &TestApp, method: Method, path: &str, c: &Candidate) -> Reply {
    app.send(
        app.http
            .request(method, app.url(path))
            .bearer_auth(&c.token),
    )
    .await
}

/// Waits until the key space's recent events name election `name`: they are published in
/// batches, a moment after the calls, and the elections view and the metrics find elections
/// there.
pub(crate) async fn until_journaled(app: &TestApp, name: &str) {
    let lock = format!("election/{name}");
    wait_until(
        Duration::from_secs(10),
        "the election's events in the journal",
        async || {
            let events = crate::matrix::kinds::backlog(app).await;
            if events.iter().any(|e| e["lock"] == lock.as_str()) {
                Ok(())
            } else {
                Err(format!("{} events, none of {lock}", events.len()))
            }
        },
    )
    .await;
}

/// The leader resigns and `next` (waiting in line) takes over: its poll answers 200.
pub(crate) async fn hand_over(app: &TestApp, leader: &Candidate, next: &Candidate) {
    call(app, Method::DELETE, &leader.location, leader)
        .await
        .assert_status(200);
    let path = format!("{}?wait_ms=5000", next.location);
    call(app, Method::GET, &path, next).await.assert_status(200);
}

#[tokio::test]
async fn the_elections_view_lists_elections_apart_from_locks() {
    let app = spawn_app().await;
    stand(&app, "scheduler", "node-a", "10.0.0.1:8080").await;
    stand(&app, "scheduler", "node-b", "10.0.0.2:8080").await;
    stand(&app, "migrations", "runner-1", "v42").await;
    app.lease("jobs", json!({"holder": "a-lock-holder"})).await;
    until_journaled(&app, "scheduler").await;
    until_journaled(&app, "migrations").await;

    let browser = Browser::new(&app);
    let page = browser.get("/elections").await;
    page.assert_status(200)
        .assert_contains(r#"<a href="/elections">Elections</a>"#)
        .assert_contains(r#"<a href="/elections/scheduler">scheduler</a>"#)
        .assert_contains(r#"<a href="/elections/migrations">migrations</a>"#)
        .assert_lacks("a-lock-holder");
    let row = row(&page.body, "scheduler");
    assert!(
        row.contains("node-a") && row.contains("10.0.0.1:8080"),
        "{row}"
    );
    let term = app.get("/v1/elections/scheduler").await.u64("term");
    assert!(row.contains(&format!(r#"class="term">{term}<"#)), "{row}");
    assert!(row.contains(r#"class="waiting">1<"#), "one in line: {row}");

    // The overview lists the lock and never an election's lock.
    let overview = browser.get("/").await;
    overview
        .assert_status(200)
        .assert_contains("a-lock-holder")
        .assert_lacks("election/")
        .assert_lacks("node-a");
    // Nor is an election's lock a lock page.
    browser
        .get("/locks/election%2Fscheduler")
        .await
        .assert_status(404);
}

/// The elections view's row of `election`.
fn row<'a>(body: &'a str, election: &str) -> &'a str {
    let marker = format!(r#"<tr data-election="{election}">"#);
    let start = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no row for {election}:\n{body}"));
    let end = body[start..].find("</tr>").expect("row end");
    &body[start..start + end]
}

#[tokio::test]
async fn an_elections_page_shows_its_leader_line_and_terms() {
    let app = spawn_app().await;
    let a = stand(&app, "scheduler", "node-a", "10.0.0.1:8080").await;
    let b = stand(&app, "scheduler", "node-b", "10.0.0.2:8080").await;
    let c = stand(&app, "scheduler", "node-c", "10.0.0.3:8080").await;
    let proclaim = app
        .send(
            app.http
                .put(app.url(&format!("{}/value", a.location)))
                .bearer_auth(&a.token)
                .json(&json!({"value": "10.0.0.1:9090"})),
        )
        .await;
    proclaim.assert_status(200);

    let browser = Browser::new(&app);
    let page = browser.get("/elections/scheduler").await;
    page.assert_status(200)
        .assert_contains(r#"<dd class="holder">node-a</dd>"#)
        .assert_contains("10.0.0.1:9090")
        .assert_contains(&a.id)
        .assert_contains("data-events=\"/v1/elections/scheduler/observe\"")
        .assert_contains(&b.id)
        .assert_contains("node-c")
        .assert_contains("proclaimed")
        .assert_contains("new term");

    hand_over(&app, &a, &b).await;
    let term = app.get("/v1/elections/scheduler").await.u64("term");
    let page = browser.get("/elections/scheduler").await;
    page.assert_contains(r#"<dd class="holder">node-b</dd>"#)
        .assert_contains(&format!(r#"<dd class="term">{term}</dd>"#));
    // Newest first: the second term, then the first one's proclamation and its start.
    let terms = &page.body[page.body.find("<h2>Terms</h2>").expect("terms")..];
    let second = terms.find("10.0.0.2:8080").expect("term 2");
    let proclaimed = terms.find("10.0.0.1:9090").expect("the proclamation");
    let first = terms.find("10.0.0.1:8080").expect("term 1");
    assert!(second < proclaimed && proclaimed < first, "{terms}");
    // The line moved up: node-c is next, and the new leader is no longer in it.
    let line = &page.body[page.body.find("<h2>Candidates in line</h2>").expect("line")
        ..page.body.find("<h2>Terms</h2>").expect("terms")];
    assert!(
        line.contains(&c.id) && line.contains("<td>1</td>"),
        "{line}"
    );
    assert!(!line.contains(&b.id), "{line}");
}

#[tokio::test]
async fn unknown_and_bad_election_names_are_problem_pages() {
    let app = spawn_app().await;
    let browser = Browser::new(&app);
    for path in [
        "/elections/nobody-stood",
        "/elections/bad%20name",
        "/elections/a%2Fb",
        "/elections/%3Cscript%3E",
    ] {
        let page = browser.get(path).await;
        page.assert_status(404).assert_lacks("<script>");
        assert!(
            page.header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{path}: a page"
        );
    }
    // The admin's form on an unknown election: nobody led (and it stays unknown).
    let mut admin = Browser::new(&app);
    admin.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let long = "n".repeat(300);
    admin
        .get(&format!("/elections/{long}"))
        .await
        .assert_status(404);
}

#[tokio::test]
async fn end_term_from_the_elections_page() {
    let app = spawn_app().await;
    let a = stand(&app, "scheduler", "node-a", "10.0.0.1:8080").await;
    let b = stand(&app, "scheduler", "node-b", "10.0.0.2:8080").await;
    let first_term = app.get("/v1/elections/scheduler").await.u64("term");

    let mut browser = Browser::new(&app);
    browser
        .get("/elections/scheduler")
        .await
        .assert_lacks(r#"id="end-term""#)
        .assert_contains("/login?next=/elections/scheduler");
    let origin = browser.origin();
    let path = "/elections/scheduler/end-term";
    browser
        .post_form(path, &[("confirm", "yes")], Some(&origin))
        .await
        .assert_status(401);

    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let page = browser.get("/elections/scheduler").await;
    page.assert_contains(r#"id="end-term""#);
    let csrf = page.csrf();
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", "stuck <leader>"),
        ("confirm", "yes"),
    ];
    browser.get(path).await.assert_status(405);
    browser
        .post_form(path, &form, None)
        .await
        .assert_status(403);
    browser
        .post_form(path, &form, Some("http://evil.example"))
        .await
        .assert_status(403);
    browser
        .post_form(
            path,
            &[("csrf", "00ff"), ("reason", "x"), ("confirm", "yes")],
            Some(&origin),
        )
        .await
        .assert_status(403);
    browser
        .post_form(path, &[("csrf", csrf.as_str())], Some(&origin))
        .await
        .assert_status(400);

    let done = browser.post_form(path, &form, Some(&origin)).await;
    done.assert_status(303);
    assert_eq!(
        done.header("location"),
        Some("/elections/scheduler?ended=1")
    );

    // The old leader is out (410); the next candidate leads with a higher term.
    call(&app, Method::POST, &format!("{}/heartbeat", a.location), &a)
        .await
        .assert_status(410);
    let polled = call(
        &app,
        Method::GET,
        &format!("{}?wait_ms=5000", b.location),
        &b,
    )
    .await;
    polled.assert_status(200);
    assert!(polled.u64("term") > first_term, "{}", polled.body);
    let page = browser.get("/elections/scheduler?ended=1").await;
    page.assert_contains("The term ended")
        .assert_contains(r#"<dd class="holder">node-b</dd>"#);

    // Audited once, as the API's end of a term is, by the dashboard admin.
    let audit = app
        .admin(Method::GET, "/v1/admin/audit?limit=100", None)
        .await;
    let entries = audit.body["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ended: Vec<_> = entries
        .iter()
        .filter(|e| e["action"] == "end_term" && e["reason"] == "stuck <leader>")
        .collect();
    assert_eq!(ended.len(), 1, "{}", audit.body);
    assert_eq!(ended[0]["target"], "election/scheduler");
}
