//! "Why am I waiting?": a refused acquire (409) and a fair ticket or candidate in line (202)
//! say who holds, for how long, and how long the wait may be, estimated from the name's
//! recent hold times; the lock's page says the same.

use std::time::Duration;

use serde_json::{Value, json};

use crate::dashboard::Browser;
use crate::helpers::{TestApp, spawn_app};

/// `n` holds of about `hold` each, one after another.
async fn past_holds(app: &TestApp, lock: &str, kind: &str, n: usize, hold: Duration) {
    for _ in 0..n {
        let lease = app.lease(lock, json!({"kind": kind})).await;
        tokio::time::sleep(hold).await;
        app.release(&lease, false).await.assert_status(200);
    }
}

fn ms(body: &Value, field: &str) -> u64 {
    body[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {body}"))
}

#[tokio::test]
async fn a_refusal_says_who_holds_since_when_and_how_long_it_may_take() {
    let app = spawn_app().await;
    // No history yet: who and how long, but no estimate to go by.
    let first = app.lease("jobs", json!({"holder": "w0"})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(409, "lock_held");
    assert!(ms(&refused.body, "held_for_ms") >= 40, "{}", refused.body);
    assert!(refused.body["held_since"].is_string(), "{}", refused.body);
    assert!(
        refused.body.get("estimated_wait_ms").is_none(),
        "{}",
        refused.body
    );
    app.release(&first, false).await.assert_status(200);

    past_holds(&app, "jobs", "reentrant", 4, Duration::from_millis(300)).await;
    app.lease("jobs", json!({"holder": "w1"})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(refused.body["holder"], "w1");
    let held_for = ms(&refused.body, "held_for_ms");
    assert!((100..1000).contains(&held_for), "{}", refused.body);
    // Holds of about 300 ms, this one 100 ms old: about 200 ms left.
    let estimate = ms(&refused.body, "estimated_wait_ms");
    assert!((50..=400).contains(&estimate), "{}", refused.body);

    // The lock's page says the same.
    let page = Browser::new(&app).get("/locks/jobs").await;
    assert!(page.body.contains("A new request waits"), "{}", page.body);
    assert!(page.body.contains("from its recent holds"), "{}", page.body);
}

#[tokio::test]
async fn a_ticket_in_line_says_whom_it_waits_for_and_its_turn_grows_with_its_place() {
    let app = spawn_app().await;
    past_holds(&app, "line", "fair", 4, Duration::from_millis(300)).await;
    app.lease("line", json!({"kind": "fair", "holder": "deployer"}))
        .await;
    let first = app
        .acquire_with("line", 0, json!({"kind": "fair"}), None)
        .await;
    let second = app
        .acquire_with("line", 0, json!({"kind": "fair"}), None)
        .await;
    first.assert_status(202);
    second.assert_status(202);
    assert_eq!(first.body["position"], 1);
    assert_eq!(first.body["held_by"], "deployer", "{}", first.body);
    assert!(first.body["held_for_ms"].is_u64(), "{}", first.body);
    let (one, two) = (
        ms(&first.body, "estimated_wait_ms"),
        ms(&second.body, "estimated_wait_ms"),
    );
    assert!(one <= 400, "{}", first.body);
    // One more turn ahead: about one more hold of 300 ms.
    assert!((250..=450).contains(&(two - one)), "{one} then {two}");
    // A poll of the ticket says it too.
    let polled = app
        .poll_ticket(
            first.header("location").expect("location"),
            &first.str("token"),
            0,
        )
        .await;
    polled.assert_status(202);
    assert!(polled.body["estimated_wait_ms"].is_u64(), "{}", polled.body);
}

#[tokio::test]
async fn a_candidate_in_line_is_told_how_long_until_it_may_lead() {
    let app = spawn_app().await;
    let campaign = |value: &'static str| {
        let url = app.url("/v1/elections/el/candidates");
        app.send(app.http.post(url).json(&json!({"value": value})))
    };
    for _ in 0..4 {
        let leader = campaign("a").await;
        leader.assert_status(201);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let resign = app.http.delete(app.url(&format!(
            "/v1/elections/el/candidates/{}",
            leader.str("candidate_id")
        )));
        app.send(resign.bearer_auth(leader.str("token")))
            .await
            .assert_status(200);
    }
    campaign("leader").await.assert_status(201);
    let in_line = campaign("next").await;
    in_line.assert_status(202);
    assert_eq!(in_line.body["position"], 1);
    let estimate = ms(&in_line.body, "estimated_wait_ms");
    assert!(estimate <= 400, "{}", in_line.body);
}

#[tokio::test]
async fn the_rust_client_tells_why_it_waits() {
    use leasehold::client::{AcquireOptions, Acquired, Client, ClientError, LockKind};
    let app = spawn_app().await;
    past_holds(&app, "rust", "fair", 3, Duration::from_millis(200)).await;
    app.lease("rust", json!({"kind": "fair", "holder": "h"}))
        .await;
    let client = Client::new(app.url("").parse().expect("url")).expect("client");
    let fair = AcquireOptions {
        kind: Some(LockKind::Fair),
        ..AcquireOptions::default()
    };
    let Acquired::Queued(ticket) = client.acquire("rust", &fair).await.expect("queued").body else {
        panic!("granted while held");
    };
    assert_eq!(ticket.ticket.held_by.as_deref(), Some("h"));
    assert!(ticket.ticket.estimated_wait_ms.is_some(), "{ticket:?}");
    past_holds(&app, "plain", "reentrant", 3, Duration::from_millis(200)).await;
    app.lease("plain", json!({"holder": "h"})).await;
    let refused = client.acquire("plain", &AcquireOptions::default()).await;
    let Err(ClientError::Problem(problem)) = refused else {
        panic!("not refused: {refused:?}");
    };
    assert!(problem.held_since().is_some(), "{problem:?}");
    assert!(problem.held_for_ms().is_some(), "{problem:?}");
    assert!(problem.estimated_wait_ms().is_some(), "{problem:?}");
}

#[tokio::test]
async fn leasehold_run_in_a_fair_line_says_its_place_and_estimate_once() {
    use crate::helpers::cli::{code, finish, run_sh, stderr};
    let app = spawn_app().await;
    past_holds(&app, "deploy", "fair", 3, Duration::from_millis(200)).await;
    let holder = app
        .lease("deploy", json!({"kind": "fair", "holder": "ci@build1"}))
        .await;
    let run = run_sh(
        &app,
        &["--kind", "fair", "--wait", "30s"],
        "deploy",
        "true",
        &[],
    )
    .spawn()
    .expect("start leasehold run");
    // Its ticket stands in line: then let the holder go.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.inspect_lock("deploy").await.body["queue_length"] != 1 {
        assert!(std::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.release(&holder, true).await.assert_status(200);
    let out = finish(run).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("waiting in line for deploy (position 1, behind ci@build1"),
        "{said}"
    );
    assert!(said.contains("s to wait"), "{said}");
    assert_eq!(said.matches("waiting in line").count(), 1, "{said}");
}

#[tokio::test]
async fn the_rust_clients_watch_takes_an_expiring_slack() {
    use leasehold::client::{AcquireOptions, Acquired, Client, Resource, WatchEvent};
    let app = spawn_app().await;
    let client = Client::new(app.url("").parse().expect("url")).expect("client");
    let options = AcquireOptions {
        ttl: Some(Duration::from_millis(3000)),
        ..AcquireOptions::default()
    };
    let Acquired::Lease(lease) = client.acquire("slack", &options).await.expect("lease").body
    else {
        panic!("queued");
    };
    let opened = std::time::Instant::now();
    let mut watch = client
        .watch_from(
            Resource::Lock,
            ("slack", lease.grant.lease_id, &lease.token),
            None,
            Some(Duration::from_millis(1400)),
        )
        .await
        .expect("watch");
    let WatchEvent::Signal { kind, signal } = watch.next().await.expect("an event") else {
        panic!("lost before expiring");
    };
    assert_eq!(kind, "expiring");
    assert!(signal.remaining_ms <= Some(1400), "{signal:?}");
    // Due 1600 ms in (3000 - 1400), not at the default third of the TTL (2000 ms in).
    let at = opened.elapsed();
    assert!(at < Duration::from_millis(1900), "told at {at:?}");
}
