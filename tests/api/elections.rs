//! Leader election (issue 55): `/v1/elections/{name}` and its candidates, on a real Redis
//! over real HTTP.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Reply, TestApp, spawn_app};

/// A candidate as its campaign answered.
struct Candidate {
    location: String,
    token: String,
    id: String,
}

impl Candidate {
    fn from_reply(reply: &Reply) -> Self {
        Self {
            location: reply.header("location").expect("a Location").to_owned(),
            token: reply.str("token"),
            id: reply.str("candidate_id"),
        }
    }
}

async fn campaign(app: &TestApp, name: &str, body: Value, wait_ms: u64) -> Reply {
    let url = app.url(&format!(
        "/v1/elections/{name}/candidates?wait_ms={wait_ms}"
    ));
    app.send(app.http.post(url).json(&body)).await
}

async fn with_token(app: &TestApp, method: reqwest::Method, path: &str, token: &str) -> Reply {
    app.send(app.http.request(method, app.url(path)).bearer_auth(token))
        .await
}

async fn heartbeat(app: &TestApp, c: &Candidate) -> Reply {
    let path = format!("{}/heartbeat", c.location);
    with_token(app, reqwest::Method::POST, &path, &c.token).await
}

async fn resign(app: &TestApp, c: &Candidate) -> Reply {
    with_token(app, reqwest::Method::DELETE, &c.location, &c.token).await
}

async fn poll(app: &TestApp, c: &Candidate, wait_ms: u64) -> Reply {
    let path = format!("{}?wait_ms={wait_ms}", c.location);
    with_token(app, reqwest::Method::GET, &path, &c.token).await
}

