//! The one Redis subscriber of this process. While a request of this process waits for an
//! unlock, it listens on every channel of our key prefix that can free a lock or a permit,
//! with one PSUBSCRIBE per channel family: Redisson's `redisson_lock__channel:{..}` (RLock,
//! and RFairLock's per-waiter `{L}:<holder>` channels), `redisson_rwlock:{..}` and
//! `redisson_sc:{..}`, so a Redisson client's unlock wakes our waiters too; and it fans each
//! message out to the local waiters. Thousands of waiting requests therefore cost one
//! connection and three pattern subscriptions. Those are taken when a request first needs
//! them and dropped when no request has needed them for [`DISARM_AFTER`] (see
//! [`crate::locks::waiters`]): every release publishes, and a process that nobody waits in
//! would otherwise receive every release of every lock.
//!
//! The same connection also SUBSCRIBEs to the events channel (`<prefix>leasehold:events`, where
//! every instance publishes its events in batches: JSON arrays), and, while a named tenant's
//! live stream is open here, PSUBSCRIBEs to every tenant's (`<prefix>*/leasehold:events`, see
//! [`crate::tenant`] and [`EventFeed::listen`]); it fans each event out in-process through a
//! broadcast channel ([`EventFeed`]), tagged with its tenant, so any number of dashboard tabs
//! and `GET /v1/events` clients cost no extra Redis subscription.
//! Tenants' unlock channels already match the wake patterns, whose prefix is the start of
//! every tenant's. It also SUBSCRIBEs to Redis's expired-key notifications
//! (`__keyevent@<db>__:expired`) and hands each key to the expiry sweeper
//! ([`crate::locks::sweeper`]), so recording expiries costs no connection either.
//!
//! Pub/sub is at-most-once: after any reconnect every waiter is woken to re-check, and waiters
//! also retry when the holder's TTL runs out, so a lost message costs latency, never a hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::locks::gate::{Claim, SubscriptionGate};
use crate::locks::keys::Wakes;
use crate::locks::waiters::Waiters;
use crate::locks::{KeySpace, LockEvent};
use crate::tenant::Tenant;

/// How long a connect, subscribe or ping may take before the connection counts as dead.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the idle subscription is pinged, to notice a Redis that vanished silently.
const PING_EVERY: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long a gated pattern (the unlock patterns, the tenants' events pattern) stays
/// subscribed after its last claim: a lock waited for now and then, or a stream reopened,
/// keeps it, instead of subscribing each time.
pub const DISARM_AFTER: Duration = Duration::from_secs(10);

/// How many events a slow listener may fall behind before it is told to resync.
const FEED_CAPACITY: usize = 1024;
/// How long a new listener of a named tenant waits at most for the tenants' pattern to be
/// subscribed before its stream starts anyway (the subscriber is reconnecting: its reconnect
/// then tells every listener to resync).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(2);

/// What listeners of the in-process event feed receive.
#[derive(Debug, Clone)]
pub enum FeedMessage {
    /// An event of one of `tenant`'s locks (its `lock` is the name within the tenant).
    Event {
        tenant: Tenant,
        event: Arc<LockEvent>,
    },
    /// Events may have been missed (the subscription was re-established, or this listener
    /// fell behind): re-read whatever state is shown.
    Resync,
}

/// The in-process fan-out of the events channel: one Redis subscription, many listeners.
#[derive(Debug, Clone)]
pub struct EventFeed {
    tx: broadcast::Sender<FeedMessage>,
    /// Whether the subscriber holds the tenants' events pattern (`<prefix>*/leasehold:events`).
    /// Redis matches every PUBLISH on the server against every pattern subscribed, and a
    /// pattern that starts with `*` is tried at every position of the channel's name: ~3,000
    /// instructions (callgrind, a short lock name; more for longer ones) for each unlock
    /// message of every release, Redisson clients' too, per instance holding it, where
    /// Redisson's whole minimal lock + unlock pair costs ~60,000. Unlike the default tenant's
    /// one channel (an exact lookup), it is therefore held only while a named tenant's stream
    /// is open in this process, and for [`DISARM_AFTER`] after the last one closes.
    tenants: Arc<SubscriptionGate>,
}

impl Default for EventFeed {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(FEED_CAPACITY).0,
            tenants: Arc::default(),
        }
    }
}

/// A listener of the feed (see [`EventFeed::listen`]).
#[derive(Debug)]
pub struct Listener {
    rx: broadcast::Receiver<FeedMessage>,
    _claim: Option<Claim>,
}

impl Listener {
    pub async fn recv(&mut self) -> Result<FeedMessage, broadcast::error::RecvError> {
        self.rx.recv().await
    }
}

