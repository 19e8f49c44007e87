//! A holder's own lease watch (`GET .../leases/{id}/watch`, issue 56): a task beside the
//! session reads the stream, records every event in the history, and sets what the holder acts
//! on — `expiring` and `revocation_requested` stop its writes to the fenced resource, a
//! revocation makes it release at once, `lost` ends the hold. The task is the session's
//! only helper: it never blocks the session (it runs apart, and a stream that cannot connect
//! just tries again later), and it ends with the hold (its guard aborts it when dropped).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{Client, Held, Shared};
use crate::history::{Family, Outcome, Request};

/// How long a watch waits for its answer's headers before it tries another instance.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two attempts to open (or reopen) a watch.
const RETRY_NAP: Duration = Duration::from_millis(150);

/// What a lease's watch told its holder so far (times: µs of the run's clock; 0: never).
#[derive(Debug, Default)]
pub(super) struct Signals {
    /// The last `expiring`: it stands until a heartbeat sent after it succeeds.
    expiring_at: AtomicU64,
    /// The first `revocation_requested`: it never stops standing (the deadline holds).
    revoked_at: AtomicU64,
    lost: AtomicBool,
    /// Wakes a napping holder on a revocation or a loss.
    wake: Notify,
}

impl Signals {
    /// Whether the holder may touch the resource, its last renewal sent at `renewed_at`.
    pub(super) fn may_write(&self, renewed_at: u64) -> bool {
        let expiring = self.expiring_at.load(Ordering::Acquire);
        !self.lost() && !self.revoked() && (expiring == 0 || renewed_at > expiring)
    }

    pub(super) fn revoked(&self) -> bool {
        self.revoked_at.load(Ordering::Acquire) != 0
    }

    pub(super) fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Sleeps `nap`, or less when a revocation or a loss comes first.
    pub(super) async fn nap(&self, nap: Duration) {
        tokio::select! {
            () = tokio::time::sleep(nap) => {}
            () = self.wake.notified() => {}
        }
    }

    /// Takes an event in (before it is recorded: a write sent after the record saw it).
    fn tell(&self, event: &str, at: u64) {
        match event {
            "expiring" => self.expiring_at.store(at.max(1), Ordering::Release),
            "revocation_requested" => {
                let _ = self.revoked_at.compare_exchange(
                    0,
                    at.max(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                self.wake.notify_one();
            }
            "lost" => {
                self.lost.store(true, Ordering::Release);
                self.wake.notify_one();
            }
            _ => {}
        }
    }
}

/// The watch task of one hold; aborted when the hold ends.
pub(super) struct Watch(JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who a watch is about.
struct Subject {
    client: usize,
    name: String,
    family: Family,
    lease: String,
    token: String,
    path: String,
    signals: Arc<Signals>,
}

impl Client {
    /// Opens the lease's watch (in a task of its own; nothing here waits for the server).
    pub(super) fn open_watch(&self, h: &Held) -> Watch {
        let what = if h.semaphore { "semaphores" } else { "locks" };
        let subject = Subject {
            client: self.id,
            name: h.name.clone(),
            family: h.family,
            lease: h.lease.clone(),
            token: h.token.clone(),
            path: format!("/v1/{what}/{}/leases/{}/watch", h.name, h.lease),
            signals: h.signals.clone(),
        };
        let first = self.id.wrapping_add(h.fence as usize);
        Watch(tokio::spawn(follow(
            self.shared.clone(),
            self.http.clone(),
            subject,
            first,
        )))
    }
}

/// Follows the watch until `lost` (or until aborted), reopening it on another instance with
/// `Last-Event-ID` when a stream drops, as a client does.
async fn follow(shared: Arc<Shared>, http: reqwest::Client, s: Subject, first: usize) {
    let mut last_id: Option<String> = None;
    for attempt in 0.. {
        let n = shared.targets.len().max(1);
        let instance = (first + attempt) % n;
        if let Some(url) = shared.targets.url(instance) {
            let mut req = http.get(format!("{url}{}", s.path)).bearer_auth(&s.token);
            if let Some(id) = &last_id {
                req = req.header("last-event-id", id);
            }
            match tokio::time::timeout(CONNECT_TIMEOUT, req.send()).await {
                Ok(Ok(resp)) if resp.status() == 200 => {
                    let mut events = resp.bytes_stream().eventsource();
                    while let Some(Ok(event)) = events.next().await {
                        if !event.id.is_empty() {
                            last_id = Some(event.id.clone());
                        }
                        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                        let reason = data["reason"]
                            .as_str()
                            .or_else(|| data["revocation"]["reason"].as_str());
                        tell(&shared, &s, instance, &event.event, reason);
                        if event.event == "lost" {
                            return;
                        }
                    }
                }
                // Ended before the watch began: the answer says why.
                Ok(Ok(resp)) if resp.status() == 410 => {
                    let body: Value = resp.json().await.unwrap_or(Value::Null);
                    tell(&shared, &s, instance, "lost", body["reason"].as_str());
                    return;
                }
                _ => {}
            }
        }
        tokio::time::sleep(RETRY_NAP).await;
    }
}

fn tell(shared: &Shared, s: &Subject, instance: usize, event: &str, reason: Option<&str>) {
    let recorder = &shared.recorder;
    let at = recorder.now();
    s.signals.tell(event, at);
    recorder.record(
        s.client,
        instance,
        &s.name,
        s.family,
        at,
        Request::Watch {
            lease: s.lease.clone(),
        },
        Outcome::Told {
            event: event.to_owned(),
            reason: reason.map(str::to_owned),
        },
    );
}
