//! `GET /metrics` moves as a scripted sequence of acquire, contend, wait, release, heartbeat
//! and expiry says it should.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{AppOptions, Lease, TestApp, spawn_app, spawn_app_with};

/// The metrics text.
async fn scrape(app: &TestApp) -> String {
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    response.text().await.expect("text")
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// Waits (bounded) until Redis has expired `key`.
async fn until_expired(app: &TestApp, key: &str) {
    let mut conn = app.redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if !exists {
            return;
        }
        assert!(Instant::now() < deadline, "{key} did not expire");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn metrics_follow_acquire_contend_wait_release_heartbeat_and_expiry() {
    let app = spawn_app().await;
    let acquisitions = "leasehold_acquisitions_total";
    let before = scrape(&app).await;
    assert_eq!(sample(&before, acquisitions, &[]), 0.0);
    assert_eq!(sample(&before, "leasehold_leases_active", &[]), 0.0);

    the_sequence(&app).await;
    let text = scrape(&app).await;
    lease_metrics_follow(&text, acquisitions);
    redis_and_http_metrics_follow(&text);
}

/// Acquire, contend, wait (granted, then in vain), release, heartbeat (in time, then too
/// late for a lease that expired).
async fn the_sequence(app: &TestApp) {
    // Acquire, then someone contends without waiting.
    let first = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    // Someone waits and gets the lock when the first lease is released.
    let waiter = app.spawn_waiter("jobs", 10_000);
    app.wait_for_waiters(1).await;
    assert_eq!(
        sample(&scrape(app).await, "leasehold_waiting_requests", &[]),
        1.0
    );
    app.release(&first, true).await.assert_status(200);
    let second = Lease::from_reply("jobs", &waiter.await.expect("waiter"));
    // Someone waits in vain.
    app.acquire_with("jobs", 100, json!({}), None)
        .await
        .assert_problem(409, "lock_held");
    // A heartbeat in time.
    app.heartbeat(&second, json!({})).await.assert_status(200);
    // A lease that expires, and its heartbeat that comes too late.
    let short = app.lease("short", json!({"ttl_ms": 100})).await;
    until_expired(app, "short").await;
    app.heartbeat(&short, json!({}))
        .await
        .assert_problem(410, "lease_lost");
}

/// What the sequence counted of leases: `acquisitions` by outcome, waits, the hand-off,
/// holds, heartbeats, expiries, and what is live now.
fn lease_metrics_follow(text: &str, acquisitions: &str) {
    let reentrant = ("kind", "reentrant");
    assert_eq!(
        sample(text, acquisitions, &[reentrant, ("outcome", "granted")]),
        3.0,
        "{text}"
    );
    assert_eq!(sample(text, acquisitions, &[("outcome", "contended")]), 1.0);
    assert_eq!(sample(text, acquisitions, &[("outcome", "timed_out")]), 1.0);
    // Two requests waited: one was granted, one timed out.
    let waits = "leasehold_acquire_wait_seconds_count";
    assert_eq!(sample(text, waits, &[("outcome", "granted")]), 1.0);
    assert_eq!(sample(text, waits, &[("outcome", "timed_out")]), 1.0);
    // The waiter was handed the lock by the release's unlock message.
    assert_eq!(
        sample(
            text,
            "leasehold_handoff_seconds_count",
            &[reentrant, ("wake", "message")]
        ),
        1.0
    );
    assert_eq!(
        sample(text, "leasehold_lease_hold_seconds_count", &[reentrant]),
        1.0
    );
    assert_eq!(
        sample(text, "leasehold_heartbeat_slack_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        sample(
            text,
            "leasehold_heartbeats_late_total",
            &[("outcome", "expired")]
        ),
        1.0
    );
    assert_eq!(sample(text, "leasehold_lease_expirations_total", &[]), 1.0);
    // Only the waiter's lease is still live ("short" expired, the first was released).
    assert_eq!(sample(text, "leasehold_leases_active", &[]), 1.0);
    assert_eq!(sample(text, "leasehold_waiting_requests", &[]), 0.0);
}

/// What the sequence counted of Redis and HTTP; no lock name became a label value.
fn redis_and_http_metrics_follow(text: &str) {
    assert!(
        sample(
            text,
            "leasehold_redis_script_duration_seconds_count",
            &[("script", "acquire")]
        ) >= 5.0
    );
    assert_eq!(
        sample(text, "leasehold_redis_script_errors_total", &[]),
        0.0
    );
    assert_eq!(
        sample(text, "leasehold_subscriber_reconnects_total", &[]),
        0.0
    );
    assert_eq!(
        sample(
            text,
            "leasehold_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/v1/locks/{name}/leases"),
                ("status", "201")
            ]
        ),
        3.0
    );
    assert_eq!(
        sample(
            text,
            "leasehold_http_requests_total",
            &[("route", "/v1/locks/{name}/leases"), ("status", "409")]
        ),
        2.0
    );
    // No lock name became a label value.
    assert!(!text.contains("jobs") && !text.contains("short"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"));
}

#[tokio::test]
async fn lock_names_are_labels_only_when_configured() {
    let app = spawn_app_with(AppOptions {
        metrics_lock_names: true,
        ..AppOptions::default()
    })
    .await;
    app.lease("jobs", json!({})).await;
    let text = scrape(&app).await;
    assert_eq!(
        sample(
            &text,
            "leasehold_acquisitions_total",
            &[("lock", "jobs"), ("outcome", "granted")]
        ),
        1.0,
        "{text}"
    );
}

#[tokio::test]
async fn redis_outages_count_as_script_errors_and_subscriber_reconnects() {
    let mut app = spawn_app().await;
    app.redis.stop();
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(503, "redis_unavailable");
    app.redis.restart();
    app.wait_until_ready().await;
    let text = scrape(&app).await;
    assert!(
        sample(
            &text,
            "leasehold_redis_script_errors_total",
            &[("script", "acquire")]
        ) >= 1.0,
        "{text}"
    );
    assert!(sample(&text, "leasehold_subscriber_reconnects_total", &[]) >= 1.0);
    assert_eq!(
        sample(
            &text,
            "leasehold_acquisitions_total",
            &[("outcome", "failed")]
        ),
        1.0
    );
}

#[tokio::test]
async fn operator_metrics_cover_redis_the_subscriber_the_oldest_hold_and_every_waiter() {
    let app = spawn_app().await;
    app.wait_until_ready().await;
    let text = scrape(&app).await;
    assert_eq!(sample(&text, "leasehold_redis_up", &[]), 1.0, "{text}");
    assert_eq!(sample(&text, "leasehold_subscriber_connected", &[]), 1.0);
    assert_eq!(
        sample(&text, "leasehold_subscriber_unlock_patterns", &[]),
        0.0,
        "nobody waits: no unlock patterns"
    );
    assert_eq!(
        sample(
            &text,
            "leasehold_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(sample(&text, "process_resident_memory_bytes", &[]) > 0.0);
    assert!(text.contains("process_cpu_seconds_total "), "{text}");
    // Counters alert rules rate() over exist before their first event.
    assert!(
        text.contains("leasehold_acquisitions_total{kind=\"write\",outcome=\"timed_out\"} 0"),
        "{text}"
    );
    assert!(text.contains("leasehold_heartbeats_late_total{outcome=\"expired\"} 0"));
    assert_eq!(text.matches("# EOF").count(), 1);
    assert!(text.ends_with("# EOF\n"));

    app.lease("jobs", json!({"holder": "old", "ttl_ms": 60_000}))
        .await;
    let _waiter = app.spawn_waiter("jobs", 20_000);
    app.wait_for_waiters(1).await;
    // The waiter's instance listens for unlock messages now (it arms them as it parks).
    let deadline = Instant::now() + Duration::from_secs(5);
    while sample(
        &scrape(&app).await,
        "leasehold_subscriber_unlock_patterns",
        &[],
    ) != 1.0
    {
        assert!(
            Instant::now() < deadline,
            "the waiter's instance never listened for unlock messages"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A census is taken at most every 10 s: a fresh instance on the same Redis takes one now.
    let peer = app.spawn_peer().await;
    let text = scrape(&peer).await;
    assert_eq!(
        sample(&text, "leasehold_subscriber_unlock_patterns", &[]),
        0.0,
        "nobody waits on the peer"
    );
    assert!(
        sample(&text, "leasehold_oldest_hold_age_seconds", &[]) > 0.0,
        "{text}"
    );
    assert_eq!(sample(&text, "leasehold_waiters", &[]), 1.0, "{text}");
    assert_eq!(sample(&text, "leasehold_live_locks", &[]), 1.0);
    assert!(
        !text.contains("leasehold_lock_waiters{"),
        "no lock names by default"
    );

    let named = app
        .spawn_peer_with(AppOptions {
            metrics_lock_names: true,
            ..AppOptions::default()
        })
        .await;
    let text = scrape(&named).await;
    assert_eq!(
        sample(&text, "leasehold_lock_waiters", &[("lock", "jobs")]),
        1.0,
        "{text}"
    );
    assert!(
        sample(
            &text,
            "leasehold_lock_hold_age_seconds",
            &[("lock", "jobs")]
        ) > 0.0
    );
}

#[tokio::test]
async fn redis_down_reads_zero_on_redis_up() {
    let mut app = spawn_app().await;
    app.redis.stop();
    let text = scrape(&app).await;
    assert_eq!(sample(&text, "leasehold_redis_up", &[]), 0.0, "{text}");
}

#[tokio::test]
async fn requests_the_front_door_refuses_are_counted_too() {
    let app = spawn_app().await;
    // A cross-site write: refused before any handler runs, still one request of its route.
    let refused = app
        .http
        .post(app.url("/v1/locks/jobs/leases"))
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "cors")
        .json(&json!({}))
        .send()
        .await
        .expect("request");
    assert_eq!(refused.status(), 403);
    let text = scrape(&app).await;
    assert_eq!(
        sample(
            &text,
            "leasehold_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/v1/locks/{name}/leases"),
                ("status", "403")
            ]
        ),
        1.0,
        "{text}"
    );
}

#[tokio::test]
async fn election_metrics_count_terms_leaderless_time_and_the_line() {
    use crate::dashboard::elections::{call, stand, until_journaled};
    let app = spawn_app_with(AppOptions {
        metrics_lock_names: true,
        ..AppOptions::default()
    })
    .await;
    // A leader that asked for a lock-delay, and a candidate in line.
    app.send(
        app.http
            .post(app.url("/v1/elections/scheduler/candidates"))
            .json(
                &json!({"value": "a", "holder": "node-a", "ttl_ms": 60_000, "lock_delay_ms": 700}),
            ),
    )
    .await
    .assert_status(201);
    let next = stand(&app, "scheduler", "node-b", "b").await;
    until_journaled(&app, "scheduler").await;
    let of = [("election", "scheduler")];
    let text = scrape(&app).await;
    assert_eq!(
        sample(&text, "leasehold_election_terms_started_total", &of),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "leasehold_election_candidates_waiting", &of),
        1.0
    );
    assert_eq!(
        sample(&text, "leasehold_election_leaderless_seconds_total", &of),
        0.0
    );

    // An admin ends the term: nobody leads for the lock-delay, then the next candidate does.
    app.admin(
        reqwest::Method::DELETE,
        "/v1/admin/elections/scheduler?reason=metrics",
        None,
    )
    .await
    .assert_status(200);
    let polled = call(
        &app,
        reqwest::Method::GET,
        &format!("{}?wait_ms=5000", next.location),
        &next,
    )
    .await;
    polled.assert_status(200);
    let text = scrape(&app).await;
    assert_eq!(
        sample(&text, "leasehold_election_terms_started_total", &of),
        2.0,
        "{text}"
    );
    let leaderless = sample(&text, "leasehold_election_leaderless_seconds_total", &of);
    assert!(
        (0.6..5.0).contains(&leaderless),
        "nobody led for the lock-delay: {leaderless}"
    );
    assert_eq!(
        sample(&text, "leasehold_election_candidates_waiting", &of),
        0.0
    );
    // Scraped again: nothing counted twice.
    let again = scrape(&app).await;
    assert_eq!(
        sample(&again, "leasehold_election_terms_started_total", &of),
        2.0
    );
}
