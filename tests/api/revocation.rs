//! Revocation ends what is open: an event stream opened with a key ends once the key is
//! revoked, one opened with a dashboard session once the session ends, and a request waiting
//! for a lock with a revoked key is answered 401 and is never granted the lock, all within
//! about the revocation bound (a second: the key store's cache).

use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::json;

use crate::dashboard::Browser;
use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

/// Opens `GET /v1/events` with `headers`, and returns how long after `revoke` ran it ended.
async fn stream_ends_after<F: std::future::Future<Output = ()>>(
    app: &TestApp,
    headers: &[(&str, &str)],
    revoke: F,
) -> Duration {
    let mut request = app.http.get(app.url("/v1/events"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    // The stream says hello at once.
    let hello = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("a first message");
    assert!(hello.is_some());
    revoke.await;
    let revoked_at = tokio::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stream was still open 5 s after the revocation"
    );
    revoked_at.elapsed()
}

#[tokio::test]
async fn an_event_stream_ends_when_its_key_is_revoked() {
    let app = spawn_app().await;
    let (id, secret) = app
        .create_key(json!({"name": "watcher", "roles": ["reader"]}))
        .await;
    let took = stream_ends_after(&app, &[("leasehold-key", &secret)], app.revoke_key(&id)).await;
    assert!(took < Duration::from_millis(2_500), "{took:?}");
}

#[tokio::test]
async fn an_event_stream_ends_when_its_dashboard_session_ends() {
    let app = spawn_app().await;
    // A key exists, so the stream needs the session (anonymous callers are not let in).
    app.create_key(json!({"name": "ci", "roles": ["client"]}))
        .await;
    let mut browser = Browser::new(&app);
    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let cookie = browser.cookie.clone().expect("a session cookie");
    let origin = browser.origin();
    let csrf = browser.get("/").await.csrf();
    let sign_out = async {
        browser
            .post_form("/logout", &[("csrf", &csrf)], Some(&origin))
            .await
            .assert_status(303);
    };
    let took = stream_ends_after(&app, &[("cookie", &cookie)], sign_out).await;
    assert!(took < Duration::from_millis(2_500), "{took:?}");
}

#[tokio::test]
async fn a_request_waiting_with_a_revoked_key_is_refused_and_never_granted() {
    let app = spawn_app().await;
    let (_, holder) = app
        .create_key(json!({"name": "holder", "roles": ["client", "reader"]}))
        .await;
    let (waiter_id, waiter) = app
        .create_key(json!({"name": "waiter", "roles": ["client"]}))
        .await;
    let held = app.with_key(&holder).lease("jobs", json!({})).await;
    let waiting = app.with_key(&waiter).spawn_waiter("jobs", 20_000);
    app.wait_for_waiters(1).await;
    app.revoke_key(&waiter_id).await;
    let revoked_at = tokio::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered within 5 s of the revocation")
        .expect("the waiter task");
    reply.assert_problem(401, "api_key_invalid");
    assert!(revoked_at.elapsed() < Duration::from_millis(2_500));
    // The holder lets go: nobody gets the lock in the revoked waiter's name.
    app.with_key(&holder)
        .release(&held, true)
        .await
        .assert_status(200);
    let lock = app.with_key(&holder).inspect_lock("jobs").await;
    assert_eq!(
        lock.body["holders"].as_array().map(Vec::len),
        Some(0),
        "{}",
        lock.body
    );
}
