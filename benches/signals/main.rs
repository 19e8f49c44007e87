//! Holder signals (issue 56), measured against a real `leasehold serve` process and its own
//! redis-server (Unix socket), on loopback; bounded in count and time. LEASES leases (default
//! 200) are taken at once with a TTL of TTL_MS (default 3000) and watched with a slack of
//! SLACK_MS (default 1000); nobody heartbeats them:
//!
//! 1. **`expiring` accuracy**: when each watch told `expiring`, against when it was due (the
//!    lease's expiry minus the slack, the expiry as the acquire's answer gave it, on the
//!    server's clock): delivered − due, p50/p99/max.
//! 2. **Loss notice**: when each watch told `lost` (reason `expired`) against the expiry:
//!    how long after its lease really ended a holder that had stopped (a SIGSTOPped process,
//!    a long GC pause) is told, as soon as it reads again.
//!
//! `cargo bench --bench signals` (env: LEASES, TTL_MS, SLACK_MS)

#[path = "../election/server.rs"]
#[allow(dead_code)] // (The election bench reads the server's memory; this one does not.)
mod server;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::server::{Server, env_u64, percentiles};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (leases, ttl_ms, slack_ms) = (
        env_u64("LEASES", 200),
        env_u64("TTL_MS", 3000),
        env_u64("SLACK_MS", 1000),
    );
    let server = Server::start().await?;
    let http = leasehold::client::http_builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let base = server.base.clone();
    let watches = (0..leases).map(|n| {
        let (http, base) = (http.clone(), base.clone());
        tokio::spawn(async move { one(&http, &base, n, ttl_ms, slack_ms).await })
    });
    let mut early_late = Vec::new();
    let mut notice = Vec::new();
    let mut before_due = 0u32;
    for watch in futures_util::future::join_all(watches).await {
        let (expiring_after_due, lost_after_expiry) = watch??;
        match expiring_after_due {
            Some(d) => early_late.push(d),
            None => before_due += 1,
        }
        notice.push(lost_after_expiry);
    }
    println!(
        "signals: {leases} leases, TTL {ttl_ms} ms, slack {slack_ms} ms, one server on loopback"
    );
    println!("expiring: delivered - due: {}", percentiles(early_late));
    println!("expiring: delivered before due: {before_due}");
    println!(
        "loss notice: lost delivered - expiry: {}",
        percentiles(notice)
    );
    server.stop().await;
    Ok(())
}

/// Wall-clock milliseconds (the server's clock is Redis's, on the same machine).
fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// One lease: (how long after due `expiring` came, or None if before; how long after the
/// expiry `lost` came).
async fn one(
    http: &reqwest::Client,
    base: &str,
    n: u64,
    ttl_ms: u64,
    slack_ms: u64,
) -> anyhow::Result<(Option<Duration>, Duration)> {
    let granted: Value = http
        .post(format!("{base}/v1/locks/signals-{n}/leases"))
        .json(&json!({"ttl_ms": ttl_ms}))
        .send()
        .await?
        .json()
        .await?;
    let expires = humantime::parse_rfc3339(granted["expires_at"].as_str().unwrap_or(""))?
        .duration_since(UNIX_EPOCH)?
        .as_millis();
    let expires_ms = u64::try_from(expires)?;
    let (id, token) = (
        granted["lease_id"].as_str().unwrap_or(""),
        granted["token"].as_str().unwrap_or(""),
    );
    let response = http
        .get(format!(
            "{base}/v1/locks/signals-{n}/leases/{id}/watch?expiring_slack_ms={slack_ms}"
        ))
        .bearer_auth(token)
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "watch: {}", response.status());
    let mut events = eventsource_stream::Eventsource::eventsource(response.bytes_stream());
    let mut expiring = None;
    while let Some(event) = events.next().await {
        let event = event?;
        let at = now_ms();
        match event.event.as_str() {
            "expiring" => {
                let due = expires_ms - slack_ms;
                expiring = Some(at.checked_sub(due).map(Duration::from_millis));
            }
            "lost" => {
                let after = Duration::from_millis(at.saturating_sub(expires_ms));
                return Ok((expiring.flatten(), after));
            }
            _ => {}
        }
    }
    anyhow::bail!("the watch of lease {n} ended without lost")
}
