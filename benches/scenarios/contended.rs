//! The contended scenario: clients compete for one lock, with the FIFO check on the server's
//! events.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::leases::{acquire, release};
use crate::{client, percentiles};

/// Grant and release times by fencing token, and the grant order the server's events show.
#[derive(Default)]
struct Handoffs {
    /// By fencing token: when, and to which client.
    granted: HashMap<u64, (Instant, usize)>,
    released: HashMap<u64, Instant>,
}

pub(super) async fn contended(
    url: &str,
    redis_url: Option<&str>,
    clients: usize,
    kind: &str,
    hold: Duration,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let lock = format!("contended-{kind}-{clients}-{}", hold.as_millis());
    // The latest fencing token granted: a client that released stands back until another
    // client has the lock (bounded), so every handoff measured is a real transfer to a waiter.
    let (granted_tx, granted_rx) = tokio::sync::watch::channel(0u64);
    let granted_tx = Arc::new(granted_tx);
    // The server's own account of queue and grant order, for the FIFO check.
    let events = match redis_url {
        Some(redis_url) => Some(watch_events(redis_url, &lock).await?),
        None => None,
    };
    let log = Arc::new(Mutex::new(Handoffs::default()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client_id in 0..clients {
        let (url, lock, log, kind) = (url.to_owned(), lock.clone(), log.clone(), kind.to_owned());
        let (granted_tx, mut granted_rx) = (granted_tx.clone(), granted_rx.clone());
        tasks.push(tokio::spawn(async move {
            let http = client();
            while Instant::now() < deadline {
                let held = acquire(
                    &http,
                    &url,
                    &lock,
                    json!({"kind": kind, "ttl_ms": 30000}),
                    30_000,
                )
                .await?;
                log.lock()
                    .expect("log")
                    .granted
                    .insert(held.fence, (Instant::now(), client_id));
                granted_tx.send_replace(held.fence);
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                release(&http, &url, &held).await?;
                log.lock()
                    .expect("log")
                    .released
                    .insert(held.fence, Instant::now());
                let stand_back = granted_rx.wait_for(|latest| *latest > held.fence);
                let _ = tokio::time::timeout(Duration::from_secs(1), stand_back).await;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    // A handoff is the lock passing to another client; a client that re-takes the lock it
    // just released hands nothing over (and says how fair the lock is).
    let (mut latencies, grants, self_regrants) = handoffs(&log.lock().expect("log"));
    let inversions = match events {
        Some((seen, reader)) => {
            // Let the last events arrive, then stop listening.
            tokio::time::sleep(Duration::from_millis(300)).await;
            reader.abort();
            let seen = seen.lock().expect("events").clone();
            Some(json!({"count": fifo_inversions(&seen), "events_seen": seen.len()}))
        }
        None => None,
    };
    Ok(json!({
        "scenario": "contended", "kind": kind, "clients": clients, "seconds": secs,
        "hold_ms": hold.as_millis() as u64,
        "grants": grants, "grants_per_s": grants as f64 / secs,
        "self_regrants": self_regrants, "handoff_ms": percentiles(&mut latencies),
        "fifo_inversions": inversions,
    }))
}

/// (handoff latencies, grants, grants to the client that held it just before): a handoff is
/// the lock passing to another client, from the release's answer to the next grant's.
fn handoffs(log: &Handoffs) -> (Vec<Duration>, usize, u64) {
    let mut fences: Vec<u64> = log.granted.keys().copied().collect();
    fences.sort_unstable();
    let mut lat = Vec::new();
    let mut same = 0u64;
    // Fences grow with every grant (not by one: they are floored by Redis's clock), so
    // the previous holder is the previous fence in order.
    for pair in fences.windows(2) {
        let (previous, f) = (&pair[0], &pair[1]);
        let (Some((at, who)), Some((_, before)), Some(released)) = (
            log.granted.get(f),
            log.granted.get(previous),
            log.released.get(previous),
        ) else {
            continue;
        };
        if who == before {
            same += 1;
        } else {
            lat.push(at.saturating_duration_since(*released));
        }
    }
    (lat, fences.len(), same)
}

/// The events of one lock, as (Redis time in µs, type, lease_id), in the order they arrived.
type EventLog = Arc<Mutex<Vec<(u64, String, String)>>>;

/// Collects one lock's events until the returned task is aborted. Instances publish their
/// events in batches (a JSON array per message; a single object from older servers), in the
/// order each instance learnt of them, so [`fifo_inversions`] orders them by Redis's clock.
async fn watch_events(
    redis_url: &str,
    lock: &str,
) -> anyhow::Result<(EventLog, tokio::task::JoinHandle<()>)> {
    let client = redis::Client::open(redis_url)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe("leasehold:events").await?;
    let lock = lock.to_owned();
    let seen: EventLog = Arc::default();
    let sink = seen.clone();
    let reader = tokio::spawn(async move {
        let mut stream = pubsub.into_on_message();
        while let Some(msg) = stream.next().await {
            let Ok(payload) = msg.get_payload::<String>() else {
                continue;
            };
            let events = match serde_json::from_str::<Value>(&payload) {
                Ok(Value::Array(all)) => all,
                Ok(one) => vec![one],
                Err(_) => continue,
            };
            let mut sink = sink.lock().expect("events");
            for event in events.iter().filter(|e| e["lock"] == lock.as_str()) {
                let at_us = event["at_us"]
                    .as_u64()
                    .unwrap_or_else(|| event["at_ms"].as_u64().unwrap_or(0) * 1000);
                let kind = event["type"].as_str().unwrap_or_default().to_owned();
                let id = event["lease_id"].as_str().unwrap_or_default().to_owned();
                sink.push((at_us, kind, id));
            }
        }
    });
    Ok((seen, reader))
}

/// Grants that skipped a live waiter queued before them (0 for a strict FIFO lock), with the
/// events in Redis's order (a stable sort: events of one instant keep their arrival order).
fn fifo_inversions(events: &[(u64, String, String)]) -> u64 {
    let mut events = events.to_vec();
    events.sort_by_key(|(at_us, _, _)| *at_us);
    let mut pending: VecDeque<String> = VecDeque::new();
    let mut gone: HashSet<String> = HashSet::new();
    let mut inversions = 0;
    for (_, kind, id) in &events {
        match kind.as_str() {
            "queued" => pending.push_back(id.clone()),
            "left" | "expired" => {
                gone.insert(id.clone());
            }
            "granted" | "acquired" => {
                while pending.front().is_some_and(|head| gone.contains(head)) {
                    pending.pop_front();
                }
                match pending.iter().position(|p| p == id) {
                    Some(0) => {
                        pending.pop_front();
                    }
                    Some(i) => {
                        inversions += 1;
                        pending.remove(i);
                    }
                    // Granted without queueing while others waited: barging.
                    None if !pending.is_empty() => inversions += 1,
                    None => {}
                }
            }
            _ => {}
        }
    }
    inversions
}
