//! `GET /v1/events` with a backlog and SSE ids: the most recent events of every lock first,
//! then the live ones; a client that reconnects with `Last-Event-ID` gets what it missed, in
//! order and once, or `resync` when the server cannot say.

use std::time::Duration;

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
