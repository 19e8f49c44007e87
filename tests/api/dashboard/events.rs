//! The `/v1/events` feed: filtered by prefix, ended on shutdown, one Redis subscription for
//! every listener.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::spawn_app;

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
