//! What `deploy/kubernetes` promises of the binary, checked without a cluster: the readiness
//! probe (`/readyz`) answers 503 while Redis is away and the liveness probe (`/healthz`) 200
//! (so Kubernetes takes the pod out of the Service instead of restarting it), and on SIGTERM
//! the process answers its waiting requests and exits well within the Deployment's
//! `terminationGracePeriodSeconds` less its preStop sleep. The manifests themselves are
//! validated by `.ci/kubernetes`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::RedisServer;
use crate::helpers::serve::{Serve, http_client, private_dir, terminate};

/// `name: N` of the Deployment (the first such line), as a duration in seconds.
fn manifest_seconds(name: &str) -> Duration {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/base/deployment.yaml"
    );
    let text = std::fs::read_to_string(path).expect("deployment.yaml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("{name} in deployment.yaml"));
    let value = line.split(':').nth(1).expect("a value").trim();
    Duration::from_secs(value.parse().expect("whole seconds"))
}

async fn status(http: &reqwest::Client, serve: &Serve, path: &str) -> u16 {
    http.get(serve.url(path))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn readiness_fails_while_redis_is_away_and_liveness_holds() {
    let mut redis = RedisServer::start();
    let data = private_dir();
    let serve = Serve::start_with(data.path(), &["--redis-url", &redis.url()]);
    let http = http_client();
    assert_eq!(status(&http, &serve, "/readyz").await, 200);

    redis.stop();
    // The readiness probe's own period (5 s) is the pace Kubernetes asks at; the server must
    // say 503 within a couple of those.
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(&http, &serve, "/readyz").await != 503 {
        assert!(
            Instant::now() < deadline,
            "/readyz still not 503 with Redis gone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status(&http, &serve, "/healthz").await,
        200,
        "liveness holds"
    );

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while status(&http, &serve, "/readyz").await != 200 {
        assert!(
            Instant::now() < deadline,
            "/readyz not 200 again with Redis back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigterm_answers_waiters_and_exits_within_the_grace_period() {
    let redis = RedisServer::start();
    let data = private_dir();
    let mut serve = Serve::start_with(data.path(), &["--redis-url", &redis.url()]);
    let http = http_client();
    let held = http
        .post(serve.url("/v1/locks/deploy/leases"))
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(held.status(), 201);
    // A waiter that would wait a minute, longer than the grace period.
    let waiter = tokio::spawn({
        let (http, url) = (
            http.clone(),
            serve.url("/v1/locks/deploy/leases?wait_ms=60000"),
        );
        async move { http.post(url).send().await.expect("the waiter's answer") }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock: serde_json::Value = http
            .get(serve.url("/v1/locks/deploy"))
            .send()
            .await
            .expect("inspect")
            .json()
            .await
            .expect("json");
        if lock["waiting_count"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let budget = manifest_seconds("terminationGracePeriodSeconds") - manifest_seconds("seconds");
    let stopping = Instant::now();
    let exit = tokio::task::spawn_blocking(move || terminate(&mut serve.child, budget))
        .await
        .expect("terminate");
    let took = stopping.elapsed();
    assert!(exit.success(), "exit status {exit}");
    let answer = waiter.await.expect("the waiter");
    assert_eq!(answer.status(), 503, "the waiter is answered, not cut off");
    let body: serde_json::Value = answer.json().await.expect("a problem");
    assert_eq!(body["code"], "shutting_down");
    eprintln!("SIGTERM to exit: {took:?} (budget {budget:?})");
}