impl EventFeed {
    /// A listener for `tenant`'s events, from now on: read anything older (the journal) after
    /// this returns, and nothing falls between. A named tenant's events reach this process only
    /// while one of its streams is open here (their pattern is costly to hold): the first one
    /// waits until they do, for [`LISTEN_TIMEOUT`] at most (the subscriber is reconnecting
    /// then, and its reconnect sends [`FeedMessage::Resync`]).
    pub async fn listen(&self, tenant: &Tenant) -> Listener {
        let rx = self.tx.subscribe();
        let claim = if tenant.is_default() {
            None
        } else {
            let claim = self.tenants.claim();
            self.tenants.arm(Instant::now() + LISTEN_TIMEOUT).await;
            Some(claim)
        };
        Listener { rx, _claim: claim }
    }

    /// Listeners right now (open SSE streams).
    pub fn listeners(&self) -> usize {
        self.tx.receiver_count()
    }

    fn send(&self, message: FeedMessage) {
        // No listener is fine: nobody is watching.
        let _ = self.tx.send(message);
    }
}

/// What the rest of the process may know about the subscriber.
#[derive(Debug, Default)]
pub struct SubscriberStatus {
    connected: AtomicBool,
    reconnects: AtomicU64,
}

impl SubscriberStatus {
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Times the subscription was lost and re-established.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}

/// Where Redis's expired-key notifications go: the channel they come on and the sweeper's
/// queue ([`crate::locks::sweeper`]).
pub struct Expiries {
    pub channel: String,
    pub to_sweeper: mpsc::Sender<String>,
}

/// Starts the subscriber for every tenant under the key prefix `base`; it runs until
/// `shutdown` is cancelled.
pub fn spawn_subscriber(
    client: redis::Client,
    base: String,
    waiters: Arc<Waiters>,
    feed: EventFeed,
    expiries: Expiries,
    shutdown: CancellationToken,
) -> (Arc<SubscriberStatus>, JoinHandle<()>) {
    let status = Arc::new(SubscriberStatus::default());
    let routes = Routes {
        base,
        waiters,
        feed,
        expiries,
    };
    let task = tokio::spawn(run(client, routes, status.clone(), shutdown));
    (status, task)
}

/// Where the subscriber sends what it hears.
struct Routes {
    base: String,
    waiters: Arc<Waiters>,
    feed: EventFeed,
    expiries: Expiries,
}

async fn run(
    client: redis::Client,
    routes: Routes,
    status: Arc<SubscriberStatus>,
    shutdown: CancellationToken,
) {
    let Routes {
        ref base,
        ref waiters,
        ref feed,
        ..
    } = routes;
    let keys = KeySpace::new(base.clone());
    let channels = [keys.events_channel(), routes.expiries.channel.clone()];
    let mut backoff = BACKOFF_MIN;
    let mut ever_connected = false;
    loop {
        let connected = tokio::select! {
            c = subscribe(&client, &channels) => c,
            () = shutdown.cancelled() => return,
        };
        match connected {
            Ok(pubsub) => {
                if ever_connected {
                    status.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                ever_connected = true;
                backoff = BACKOFF_MIN;
                status.connected.store(true, Ordering::Relaxed);
                tracing::info!(
                    ?channels,
                    "subscribed to events and expiries (to unlock messages while requests wait, \
                     to other tenants' events while they are streamed)"
                );
                // Anything published while we were away is lost: everyone re-checks now.
                waiters.wake_all();
                feed.send(FeedMessage::Resync);
                let stopped = listen(pubsub, &routes, &shutdown).await;
                status.connected.store(false, Ordering::Relaxed);
                waiters.unlocks().set_lost();
                feed.tenants.set_lost();
                waiters.wake_all();
                if stopped {
                    return;
                }
                tracing::warn!("lost the Redis subscription; reconnecting");
            }
            Err(e) => tracing::warn!(error = %e, "cannot subscribe to Redis; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn subscribe(
    client: &redis::Client,
    channels: &[String],
) -> redis::RedisResult<redis::aio::PubSub> {
    let attempt = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channels).await?;
        Ok(pubsub)
    };
    tokio::time::timeout(IO_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "subscribe timed out",
            )))
        })
}

