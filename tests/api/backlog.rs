//! `GET /v1/events` with a backlog and SSE ids: the most recent events of every lock first,
//! then the live ones; a client that reconnects with `Last-Event-ID` gets what it missed, in
//! order and once, or `resync` when the server cannot say.

use std::time::Duration;

use tokio::time::Instant;

use eventsource_stream::{Event, Eventsource as _};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

type Events = std::pin::Pin<
    Box<
        dyn futures_util::Stream<
                Item = Result<Event, eventsource_stream::EventStreamError<reqwest::Error>>,
            > + Send,
    >,
>;

async fn open(app: &TestApp, query: &str, last_event_id: Option<&str>) -> Events {
    let mut request = app.http.get(app.url(&format!("/v1/events{query}")));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.expect("request");
    assert_eq!(response.status(), 200);
    Box::pin(response.bytes_stream().eventsource())
}

/// The next message (comments are not messages), within 5 s.
async fn next(events: &mut Events) -> Event {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream is open")
        .expect("a well-formed event")
}

fn data(event: &Event) -> Value {
    serde_json::from_str(&event.data).expect("JSON data")
}

#[tokio::test]
async fn a_backlog_comes_first_and_a_resumed_stream_misses_nothing() {
    let app = spawn_app().await;
    app.wait_until_ready().await;
    let mut live = open(&app, "", None).await;
    for name in ["a", "b", "c"] {
        app.lease(name, json!({"holder": name})).await;
    }
    let mut ids = Vec::new();
    for _ in 0..3 {
        let event = next(&mut live).await;
        assert!(!event.id.is_empty(), "every event has an id: {event:?}");
        assert_eq!(data(&event)["event_id"], event.id.as_str());
        ids.push(event.id.clone());
    }

    // A new listener asks for the last two first.
    let mut late = open(&app, "?backlog=2", None).await;
    let first = next(&mut late).await;
    let second = next(&mut late).await;
    assert_eq!(data(&first)["lock"], "b");
    assert_eq!(data(&second)["lock"], "c");
    assert_eq!(second.id, ids[2]);

    // A client that saw the first event resumes after it: b and c, then live, nothing twice.
    let mut resumed = open(&app, "", Some(&ids[0])).await;
    assert_eq!(data(&next(&mut resumed).await)["lock"], "b");
    assert_eq!(data(&next(&mut resumed).await)["lock"], "c");
    app.lease("d", json!({})).await;
    let live_d = next(&mut resumed).await;
    assert_eq!(data(&live_d)["lock"], "d");
    assert!(live_d.id > ids[2], "ids grow");
}

#[tokio::test]
async fn an_id_the_server_cannot_resume_from_says_resync() {
    let app = spawn_app().await;
    app.lease("a", json!({})).await;
    for id in ["1-0.0", "not-an-id"] {
        let mut events = open(&app, "", Some(id)).await;
        assert_eq!(next(&mut events).await.event, "resync", "{id}");
    }
    let refused = app.get("/v1/events?backlog=100000").await;
    refused.assert_problem(400, "invalid_query");
}

