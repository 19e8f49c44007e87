//! "Why am I waiting?" (issue 56): how close `estimated_wait_ms` comes to the wait that
//! follows, on a synthetic workload against a real `leasehold serve` and its own
//! redis-server, on loopback; bounded in count and time.
//!
//! Holds last a random HOLD_MIN_MS..=HOLD_MAX_MS (default 200..=400) each. Two workloads:
//! 1. **Plain lock**: 2 workers take turns on one exclusive lock. Each asks without waiting;
//!    refused (409), it notes `estimated_wait_ms`, then asks again with a wait and times the
//!    grant; it holds, releases, and pauses 0–20 ms before asking again.
//! 2. **Fair lock**: 4 workers on one fair lock. Each asks without waiting; given a ticket
//!    (202: `position`, `estimated_wait_ms`), it polls the ticket with a wait until its turn,
//!    timing it from the 202; then holds and releases.
//!
//! Reported per workload: the estimates taken (those with fewer than 3 holds behind them have
//! none), and the relative error |estimate − actual| / actual: median, p90, max. The issue's
//! goal: a median of at most 25 %.
//!
//! `cargo bench --bench wait_estimate` (env: ROUNDS per worker, default 30; HOLD_MIN_MS,
//! HOLD_MAX_MS)

#[path = "../election/server.rs"]
#[allow(dead_code)] // (Only the server's start, stop and the env reader are used here.)
mod server;

use std::time::{Duration, Instant};

use rand::RngExt as _;
use serde_json::{Value, json};

use crate::server::{Server, env_u64};

/// The workload's shape.
#[derive(Clone, Copy)]
struct Shape {
    rounds: u64,
    hold: (u64, u64),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shape = Shape {
        rounds: env_u64("ROUNDS", 30),
        hold: (env_u64("HOLD_MIN_MS", 200), env_u64("HOLD_MAX_MS", 400)),
    };
    let server = Server::start().await?;
    let http = leasehold::client::http_builder().build()?;
    println!(
        "wait estimate: holds of {}..={} ms, {} rounds per worker, one server on loopback",
        shape.hold.0, shape.hold.1, shape.rounds
    );
    for (label, kind, workers) in [("plain lock", "exclusive", 2), ("fair lock", "fair", 4)] {
        let tasks = (0..workers).map(|w| {
            let (http, base) = (http.clone(), server.base.clone());
            tokio::spawn(async move { worker(&http, &base, kind, w, shape).await })
        });
        let mut errors = Vec::new();
        let mut without = 0;
        for task in futures_util::future::join_all(tasks).await {
            let (errs, none) = task??;
            errors.extend(errs);
            without += none;
        }
        println!("{label}: {}", summary(errors, without));
    }
    server.stop().await;
    Ok(())
}

/// One worker's rounds: the relative errors of its estimates, and how many waits had none.
async fn worker(
    http: &reqwest::Client,
    base: &str,
    kind: &str,
    w: u64,
    shape: Shape,
) -> anyhow::Result<(Vec<f64>, u64)> {
    let lock = format!("{base}/v1/locks/estimate-{kind}/leases");
    let body = json!({"kind": kind, "holder": format!("w{w}"), "ttl_ms": 30_000});
    let (mut errors, mut without) = (Vec::new(), 0);
    for _ in 0..shape.rounds {
        let asked = Instant::now();
        let first = http.post(&lock).json(&body).send().await?;
        let status = first.status().as_u16();
        let answer: Value = first.json().await?;
        let estimate = answer["estimated_wait_ms"].as_u64();
        let granted = match status {
            201 => answer,
            409 => take(http, &lock, &body).await?,
            202 => turn(http, base, kind, &answer).await?,
            other => anyhow::bail!("asked: {other} {answer}"),
        };
        if status != 201 {
            let actual = asked.elapsed().as_secs_f64() * 1000.0;
            match estimate {
                Some(e) => errors.push((e as f64 - actual).abs() / actual.max(1.0)),
                None => without += 1,
            }
        }
        let hold = rand::rng().random_range(shape.hold.0..=shape.hold.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let lease = granted["lease_id"].as_str().unwrap_or_default();
        let token = granted["token"].as_str().unwrap_or_default();
        let released = http
            .delete(format!("{lock}/{lease}"))
            .bearer_auth(token)
            .send()
            .await?;
        anyhow::ensure!(released.status() == 200, "release: {}", released.status());
        let pause = rand::rng().random_range(0..=20);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Ok((errors, without))
}

/// A refused worker asks again, waiting for the lock.
async fn take(http: &reqwest::Client, lock: &str, body: &Value) -> anyhow::Result<Value> {
    let reply = http
        .post(format!("{lock}?wait_ms=30000"))
        .json(body)
        .send()
        .await?;
    anyhow::ensure!(reply.status() == 201, "waited: {}", reply.status());
    Ok(reply.json().await?)
}

/// A ticket polled (waiting) until its turn.
async fn turn(
    http: &reqwest::Client,
    base: &str,
    kind: &str,
    ticket: &Value,
) -> anyhow::Result<Value> {
    let id = ticket["ticket_id"].as_str().unwrap_or_default();
    let token = ticket["token"].as_str().unwrap_or_default();
    let url = format!("{base}/v1/locks/estimate-{kind}/tickets/{id}?wait_ms=4000");
    loop {
        let reply = http.post(&url).bearer_auth(token).send().await?;
        match reply.status().as_u16() {
            201 => {
                // The poll's answer has no token: the ticket's proves the lease.
                let mut granted: Value = reply.json().await?;
                granted["token"] = token.into();
                return Ok(granted);
            }
            202 => {}
            other => anyhow::bail!("poll: {other}"),
        }
    }
}

fn summary(mut errors: Vec<f64>, without: u64) -> String {
    if errors.is_empty() {
        return format!("no estimates ({without} waits without one)");
    }
    errors.sort_by(f64::total_cmp);
    let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize] * 100.0;
    format!(
        "{} estimates ({without} waits without one: fewer than 3 holds yet); relative error \
         median {:.1} %, p90 {:.1} %, max {:.1} %",
        errors.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}
