//! An election's observers: each follows one election's `observe` stream through a random
//! instance, records every event it is told, and drops the connection now and then (after a
//! few events, or a few seconds, or when an instance goes away), resuming with the last
//! `Last-Event-ID` it saw, as a client resumes; now and then it starts afresh (a new stream
//! as far as the checker's order goes). The checker (`check/observers.rs`) reads the events
//! of each stream in order against the terms the candidates were granted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::Shared;
use crate::history::{Family, Outcome, Request};

/// Observers per election name.
const PER_NAME: usize = 2;
/// Observers are recorded as clients from here on (apart from the candidates).
pub const OBSERVER_CLIENTS: usize = 10_000;

/// Starts the run's observers (none unless elections are among its families).
pub fn spawn_observers(shared: &Arc<Shared>, seed: u64) -> Vec<JoinHandle<()>> {
    if !shared.plan.families.contains(&Family::Election) {
        return Vec::new();
    }
    let names = shared.plan.names(Family::Election);
    (0..names.len() * PER_NAME)
        .map(|i| {
            let observer = Observer {
                id: i,
                name: names[i % names.len()].clone(),
                shared: shared.clone(),
                rng: StdRng::seed_from_u64(seed.wrapping_mul(7_919).wrapping_add(i as u64)),
            };
            tokio::spawn(observer.run())
        })
        .collect()
}

struct Observer {
    id: usize,
    name: String,
    shared: Arc<Shared>,
    rng: StdRng,
}

impl Observer {
    async fn run(mut self) {
        let http = leasehold::client::http_builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("HTTP client");
        let mut stream = 0u64;
        let mut last_id: Option<String> = None;
        while self.shared.running.load(Ordering::Relaxed) {
            if last_id.is_none() || self.rng.random_bool(0.1) {
                stream += 1;
                last_id = None;
            }
            self.connection(&http, stream, &mut last_id).await;
            let nap = self.rng.random_range(0..=300);
            tokio::time::sleep(Duration::from_millis(nap)).await;
        }
    }

    /// One connection: events until it is dropped. A stream that had no id yet starts
    /// afresh next time (nothing to resume from).
    async fn connection(
        &mut self,
        http: &reqwest::Client,
        stream: u64,
        last_id: &mut Option<String>,
    ) {
        let n = self.shared.targets.len().max(1);
        let instance = self.rng.random_range(0..n);
        let Some(url) = self.shared.targets.url(instance) else {
            return;
        };
        let mut req = http.get(format!("{url}/v1/elections/{}/observe", self.name));
        let resumed_from = last_id.clone();
        if let Some(id) = &resumed_from {
            req = req.header("last-event-id", id);
        }
        let Ok(resp) = req.send().await else { return };
        if resp.status() != 200 {
            return;
        }
        let drop_after = self.rng.random_range(1..=12);
        let until =
            tokio::time::Instant::now() + Duration::from_millis(self.rng.random_range(300..=5_000));
        let mut events = resp.bytes_stream().eventsource();
        for _ in 0..drop_after {
            if !self.shared.running.load(Ordering::Relaxed) {
                return;
            }
            let Ok(Some(Ok(event))) = tokio::time::timeout_at(until, events.next()).await else {
                return;
            };
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            let id = (!event.id.is_empty()).then(|| event.id.clone());
            let recorder = &self.shared.recorder;
            recorder.record(
                OBSERVER_CLIENTS + self.id,
                instance,
                &self.name,
                Family::Election,
                recorder.now(),
                Request::Observe {
                    observer: self.id,
                    stream,
                    resumed_from: resumed_from.clone(),
                },
                Outcome::Seen {
                    event: event.event.clone(),
                    id: id.clone(),
                    term: data["term"].as_u64().unwrap_or(0),
                    value: data["value"].as_str().map(str::to_owned),
                },
            );
            if id.is_some() {
                *last_id = id;
            }
        }
    }
}