#[tokio::test]
async fn the_first_candidate_leads_and_the_next_waits_in_line_then_leads_on_resignation() {
    let app = spawn_app().await;
    let first = campaign(
        &app,
        "scheduler",
        json!({"value": "10.0.0.1:8080", "ttl_ms": 5000, "holder": "node-a"}),
        0,
    )
    .await;
    first.assert_status(201);
    let term = first.body["term"].as_u64().expect("a term");
    assert_eq!(first.body["value"], "10.0.0.1:8080");
    let a = Candidate::from_reply(&first);
    assert!(a.location.ends_with(&a.id), "{}", a.location);

    let second = campaign(&app, "scheduler", json!({"value": "10.0.0.2:8080"}), 0).await;
    second.assert_status(202);
    assert_eq!(second.body["position"], 1);
    assert_eq!(second.body["leader"]["term"], term);
    assert_eq!(second.body["leader"]["value"], "10.0.0.1:8080");
    assert_eq!(second.body["leader"]["holder"], "node-a");
    let b = Candidate::from_reply(&second);

    let seen = app.get("/v1/elections/scheduler").await;
    seen.assert_status(200);
    assert_eq!(seen.body["leader"]["candidate_id"], a.id.as_str());
    assert_eq!(seen.body["term"], term);
    assert_eq!(seen.body["candidates_waiting"], 1);
    assert_eq!(seen.body["candidates"][0]["candidate_id"], b.id.as_str());

    // The waiting candidate heartbeats its place; the leader its term.
    heartbeat(&app, &b).await.assert_status(202);
    let kept = heartbeat(&app, &a).await;
    kept.assert_status(200);
    assert_eq!(kept.body["term"], term);

    // A's resignation hands the lead to B at once, with a higher term.
    let waiting = {
        let app = app.view(None, true);
        let b_location = b.location.clone();
        let b_token = b.token.clone();
        tokio::spawn(async move {
            let path = format!("{b_location}?wait_ms=5000");
            with_token(&app, reqwest::Method::GET, &path, &b_token).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resigned = resign(&app, &a).await;
    resigned.assert_status(200);
    assert_eq!(resigned.body["resigned"], true);
    let led = waiting.await.expect("the poll");
    led.assert_status(200);
    let next_term = led.body["term"].as_u64().expect("a term");
    assert!(next_term > term, "{next_term} after {term}");
    assert_eq!(led.body["value"], "10.0.0.2:8080");
    // A is out: its heartbeat and poll say so.
    heartbeat(&app, &a).await.assert_status(410);
    poll(&app, &a, 0).await.assert_status(410);
    // The term fences: B's is current, A's is not.
    let check = |term: u64| {
        let app = &app;
        async move {
            let url = app.url("/v1/elections/scheduler/fence/check");
            app.send(app.http.post(url).json(&json!({"term": term})))
                .await
        }
    };
    let current = check(next_term).await;
    current.assert_status(200);
    assert_eq!(current.body["current"], true);
    assert_eq!(check(term).await.body["current"], false);
}

#[tokio::test]
async fn a_leader_that_stops_heartbeating_is_replaced_after_its_ttl() {
    let app = spawn_app().await;
    let first = campaign(&app, "janitor", json!({"value": "a", "ttl_ms": 300}), 0).await;
    first.assert_status(201);
    let term = first.body["term"].as_u64().expect("a term");
    let second = campaign(&app, "janitor", json!({"value": "b", "ttl_ms": 5000}), 2000).await;
    second.assert_status(201);
    assert!(second.body["term"].as_u64().expect("a term") > term);
    let a = Candidate::from_reply(&first);
    heartbeat(&app, &a).await.assert_status(410);
}

/// A term that ran out (no resignation) with a lock-delay: nobody leads for the delay, and a
/// campaign then stands in line (202, its place kept) and leads once the delay is over; it
/// is not refused.
#[tokio::test]
async fn a_campaign_during_a_lock_delay_waits_in_line_and_leads_after_it() {
    let app = spawn_app().await;
    let body = json!({"value": "a", "ttl_ms": 200, "lock_delay_ms": 1_500});
    campaign(&app, "cron", body, 0).await.assert_status(201);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let started = std::time::Instant::now();
    let waiting = campaign(&app, "cron", json!({"value": "b", "ttl_ms": 5000}), 0).await;
    waiting.assert_status(202);
    let b = Candidate::from_reply(&waiting);
    let led = poll(&app, &b, 5_000).await;
    led.assert_status(200);
    assert_eq!(led.body["candidate_id"], waiting.body["candidate_id"]);
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "led {:?} after the term ran out, within its lock-delay",
        started.elapsed()
    );
}

/// A leader's heartbeat names its term: a candidate that does not lead in that term (Redis
/// lost its grant and put it back in line) is told it is out, never led into a new term it
/// would take for the old one; and it stops holding the line.
#[tokio::test]
async fn a_heartbeat_naming_a_term_the_candidate_does_not_lead_in_answers_410() {
    let app = spawn_app().await;
    let first = campaign(&app, "cron", json!({"value": "a", "ttl_ms": 5000}), 0).await;
    first.assert_status(201);
    let term = first.body["term"].as_u64().expect("a term");
    let a = Candidate::from_reply(&first);
    let path = format!("{}/heartbeat?term={term}", a.location);
    with_token(&app, reqwest::Method::POST, &path, &a.token)
        .await
        .assert_status(200);
    let second = campaign(&app, "cron", json!({"value": "b", "ttl_ms": 5000}), 0).await;
    second.assert_status(202);
    let b = Candidate::from_reply(&second);
    // In line, though it says it leads in a term: out, and out of the line.
    let path = format!("{}/heartbeat?term={term}", b.location);
    with_token(&app, reqwest::Method::POST, &path, &b.token)
        .await
        .assert_problem(410, "lease_lost");
    poll(&app, &b, 0).await.assert_status(410);
    // The leader, naming another term than its own: let go, and told so.
    let path = format!("{}/heartbeat?term={}", a.location, term + 1);
    with_token(&app, reqwest::Method::POST, &path, &a.token)
        .await
        .assert_problem(410, "lease_lost");
    let third = campaign(&app, "cron", json!({"value": "c", "ttl_ms": 5000}), 0).await;
    third.assert_status(201);
    assert!(third.body["term"].as_u64().expect("a term") > term);
    let c = Candidate::from_reply(&third);
    let path = format!("{}/heartbeat?term=x", c.location);
    with_token(&app, reqwest::Method::POST, &path, &c.token)
        .await
        .assert_problem(400, "invalid_query");
}

#[tokio::test]
async fn an_admin_ends_a_term_and_the_next_candidate_leads_with_a_higher_one() {
    let app = spawn_app().await;
    let first = campaign(&app, "migrator", json!({"value": "a"}), 0).await;
    let term = first.body["term"].as_u64().expect("a term");
    let b = Candidate::from_reply(&campaign(&app, "migrator", json!({"value": "b"}), 0).await);
    let ended = app
        .admin(
            reqwest::Method::DELETE,
            "/v1/admin/elections/migrator?reason=stuck",
            None,
        )
        .await;
    ended.assert_status(200);
    assert_eq!(ended.body["released"], true);
    heartbeat(&app, &Candidate::from_reply(&first))
        .await
        .assert_status(410);
    let led = poll(&app, &b, 2000).await;
    led.assert_status(200);
    assert!(led.body["term"].as_u64().expect("a term") > term);
    // Nobody leads once B resigns; the last term stays.
    resign(&app, &b).await.assert_status(200);
    let seen = app.get("/v1/elections/migrator").await;
    assert_eq!(seen.body["leader"], Value::Null);
    assert_eq!(seen.body["term"], led.body["term"]);
}

#[tokio::test]
async fn bad_campaigns_and_strangers_get_clear_problems() {
    let app = spawn_app().await;
    let long = "x".repeat(4097);
    campaign(&app, "e", json!({"value": long}), 0)
        .await
        .assert_problem(422, "invalid_body");
    campaign(&app, "e", json!({}), 0).await.assert_status(422);
    campaign(&app, "a b", json!({"value": "v"}), 0)
        .await
        .assert_status(422);
    campaign(&app, "e", json!({"value": "v", "ttl_ms": 0}), 0)
        .await
        .assert_problem(422, "invalid_ttl");
    let url = app.url("/v1/elections/e/candidates?wait_ms=soon");
    app.send(app.http.post(url).json(&json!({"value": "v"})))
        .await
        .assert_problem(400, "invalid_query");
    // A wait over the server's maximum is cut to it, and the answer says by how much.
    let cut = campaign(&app, "cut", json!({"value": "v"}), 1_000_000_000).await;
    cut.assert_status(201);
    let allowed = cut.body["wait_ms"].as_u64().expect("the wait allowed");
    assert!(allowed < 1_000_000_000, "{allowed}");
    let leader = Candidate::from_reply(&campaign(&app, "e", json!({"value": "v"}), 0).await);
    let stranger = Candidate {
        token: Candidate::from_reply(&campaign(&app, "other", json!({"value": "v"}), 0).await)
            .token,
        ..leader
    };
    heartbeat(&app, &stranger).await.assert_status(403);
    let unknown = format!("/v1/elections/e/candidates/{}", uuid::Uuid::new_v4());
    with_token(&app, reqwest::Method::GET, &unknown, &stranger.token)
        .await
        .assert_problem(404, "lease_not_found");
    let check = app
        .send(
            app.http
                .post(app.url("/v1/elections/e/fence/check"))
                .json(&json!({})),
        )
        .await;
    check.assert_problem(422, "invalid_body");
    // An election is no lock: its name stays free for a lock, and the lock listing leaves
    // it out.
    app.acquire("e", json!({})).await.assert_status(201);
    let listed = app.get("/v1/locks").await;
    let names: Vec<&str> = listed.body["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, vec!["e"], "{}", listed.body);
}

type Events = std::pin::Pin<
    Box<
        dyn futures_util::Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

async fn observe(app: &TestApp, name: &str, last: Option<&str>) -> Events {
    use eventsource_stream::Eventsource as _;
    let mut request = app
        .http
        .get(app.url(&format!("/v1/elections/{name}/observe")))
        .timeout(Duration::from_secs(60));
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    let response = request.send().await.expect("request");
    assert_eq!(response.status(), 200);
    Box::pin(response.bytes_stream().eventsource())
}

/// The next message that is not a comment: (event, data, id).
async fn next(events: &mut Events) -> (String, Value, String) {
    use futures_util::StreamExt as _;
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a message within 5 s")
        .expect("the stream goes on")
        .expect("a well-formed stream");
    let data = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    (event.event, data, event.id)
}

#[tokio::test]
async fn an_observer_sees_every_term_in_order_and_resumes_without_a_gap() {
    let app = spawn_app().await;
    let mut watching = observe(&app, "planner", None).await;
    let (kind, data, _) = next(&mut watching).await;
    assert_eq!((kind.as_str(), &data["term"]), ("vacant", &json!(0)));
    // Five candidates line up; each resigns as soon as it leads, so terms follow each other
    // faster than any poll would see them.
    let mut line = Vec::new();
    for i in 0..5 {
        let reply = campaign(&app, "planner", json!({"value": format!("v{i}")}), 0).await;
        line.push(Candidate::from_reply(&reply));
    }
    for c in &line {
        let led = poll(&app, c, 2000).await;
        led.assert_status(200);
        resign(&app, c).await.assert_status(200);
    }
    // Nobody leads between a resignation and the next candidate's poll: a vacancy may come
    // between two terms, naming the last.
    let mut terms = Vec::new();
    let mut first_id = String::new();
    while terms.len() < 5 {
        let (kind, data, id) = next(&mut watching).await;
        if kind == "vacant" {
            assert_eq!(data["term"], *terms.last().expect("terms before"));
            assert!(id.ends_with(".v"), "{id}");
            continue;
        }
        assert_eq!(kind, "leader");
        assert_eq!(data["value"], format!("v{}", terms.len()));
        if first_id.is_empty() {
            first_id = id;
        }
        terms.push(data["term"].clone());
    }
    let (kind, data, _) = next(&mut watching).await;
    assert_eq!((kind.as_str(), &data["term"]), ("vacant", &terms[4]));
    let numbers: Vec<u64> = terms.iter().filter_map(Value::as_u64).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    // Resumed after the first term: the four after it, then the vacancy (nobody leads now).
    let mut resumed = observe(&app, "planner", Some(&first_id)).await;
    for expected in &terms[1..] {
        let (kind, data, _) = next(&mut resumed).await;
        assert_eq!((kind.as_str(), &data["term"]), ("leader", expected));
    }
    let (kind, data, _) = next(&mut resumed).await;
    assert_eq!((kind.as_str(), &data["term"]), ("vacant", &terms[4]));
    // A Last-Event-ID that is none of ours is refused.
    let bad = app
        .send(
            app.http
                .get(app.url("/v1/elections/planner/observe"))
                .header("last-event-id", "nonsense"),
        )
        .await;
    bad.assert_problem(400, "invalid_query");
}

#[tokio::test]
async fn a_campaign_retried_with_its_idempotency_key_stands_one_candidate() {
    let app = spawn_app().await;
    let send = || async {
        let url = app.url("/v1/elections/once/candidates");
        let request = app.http.post(url).json(&json!({"value": "v"}));
        app.send_with_key(request, "campaign-1").await
    };
    let first = send().await;
    first.assert_status(201);
    let again = send().await;
    again.assert_status(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body["candidate_id"], first.body["candidate_id"]);
    assert_eq!(again.body["token"], first.body["token"]);
    assert_eq!(again.body["term"], first.body["term"]);
    let seen = app.get("/v1/elections/once").await;
    assert_eq!(seen.body["candidates_waiting"], 0, "{}", seen.body);
}

#[tokio::test]
async fn a_leaders_watch_says_lost_the_moment_its_term_is_ended() {
    use eventsource_stream::Eventsource as _;
    use futures_util::StreamExt as _;
    let app = spawn_app().await;
    let leader = Candidate::from_reply(&campaign(&app, "watched", json!({"value": "v"}), 0).await);
    let response = app
        .http
        .get(app.url(&format!("{}/watch", leader.location)))
        .bearer_auth(&leader.token)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    app.admin(
        reqwest::Method::DELETE,
        "/v1/admin/elections/watched?reason=test",
        None,
    )
    .await
    .assert_status(200);
    let lost = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = events.next().await {
            let event = event.expect("a well-formed stream");
            if event.event == "lost" {
                return event;
            }
        }
        panic!("the watch ended without `lost`");
    })
    .await
    .expect("`lost` within 5 s");
    let body: Value = serde_json::from_str(&lost.data).expect("JSON");
    assert_eq!(body["lease_id"], leader.id.as_str());
    assert_eq!(body["reason"], "force_released");
}

#[tokio::test]
async fn the_leader_proclaims_a_new_value_in_its_term_and_observers_see_it() {
    let app = spawn_app().await;
    let first = campaign(&app, "gateway", json!({"value": "old"}), 0).await;
    let term = first.body["term"].clone();
    let leader = Candidate::from_reply(&first);
    let follower =
        Candidate::from_reply(&campaign(&app, "gateway", json!({"value": "f"}), 0).await);
    let mut watching = observe(&app, "gateway", None).await;
    let (kind, data, _) = next(&mut watching).await;
    assert_eq!((kind.as_str(), &data["value"]), ("leader", &json!("old")));
    let put = |c: &Candidate, value: &str| {
        let request = app
            .http
            .put(app.url(&format!("{}/value", c.location)))
            .bearer_auth(&c.token)
            .json(&json!({"value": value}));
        app.send(request)
    };
    let proclaimed = put(&leader, "new").await;
    proclaimed.assert_status(200);
    assert_eq!(proclaimed.body["term"], term);
    assert_eq!(proclaimed.body["value"], "new");
    let (kind, data, _) = next(&mut watching).await;
    assert_eq!(kind, "leader");
    assert_eq!((&data["term"], &data["value"]), (&term, &json!("new")));
    let seen = app.get("/v1/elections/gateway").await;
    assert_eq!(seen.body["leader"]["value"], "new");
    // A follower may not; nor may a leader once its term ended.
    put(&follower, "mine")
        .await
        .assert_problem(409, "ticket_pending");
    put(&leader, &"x".repeat(4097))
        .await
        .assert_problem(422, "invalid_body");
    resign(&app, &leader).await.assert_status(200);
    put(&leader, "again").await.assert_status(410);
}