/// Each tenant's events are journaled apart: one tenant's backlog and resume never show
/// another's locks, nor the default tenant's.
#[tokio::test]
async fn a_backlog_holds_the_callers_tenants_events_only() {
    let app = spawn_app().await;
    app.wait_until_ready().await;
    let key =
        |tenant: &str| json!({"name": "svc", "tenant": tenant, "roles": ["client", "reader"]});
    let a = app.with_key(&app.create_key(key("a")).await.1);
    let b = app.with_key(&app.create_key(key("b")).await.1);
    let operator = app.with_key(&app.create_key(key("")).await.1);
    let mut live_b = open(&b, "", None).await;
    a.lease("secret-a", json!({"holder": "team-a"})).await;
    operator.lease("operator-lock", json!({})).await;
    b.lease("mine-b", json!({"holder": "team-b"})).await;
    // b's live feed: its own event only (the others went to other channels).
    let first = data(&next(&mut live_b).await);
    assert_eq!(first["lock"], "mine-b");

    let mut backlog_b = open(&b, "?backlog=100", None).await;
    let only = next(&mut backlog_b).await;
    assert_eq!(
        data(&only)["lock"],
        "mine-b",
        "b's backlog starts with its own event"
    );
    let quiet = tokio::time::timeout(Duration::from_millis(500), backlog_b.next()).await;
    assert!(quiet.is_err(), "nothing else in b's backlog: {quiet:?}");

    let mut backlog_a = open(&a, "?backlog=100", None).await;
    assert_eq!(data(&next(&mut backlog_a).await)["lock"], "secret-a");
    let mut backlog_default = open(&operator, "?backlog=100", None).await;
    assert_eq!(
        data(&next(&mut backlog_default).await)["lock"],
        "operator-lock"
    );
    let quiet = tokio::time::timeout(Duration::from_millis(500), backlog_default.next()).await;
    assert!(
        quiet.is_err(),
        "no tenant's event in the default backlog: {quiet:?}"
    );
}

/// Every instance publishes every event; one that held the events channels all the time would
/// get every batch of every instance back, watched or not. So an instance subscribes to the
/// default tenant's channel only while one of its streams is open there, and to the named
/// tenants' pattern (which Redis tries at every position of every channel anything publishes
/// to, every release's unlock message too) only while one of theirs is. A stream's first live
/// event still arrives (the subscription is held before the stream starts), and some time after
/// the last such stream closes it is dropped again.
#[tokio::test]
async fn events_are_listened_for_only_while_streamed() {
    let app = spawn_app().await;
    app.wait_until_ready().await;
    let patterns = async || app.redis.pattern_subscriptions().await;
    let default_channel = async || {
        let subscribers: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("leasehold:events")
            .query_async(&mut app.redis.conn().await)
            .await
            .expect("PUBSUB NUMSUB");
        subscribers[0].1
    };
    let key =
        |tenant: &str| json!({"name": "svc", "tenant": tenant, "roles": ["client", "reader"]});
    let a = app.with_key(&app.create_key(key("a")).await.1);
    let operator = app.with_key(&app.create_key(key("")).await.1);
    operator.lease("unwatched", json!({})).await;
    // Its event goes out within the publisher's linger (5 ms), before any stream opens.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        default_channel().await,
        0,
        "no stream open: the events channel is not subscribed"
    );
    let mut default_live = open(&operator, "", None).await;
    assert_eq!(
        default_channel().await,
        1,
        "the default tenant's stream subscribed its channel"
    );
    operator.lease("operator-lock", json!({})).await;
    assert_eq!(
        data(&next(&mut default_live).await)["lock"],
        "operator-lock"
    );
    assert_eq!(
        patterns().await,
        0,
        "the default tenant's stream needs no pattern"
    );

    let mut live_a = open(&a, "", None).await;
    assert_eq!(
        patterns().await,
        1,
        "a's stream subscribed the tenants' pattern"
    );
    a.lease("mine-a", json!({})).await;
    assert_eq!(data(&next(&mut live_a).await)["lock"], "mine-a");
    drop((live_a, default_live));

    // Dropped within the linger (10 s) plus the subscriber's check interval (5 s).
    let deadline = Instant::now() + Duration::from_secs(25);
    while patterns().await != 0 || default_channel().await != 0 {
        assert!(
            Instant::now() < deadline,
            "an events subscription outlived the last stream"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // New streams subscribe again, and hear their tenant at once.
    let mut live_a = open(&a, "", None).await;
    a.lease("again-a", json!({})).await;
    assert_eq!(data(&next(&mut live_a).await)["lock"], "again-a");
    let mut default_live = open(&operator, "", None).await;
    operator.lease("again-operator", json!({})).await;
    assert_eq!(
        data(&next(&mut default_live).await)["lock"],
        "again-operator"
    );
}
