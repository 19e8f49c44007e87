//! Keeping the lease while something runs under it: a heartbeat task that renews every TTL/3
//! (retrying failures sooner), and a watch task that keeps a lease watch open, which says the
//! moment the lease is lost, and before that when an operator asks us to let go or the server
//! warns that the lease is about to end. Both report [`News`] to the supervisor; neither decides what to
//! do about it. Also the release at the end ([`Leased`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

use super::acquire::Held;
use super::{later, say};
use crate::cli::describe;
use crate::client::{Client, ClientError, LeaseId, LeaseToken, Resource, Watch, WatchEvent};

/// Longest pause between heartbeat retries after a failure (shorter for short TTLs).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Pause before opening the lease watch again after it broke (the server restarted, a proxy
/// cut it); heartbeats go on meanwhile.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// The lease we hold: what the keeper and the release need to know.
pub(super) struct Leased<'a> {
    pub(super) client: &'a Client,
    pub(super) resource: Resource,
    pub(super) lock: &'a str,
    pub(super) id: LeaseId,
    pub(super) token: LeaseToken,
    /// The fencing token it was granted with (an election's term, sent with its heartbeats).
    pub(super) fence: u64,
}

impl Leased<'_> {
    /// Releases every level; a failure is only reported, the lease then ends with its TTL.
    pub(super) async fn release(&self) {
        if let Err(e) = self
            .client
            .release(self.resource, self.lock, self.id, &self.token, true)
            .await
        {
            say(format_args!(
                "cannot release the lease ({}); the lock stays held until its TTL runs out",
                describe(&e)
            ));
        }
    }

    /// Releases on an error path that has already said what went wrong.
    pub(super) async fn release_quietly(&self) {
        let _ = self
            .client
            .release(self.resource, self.lock, self.id, &self.token, true)
            .await;
    }
}

/// The deadlines of the revocations told so far: a revocation is told once, whether the watch
/// (or a reopened one) or a heartbeat's answer tells it first.
#[derive(Clone, Default)]
struct Told(Arc<Mutex<Vec<String>>>);

impl Told {
    /// Whether the revocation with this `deadline` is new (and it is told from now on).
    fn first_time(&self, deadline: &str) -> bool {
        let mut told = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if told.iter().any(|d| d == deadline) {
            return false;
        }
        told.push(deadline.to_owned());
        true
    }

    fn news(&self, revocation: &crate::client::RevocationBody) -> Option<News> {
        self.first_time(&revocation.deadline)
            .then(|| News::Revoked {
                deadline: instant_of(&revocation.deadline),
                reason: revocation.reason.clone(),
            })
    }
}

/// What the heartbeat task reports.
pub(super) enum News {
    /// The lease is ours until at least this instant.
    Renewed(Instant),
    /// A heartbeat got no answer or a retryable one; it is retried.
    Failed(ClientError),
    /// The server says the lease is gone (why, in its words); the task has stopped.
    Lost(String),
    /// An operator asked us to let go (why) by this instant: the lease ends then.
    Revoked { reason: String, deadline: Instant },
    /// The server warns that the lease is about to end (`expiring`: no heartbeat came in its
    /// slack) or that it cannot confirm it (`degraded`: it cannot reach Redis).
    Warned(&'static str),
}

/// The heartbeat task renews every TTL/3 and retries failures sooner; the watch task keeps a
/// lease watch open, which says the moment the lease is lost. Both stop when it is lost or
/// when the keeper is dropped (which aborts a request in flight, so no heartbeat races with
/// the release).
pub(super) struct Keeper {
    tasks: [JoinHandle<()>; 2],
    news: mpsc::Receiver<News>,
}

impl Keeper {
    pub(super) fn start(lease: &Leased<'_>, held: &Held) -> Self {
        // A request must not hang past the next heartbeat; it is retried instead.
        let timeout = (held.ttl / 3).clamp(Duration::from_millis(500), Duration::from_secs(10));
        let client = lease.client.clone().with_timeout(timeout);
        let (resource, lock, id) = (lease.resource, lease.lock.to_owned(), lease.id);
        let (token, fence) = (lease.token.clone(), lease.fence);
        let mut ttl = held.ttl;
        let mut next_heartbeat = held.renewed_at + ttl / 3;
        let (tx, news) = mpsc::channel(4);
        let told = Told::default();
        let watch = tokio::spawn(watch(
            lease.client.clone(),
            (resource, lock.clone(), id, token.clone()),
            tx.clone(),
            told.clone(),
        ));
        let heartbeat = tokio::spawn(async move {
            loop {
                sleep_until(next_heartbeat).await;
                let sent = Instant::now();
                let beat = client.heartbeat_term(resource, &lock, id, &token, Some(fence));
                let news = match beat.await {
                    Ok(renewal) => {
                        let answered = Duration::from_millis(renewal.body.ttl_ms);
                        // Under a revocation the answer stops at its deadline; heartbeats
                        // keep the lease's own pace, not one that quickens towards it.
                        let revoked = renewal.body.revocation.as_ref().and_then(|r| told.news(r));
                        if renewal.body.revocation.is_none() {
                            ttl = answered;
                        }
                        next_heartbeat = sent + ttl / 3;
                        if let Some(revoked) = revoked
                            && tx.send(revoked).await.is_err()
                        {
                            return;
                        }
                        News::Renewed(later(sent, answered))
                    }
                    Err(ClientError::Problem(p)) if p.is_lease_gone() => {
                        let _ = tx.send(News::Lost(p.detail)).await;
                        return;
                    }
                    Err(e) => {
                        next_heartbeat = Instant::now() + (ttl / 3).min(RETRY_PAUSE);
                        News::Failed(e)
                    }
                };
                if tx.send(news).await.is_err() {
                    return;
                }
            }
        });
        Self {
            tasks: [heartbeat, watch],
            news,
        }
    }

