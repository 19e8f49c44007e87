//! The parked scenario: many waiting requests on few held locks (memory, idle CPU, Redis use,
//! drain time).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::leases::{acquire, release};
use crate::light_client;
use crate::{client, percentiles, process_stats};

async fn waiting_requests(http: &reqwest::Client, url: &str) -> u64 {
    match http.get(format!("{url}/readyz")).send().await {
        Ok(r) => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["waiting_requests"].as_u64())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// The parked-waiters scenario's settings.
pub(super) struct Waiting {
    pub(super) waiters: usize,
    pub(super) locks: usize,
    /// The server's pid, for RSS and CPU.
    pub(super) pid: u32,
    pub(super) http2: bool,
    /// How long the server's CPU is watched while everyone waits.
    pub(super) idle: Duration,
}

pub(super) async fn parked(
    url: &str,
    redis_url: Option<&str>,
    setup: &Waiting,
) -> anyhow::Result<Value> {
    let &Waiting {
        waiters,
        locks,
        pid,
        http2,
        idle: idle_window,
    } = setup;
    let http = client();
    let (rss_before, _) = process_stats(pid)?;
    let mut holders = Vec::new();
    for l in 0..locks {
        holders.push(
            acquire(
                &http,
                url,
                &format!("parked-{l}"),
                json!({"ttl_ms": 300_000}),
                0,
            )
            .await?,
        );
    }
    // The waiters use the light client (`scenarios/light_client.rs`): each one's release is
    // part of the drain measured. HTTP/2: the server allows 200 concurrent streams per
    // connection, so the waiters are spread over connections of 150.
    let authority = light_client::authority(url)?;
    let mut shared = Vec::new();
    if http2 {
        for _ in 0..waiters.div_ceil(150) {
            shared.push(light_client::Conn::open_h2(&authority).await?);
        }
    }
    let answered = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let mut tasks = Vec::new();
    for w in 0..waiters {
        let conn = shared
            .get(w % shared.len().max(1))
            .and_then(light_client::Conn::share);
        let (authority, answered) = (authority.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = match conn {
                Some(conn) => conn,
                None => light_client::Conn::open(&authority).await?,
            };
            let lock = format!("parked-{}", w % locks);
            let held = conn.acquire(&lock, r#"{"ttl_ms":30000}"#, 110_000).await?;
            answered.lock().expect("answered").push(Instant::now());
            conn.release(&held).await
        }));
    }
    // Everyone parked (bounded).
    let parking_started = Instant::now();
    let parked = wait_parked(&http, url, waiters).await;
    let parking_secs = parking_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_parked, cpu0) = process_stats(pid)?;
    tokio::time::sleep(idle_window).await;
    let (_, cpu1) = process_stats(pid)?;
    let idle_cpu_percent = (cpu1 - cpu0) / idle_window.as_secs_f64() * 100.0;
    let redis_info = match redis_url {
        Some(redis_url) => redis_subscriptions(redis_url).await?,
        None => Value::Null,
    };
    let released_at = Instant::now();
    for held in &holders {
        release(&http, url, held).await?;
    }
    let mut failures = 0;
    for task in tasks {
        if !matches!(task.await, Ok(Ok(()))) {
            failures += 1;
        }
    }
    let mut answers: Vec<Duration> = answered
        .lock()
        .expect("answered")
        .iter()
        .map(|t| t.saturating_duration_since(released_at))
        .collect();
    let drained = answers.iter().max().copied();
    Ok(json!({
        "scenario": "parked", "protocol": if http2 { "h2c" } else { "http/1.1" },
        "client_connections": if http2 { shared.len() } else { waiters },
        "waiters": waiters, "locks": locks, "parked": parked,
        "parking_seconds": parking_secs,
        "rss_mb_before": rss_before, "rss_mb_parked": rss_parked,
        "kb_per_waiter": (rss_parked - rss_before) * 1024.0 / parked.max(1) as f64,
        "idle_seconds": idle_window.as_secs_f64(), "idle_cpu_percent": idle_cpu_percent,
        "redis": redis_info, "drain_seconds": drained.map(|d| d.as_secs_f64()),
        "answered_after_release_ms": percentiles(&mut answers), "failures": failures,
    }))
}

/// What Redis holds for the parked waiters: its connections and subscriptions.
async fn redis_subscriptions(redis_url: &str) -> anyhow::Result<Value> {
    let client = redis::Client::open(redis_url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await?;
    let numpat: i64 = redis::cmd("PUBSUB")
        .arg("NUMPAT")
        .query_async(&mut conn)
        .await?;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut conn)
        .await?;
    // Our own connection is one of them.
    Ok(
        json!({"connections": clients.lines().count().saturating_sub(1), "pattern_subscriptions": numpat,
               "channel_subscriptions": channels.len()}),
    )
}

/// Waits (up to a minute) until the server counts `waiters` waiting requests; returns how
/// many it counted last.
async fn wait_parked(http: &reqwest::Client, url: &str, waiters: usize) -> u64 {
    let parking_started = Instant::now();
    let mut parked = 0;
    while parking_started.elapsed() < Duration::from_secs(60) {
        parked = waiting_requests(http, url).await;
        if parked as usize >= waiters {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    parked
}
