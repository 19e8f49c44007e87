//! The route matrix's row for elections, the kind of lease that lives on a lock of its own
//! (`election/<name>`): a campaign with an Idempotency-Key (and its retry), the caller's
//! quota (a candidate counts, leading or in line), the terms metric, the election's
//! inspection, the listing (there is no `GET /v1/elections`: the dashboard's elections view
//! lists them, and the lock listings leave them out), `/v1/events` (a term is an event of the
//! election's lock; `?prefix=election/...` selects elections), an admin's end of the term (audited) and the next term.

use reqwest::Method;
use serde_json::{Value, json};

use super::kinds::{backlog_of, sample, scrape};
use crate::dashboard::elections::until_journaled;
use crate::helpers::{Reply, TestApp, spawn_app};

async fn campaign(app: &TestApp, name: &str, holder: &str, key: Option<&str>) -> Reply {
    let mut request = app
        .http
        .post(app.url(&format!("/v1/elections/{name}/candidates?wait_ms=0")))
        .json(&json!({"value": format!("{holder}:8080"), "holder": holder, "ttl_ms": 30_000}));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    app.send(request).await
}

fn terms_started(text: &str) -> f64 {
    sample(text, "leasehold_election_terms_started_total", &[])
}

#[tokio::test]
async fn an_election_goes_through_every_route() {
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "matrix-election", "roles": ["client", "reader"], "patterns": ["k-*"], "quotas": {"max_leases": 2}}))
        .await;
    let caller = app.with_key(&secret);
    let before = scrape(&caller).await;

    // A campaign with an Idempotency-Key, then its retry: the same candidate, a replay.
    let first = campaign(&caller, "k-election", "node-a", Some("matrix-election-1")).await;
    first.assert_status(201);
    let leader_id = first.str("candidate_id");
    let retry = campaign(&caller, "k-election", "node-a", Some("matrix-election-1")).await;
    retry.assert_status(201);
    assert_eq!(retry.str("candidate_id"), leader_id);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));

    // The quota counts candidates (the retry did not): one in line is the last one.
    let next = campaign(&caller, "k-election", "node-b", None).await;
    next.assert_status(202);
    campaign(&caller, "k-election-2", "node-c", None)
        .await
        .assert_problem(429, "quota_exceeded");

    // The metric counted one term; the line's gauge shows the candidate waiting.
    until_journaled(&caller, "k-election").await;
    let after = scrape(&caller).await;
    assert_eq!(
        terms_started(&after) - terms_started(&before),
        1.0,
        "{after}"
    );
    assert_eq!(
        sample(&after, "leasehold_election_candidates_waiting", &[]),
        1.0
    );

    check_inspection_and_listing(&app, &caller, &secret, &leader_id).await;
    check_end_of_term(&app, &caller, &first, &next).await;
    check_events(&caller).await;

    // The metric moved with the second term; nobody waits any more.
    let last = scrape(&caller).await;
    assert_eq!(terms_started(&last) - terms_started(&before), 2.0, "{last}");
    assert_eq!(
        sample(&last, "leasehold_election_candidates_waiting", &[]),
        0.0
    );
}

/// The election's inspection shows the leader and the line; the lock listing leaves the
/// election's lock out, and the elections view lists it.
async fn check_inspection_and_listing(
    app: &TestApp,
    caller: &TestApp,
    secret: &str,
    leader_id: &str,
) {
    let inspected = caller.get("/v1/elections/k-election").await;
    inspected.assert_status(200);
    assert_eq!(inspected.body["leader"]["candidate_id"], leader_id);
    assert_eq!(inspected.body["candidates_waiting"], 1);

    let locks = caller.get("/v1/locks").await;
    locks.assert_status(200);
    assert!(
        !locks.body.to_string().contains("election/"),
        "{}",
        locks.body
    );
    let view = app
        .http
        .get(app.url("/elections"))
        .header("leasehold-key", secret)
        .send()
        .await
        .expect("the elections view");
    assert_eq!(view.status(), 200);
    let view = view.text().await.expect("page");
    assert!(
        view.contains(r#"<a href="/elections/k-election">k-election</a>"#),
        "{view}"
    );
}

/// An admin ends the term of `first`'s leader (audited once); the leader is out, and `next`,
/// in line, leads in a later term.
async fn check_end_of_term(app: &TestApp, caller: &TestApp, first: &Reply, next: &Reply) {
    let first_term = first.u64("term");
    let leader_path = first.header("location").expect("Location").to_owned();
    let next_token = next.str("token");
    let next_path = next.header("location").expect("Location").to_owned();
    let ended = app
        .admin(
            Method::DELETE,
            "/v1/admin/elections/k-election?reason=matrix",
            None,
        )
        .await;
    ended.assert_status(200);
    assert!(
        ended.body["removed"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        ended.body
    );
    let polled = caller
        .send(
            caller
                .http
                .get(caller.url(&format!("{next_path}?wait_ms=5000")))
                .bearer_auth(&next_token),
        )
        .await;
    polled.assert_status(200);
    assert!(polled.u64("term") > first_term, "{}", polled.body);
    let leader_token = first.str("token");
    caller
        .send(
            caller
                .http
                .post(caller.url(&format!("{leader_path}/heartbeat")))
                .bearer_auth(&leader_token),
        )
        .await
        .assert_status(410);
    let audit = app
        .admin(Method::GET, "/v1/admin/audit?limit=500", None)
        .await;
    let ours = audit.body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["target"] == "election/k-election" && e["reason"] == "matrix")
        .count();
    assert_eq!(ours, 1, "{}", audit.body);
}

/// `/v1/events`: each term's grant and the end of the first, under the election's lock
/// (seen by a key whose patterns name the election), on its own with `election/` and the
/// start of its name.
async fn check_events(caller: &TestApp) {
    for filter in ["", "prefix=election/k-el&"] {
        let events = backlog_of(caller, filter).await;
        let ours: Vec<&Value> = events
            .iter()
            .filter(|e| e["lock"] == "election/k-election")
            .collect();
        let types: Vec<&str> = ours.iter().filter_map(|e| e["type"].as_str()).collect();
        assert!(types.contains(&"acquired"), "{filter}: {ours:?}");
        assert!(types.contains(&"force_released"), "{filter}: {ours:?}");
        if !filter.is_empty() {
            assert_eq!(ours.len(), events.len(), "only the election's: {events:?}");
        }
    }
}