    /// The next report of either task; `None` once both have stopped.
    pub(super) async fn next(&mut self) -> Option<News> {
        self.news.recv().await
    }
}

/// Keeps a lease watch open until the server says the lease is lost, passing on what it
/// tells before; a watch that breaks is opened again after the last event it told
/// (`Last-Event-ID`). A server without watches (404 `not_found`) leaves it to the heartbeats.
async fn watch(
    client: Client,
    (resource, lock, id, token): (Resource, String, LeaseId, LeaseToken),
    tx: mpsc::Sender<News>,
    told: Told,
) {
    let mut last_id: Option<String> = None;
    loop {
        let opened = client
            .watch_after(resource, &lock, id, &token, last_id.as_deref())
            .await;
        let lost = match opened {
            Ok(mut watch) => {
                let lost = follow(&mut watch, &tx, &told).await;
                last_id = watch.last_event_id().map(str::to_owned);
                lost
            }
            Err(ClientError::Problem(p)) if p.is_lease_gone() => Some(p.detail),
            Err(ClientError::Problem(p)) if p.code == "not_found" => return,
            Err(_) => None,
        };
        if let Some(why) = lost {
            let _ = tx.send(News::Lost(why)).await;
            return;
        }
        sleep(WATCH_RETRY).await;
    }
}

/// Passes on what an open watch tells until it says the lease is lost (why) or breaks.
async fn follow(watch: &mut Watch, tx: &mpsc::Sender<News>, told: &Told) -> Option<String> {
    loop {
        let news = match watch.next().await {
            Ok(WatchEvent::Lost(lost)) => {
                return Some(format!(
                    "the server reports it {}",
                    lost.reason.replace('_', " ")
                ));
            }
            Ok(WatchEvent::Signal { kind, signal }) => match kind.as_str() {
                "revocation_requested" => {
                    match signal.revocation.as_ref().and_then(|r| told.news(r)) {
                        Some(news) => news,
                        None => continue,
                    }
                }
                "expiring" => News::Warned("expiring"),
                "degraded" => News::Warned("degraded"),
                _ => continue,
            },
            Err(_) => return None,
        };
        if tx.send(news).await.is_err() {
            return None;
        }
    }
}

/// The local instant of a server's RFC 3339 time (now, if it does not parse): the wall
/// clocks' difference is what a lease's margin is for.
fn instant_of(rfc3339: &str) -> Instant {
    let Ok(at) = humantime::parse_rfc3339(rfc3339) else {
        return Instant::now();
    };
    let now = std::time::SystemTime::now();
    match at.duration_since(now) {
        Ok(ahead) => Instant::now() + ahead,
        Err(_) => Instant::now(),
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One heartbeat, right after a long acquire.
pub(super) async fn confirm(lease: &Leased<'_>, held: Held) -> Result<Held, ClientError> {
    let sent = Instant::now();
    let renewal = lease
        .client
        .heartbeat_term(
            lease.resource,
            lease.lock,
            lease.id,
            &lease.token,
            Some(lease.fence),
        )
        .await?;
    Ok(Held {
        ttl: Duration::from_millis(renewal.body.ttl_ms),
        renewed_at: sent,
        ..held
    })
}
