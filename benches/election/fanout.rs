//! Observe fan-out (the third measurement): `n` observers on one election; the leader
//! proclaims new values; how long until every observer is told each, and what each observer
//! costs the server.

use std::pin::Pin;
use std::time::{Duration, Instant};

use eventsource_stream::{Event, EventStreamError, Eventsource as _};
use futures_util::{Stream, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::server::{Server, percentiles};

/// Proclamations timed.
const CHANGES: usize = 10;

type Events = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// One observer's stream of an election.
pub struct Observer {
    events: Events,
}

pub async fn subscribe(http: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<Observer> {
    let resp = http
        .get(format!("{base}/v1/elections/{name}/observe"))
        .send()
        .await?;
    anyhow::ensure!(resp.status() == 200, "observe: {}", resp.status());
    Ok(Observer {
        events: Box::pin(resp.bytes_stream().eventsource()),
    })
}

impl Observer {
    /// The next event of any kind (`false` when the stream ends).
    pub async fn next_event(&mut self) -> bool {
        matches!(self.events.next().await, Some(Ok(_)))
    }

    /// The next `event: leader`: its term and value (`None` when the stream ends).
    pub async fn next_leader(&mut self) -> Option<(u64, Option<String>)> {
        while let Some(Ok(event)) = self.events.next().await {
            if event.event == "leader" {
                let data: Value = serde_json::from_str(&event.data).ok()?;
                return Some((
                    data["term"].as_u64().unwrap_or(0),
                    data["value"].as_str().map(str::to_owned),
                ));
            }
        }
        None
    }
}

pub async fn run(http: &reqwest::Client, server: &Server, n: usize) -> anyhow::Result<()> {
    let base = &server.base;
    let lead = http
        .post(format!("{base}/v1/elections/fanout/candidates"))
        .json(&json!({"value": "v0", "ttl_ms": 60_000}))
        .send()
        .await?;
    anyhow::ensure!(lead.status() == 201, "campaign: {}", lead.status());
    let lead: Value = lead.json().await?;
    let id = lead["candidate_id"].as_str().unwrap_or_default().to_owned();
    let token = lead["token"].as_str().unwrap_or_default().to_owned();
    let before = server.rss_kib()?;
    // Each observer tells (change, when) for every value it is told, after the first.
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant)>();
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::new();
    let connecting = Instant::now();
    for _ in 0..n {
        // Its own client: one connection per observer, as separate processes would have.
        let http = leasehold::client::http_builder().build()?;
        let (base, tx, ready_tx) = (base.clone(), tx.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let mut observer = subscribe(&http, &base, "fanout").await?;
            observer.next_leader().await;
            let _ = ready_tx.send(());
            while let Some((_, value)) = observer.next_leader().await {
                let at = Instant::now();
                let change = value
                    .as_deref()
                    .and_then(|v| v.strip_prefix('v'))
                    .and_then(|v| v.parse::<usize>().ok());
                if let Some(change) = change {
                    let _ = tx.send((change, at));
                }
            }
            anyhow::Ok(())
        }));
    }
    drop(tx);
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(60), ready_rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("an observer stopped before it was told the leader"))?;
    }
    let connected_in = connecting.elapsed();
    // Settle, then read the server's memory with every observer connected.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.rss_kib()?;
    let mut all_told = Vec::new();
    let mut median_told = Vec::new();
    for change in 1..=CHANGES {
        let proclaimed = http
            .put(format!("{base}/v1/elections/fanout/candidates/{id}/value"))
            .bearer_auth(&token)
            .json(&json!({ "value": format!("v{change}") }))
            .send()
            .await?;
        let at = Instant::now();
        anyhow::ensure!(
            proclaimed.status() == 200,
            "proclaim: {}",
            proclaimed.status()
        );
        let mut told = Vec::with_capacity(n);
        while told.len() < n {
            let (c, when) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("observers stopped"))?;
            if c == change {
                told.push(when.saturating_duration_since(at));
            }
        }
        told.sort_unstable();
        median_told.push(told[n / 2]);
        all_told.push(told[n - 1]);
    }
    for t in tasks {
        t.abort();
    }
    println!("election observe fan-out: {n} observers on one election, {CHANGES} proclamations");
    println!(
        "  all {n} connected and told the leader in {:.0} ms",
        connected_in.as_secs_f64() * 1e3
    );
    println!(
        "  proclaim 200 -> the median observer told: {}",
        percentiles(median_told)
    );
    println!(
        "  proclaim 200 -> every observer told:      {}",
        percentiles(all_told)
    );
    println!(
        "  server RSS {before} KiB -> {after} KiB with {n} observers: {:.1} KiB per observer",
        after.saturating_sub(before) as f64 / n as f64
    );
    Ok(())
}