/// Routes messages until the connection ends (false) or shutdown (true).
async fn listen(pubsub: redis::aio::PubSub, routes: &Routes, shutdown: &CancellationToken) -> bool {
    let Routes {
        base,
        waiters,
        feed,
        expiries,
    } = routes;
    let keys = KeySpace::new(base.as_str());
    let wake_patterns = keys.wake_patterns();
    let tenants_pattern = Tenant::events_pattern(base);
    let (mut sink, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.reset();
    // Streams of named tenants that stayed open across a reconnect need the pattern again.
    let mut tenants_wanted = feed.tenants.is_wanted();
    loop {
        if tenants_wanted {
            tenants_wanted = false;
            if feed.tenants.is_wanted() {
                let done =
                    tokio::time::timeout(IO_TIMEOUT, sink.psubscribe(&tenants_pattern)).await;
                if !matches!(done, Ok(Ok(()))) {
                    return false;
                }
                tracing::debug!(pattern = %tenants_pattern, "listening for other tenants' events");
                feed.tenants.set_armed();
            }
        }
        tokio::select! {
            msg = stream.next() => match msg {
                Some(msg) => {
                    let channel = msg.get_channel_name();
                    if let Some((key, wakes)) = keys.wake_of_channel(channel) {
                        match wakes {
                            Wakes::One => waiters.wake_one(key),
                            Wakes::All => waiters.wake(key),
                        }
                    } else if channel == expiries.channel {
                        // Dropped when the sweeper is behind: its periodic pass finds them.
                        if let Ok(key) = msg.get_payload::<String>() {
                            let _ = expiries.to_sweeper.try_send(key);
                        }
                    } else if feed.listeners() > 0
                        && let Some(tenant) = Tenant::of_events_channel(base, channel)
                        && let Ok(json) = msg.get_payload::<String>()
                    {
                        for event in LockEvent::parse_batch(&json) {
                            feed.send(FeedMessage::Event {
                                tenant: tenant.clone(),
                                event: Arc::new(event),
                            });
                        }
                    }
                }
                None => return false,
            },
            () = feed.tenants.requested() => tenants_wanted = true,
            () = waiters.unlocks().requested() => {
                if !waiters.unlocks().is_armed() {
                    let done =
                        tokio::time::timeout(IO_TIMEOUT, sink.psubscribe(&wake_patterns)).await;
                    if !matches!(done, Ok(Ok(()))) {
                        return false;
                    }
                    tracing::debug!(patterns = ?wake_patterns, "listening for unlock messages");
                    waiters.unlocks().set_armed();
                }
            }
            _ = ping.tick() => {
                let pong = tokio::time::timeout(IO_TIMEOUT, sink.ping::<redis::Value>()).await;
                if !matches!(pong, Ok(Ok(_))) {
                    return false;
                }
                if waiters.unlocks().disarm_if_idle(DISARM_AFTER) {
                    let done =
                        tokio::time::timeout(IO_TIMEOUT, sink.punsubscribe(&wake_patterns)).await;
                    if !matches!(done, Ok(Ok(()))) {
                        return false;
                    }
                    tracing::debug!("no request waits: stopped listening for unlock messages");
                }
                if feed.tenants.disarm_if_idle(DISARM_AFTER) {
                    let done =
                        tokio::time::timeout(IO_TIMEOUT, sink.punsubscribe(&tenants_pattern))
                            .await;
                    if !matches!(done, Ok(Ok(()))) {
                        return false;
                    }
                    tracing::debug!("no other tenant's stream: stopped listening for their events");
                }
            }
            () = shutdown.cancelled() => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_named_tenants_first_listener_waits_until_the_subscriber_listens() {
        let feed = EventFeed::default();
        let default = tokio::time::timeout(SECOND, feed.listen(&Tenant::default()))
            .await
            .expect("the default tenant's channel is always subscribed: no wait");
        assert!(
            !feed.tenants.is_wanted(),
            "the default tenant needs no pattern"
        );
        drop(default);

        let tenant = Tenant::parse("team-a").expect("a tenant name");
        let first = tokio::spawn({
            let feed = feed.clone();
            async move { feed.listen(&tenant).await }
        });
        // The subscriber's side: asked, it subscribes and says so.
        tokio::time::timeout(SECOND, feed.tenants.requested())
            .await
            .expect("the listener asked for the pattern");
        assert!(feed.tenants.is_wanted());
        assert!(
            !first.is_finished(),
            "it waits until the pattern is subscribed"
        );
        feed.tenants.set_armed();
        let first = tokio::time::timeout(SECOND, first)
            .await
            .expect("armed: the listener goes on")
            .expect("listener task");
        // A second listener finds it subscribed.
        let second = tokio::time::timeout(
            SECOND,
            feed.listen(&Tenant::parse("team-b").expect("a tenant name")),
        )
        .await
        .expect("already subscribed: no wait");
        drop((first, second));
    }
}
