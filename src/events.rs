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
//! The same connection also subscribes to the events channels, where every instance publishes
//! its events in batches (JSON arrays), while an event stream is open in this process (and for
//! [`DISARM_AFTER`] after the last one closes): the default tenant's channel
//! (`<prefix>leasehold:events`) with SUBSCRIBE, every named tenant's
//! (`<prefix>*/leasehold:events`, see [`crate::tenant`]) with PSUBSCRIBE. Held all the time,
//! every batch of every instance would come back to every instance, most with no one to show
//! it to (see [`EventFeed`]). It fans each event out in-process through a broadcast channel
//! ([`EventFeed`]), tagged with its tenant, so any number of dashboard tabs and
//! `GET /v1/events` clients cost no extra Redis subscription.
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

/// The in-process fan-out of the events channels: one Redis subscription, many listeners.
#[derive(Debug, Clone)]
pub struct EventFeed {
    tx: broadcast::Sender<FeedMessage>,
    /// Whether the subscriber holds the default tenant's events channel. Every instance
    /// publishes every event there; held all the time, each batch would come back to every
    /// instance whether or not anyone there watches: with one instance, in the 16-connection
    /// acquire + release loop of BENCHMARKS.md §3, that delivery cost about 4 % of the cycles
    /// per second, and each instance added receives every batch again.
    default: Arc<SubscriptionGate>,
    /// Whether the subscriber holds the tenants' events pattern (`<prefix>*/leasehold:events`).
    /// Redis matches every PUBLISH on the server against every pattern subscribed, and a
    /// pattern that starts with `*` is tried at every position of the channel's name: ~3,000
    /// instructions (callgrind, a short lock name; more for longer ones) for each unlock
    /// message of every release, Redisson clients' too, per instance holding it, where
    /// Redisson's whole minimal lock + unlock pair costs ~60,000.
    tenants: Arc<SubscriptionGate>,
}

impl Default for EventFeed {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(FEED_CAPACITY).0,
            default: Arc::default(),
            tenants: Arc::default(),
        }
    }
}

/// A listener of the feed (see [`EventFeed::listen`]).
#[derive(Debug)]
pub struct Listener {
    rx: broadcast::Receiver<FeedMessage>,
    _claim: Claim,
}

impl Listener {
    pub async fn recv(&mut self) -> Result<FeedMessage, broadcast::error::RecvError> {
        self.rx.recv().await
    }
}

impl EventFeed {
    /// A listener for `tenant`'s events, from now on: read anything older (the journal) after
    /// this returns, and nothing falls between. A tenant's events reach this process only
    /// while one of its streams is open here (the default tenant's channel, or the named
    /// tenants' pattern): the first one waits until they do, for [`LISTEN_TIMEOUT`] at most
    /// (the subscriber is reconnecting then, and its reconnect sends [`FeedMessage::Resync`]).
    pub async fn listen(&self, tenant: &Tenant) -> Listener {
        let rx = self.tx.subscribe();
        let gate = if tenant.is_default() {
            &self.default
        } else {
            &self.tenants
        };
        let claim = gate.claim();
        gate.arm(Instant::now() + LISTEN_TIMEOUT).await;
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
        ref waiters,
        ref feed,
        ..
    } = routes;
    let channels = [routes.expiries.channel.clone()];
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
                    "subscribed to expiries (to unlock messages while requests wait, to events \
                     while they are streamed)"
                );
                // Anything published while we were away is lost: everyone re-checks now.
                waiters.wake_all();
                feed.send(FeedMessage::Resync);
                let stopped = listen(pubsub, &routes, &shutdown).await;
                status.connected.store(false, Ordering::Relaxed);
                waiters.unlocks().set_lost();
                feed.default.set_lost();
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

/// A subscription held only while needed (see [`SubscriptionGate`]): its gate, and the
/// channels (or patterns) it stands for.
struct Gated<'a> {
    gate: &'a SubscriptionGate,
    topics: Vec<String>,
    pattern: bool,
    /// For the log: what it brings.
    what: &'static str,
}

impl Gated<'_> {
    /// Subscribes (false: the connection failed) and says so to those waiting.
    async fn arm(&self, sink: &mut redis::aio::PubSubSink) -> bool {
        let subscribed = if self.pattern {
            tokio::time::timeout(IO_TIMEOUT, sink.psubscribe(&self.topics)).await
        } else {
            tokio::time::timeout(IO_TIMEOUT, sink.subscribe(&self.topics)).await
        };
        if !matches!(subscribed, Ok(Ok(()))) {
            return false;
        }
        tracing::debug!(topics = ?self.topics, "listening for {}", self.what);
        self.gate.set_armed();
        true
    }

    /// Unsubscribes if nobody has needed it for [`DISARM_AFTER`] (false: the connection
    /// failed).
    async fn disarm_if_idle(&self, sink: &mut redis::aio::PubSubSink) -> bool {
        if !self.gate.disarm_if_idle(DISARM_AFTER) {
            return true;
        }
        let dropped = if self.pattern {
            tokio::time::timeout(IO_TIMEOUT, sink.punsubscribe(&self.topics)).await
        } else {
            tokio::time::timeout(IO_TIMEOUT, sink.unsubscribe(&self.topics)).await
        };
        if !matches!(dropped, Ok(Ok(()))) {
            return false;
        }
        tracing::debug!("nobody needs them: stopped listening for {}", self.what);
        true
    }
}

/// Routes messages until the connection ends (false) or shutdown (true).
async fn listen(pubsub: redis::aio::PubSub, routes: &Routes, shutdown: &CancellationToken) -> bool {
    let Routes {
        base,
        waiters,
        feed,
        ..
    } = routes;
    let keys = KeySpace::new(base.as_str());
    let unlocks = Gated {
        gate: waiters.unlocks(),
        topics: keys.wake_patterns(),
        pattern: true,
        what: "unlock messages",
    };
    let default_events = Gated {
        gate: &feed.default,
        topics: vec![keys.events_channel()],
        pattern: false,
        what: "the default tenant's events",
    };
    let tenants_events = Gated {
        gate: &feed.tenants,
        topics: vec![Tenant::events_pattern(base)],
        pattern: true,
        what: "named tenants' events",
    };
    let gated = [&unlocks, &default_events, &tenants_events];
    let (mut sink, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.reset();
    // What was needed before a reconnect is needed again. (A gate's request stored while the
    // connection was down is answered below; arming twice only confirms it twice.)
    for g in gated {
        if g.gate.is_wanted() && !g.arm(&mut sink).await {
            return false;
        }
    }
    loop {
        // A request is answered only if the subscription is not held: one that came in while
        // it was already held found it armed and did not wait.
        let asked = tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return false };
                route(&msg, routes, &keys);
                continue;
            }
            () = unlocks.gate.requested() => &unlocks,
            () = default_events.gate.requested() => &default_events,
            () = tenants_events.gate.requested() => &tenants_events,
            _ = ping.tick() => {
                let pong = tokio::time::timeout(IO_TIMEOUT, sink.ping::<redis::Value>()).await;
                if !matches!(pong, Ok(Ok(_))) {
                    return false;
                }
                for g in gated {
                    if !g.disarm_if_idle(&mut sink).await {
                        return false;
                    }
                }
                continue;
            }
            () = shutdown.cancelled() => return true,
        };
        if !asked.gate.is_armed() && !asked.arm(&mut sink).await {
            return false;
        }
    }
}

/// Hands one message to whoever it is for: waiters, the sweeper, or the event listeners.
fn route(msg: &redis::Msg, routes: &Routes, keys: &KeySpace) {
    let Routes {
        base,
        waiters,
        feed,
        expiries,
    } = routes;
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// The subscriber's side of a first listener: asked, it subscribes and says so; until
    /// then the listener waits.
    async fn first_listener_waits_for(feed: &EventFeed, gate: &SubscriptionGate, tenant: Tenant) {
        let first = tokio::spawn({
            let feed = feed.clone();
            async move { feed.listen(&tenant).await }
        });
        tokio::time::timeout(SECOND, gate.requested())
            .await
            .expect("the listener asked for the subscription");
        assert!(gate.is_wanted());
        assert!(
            !first.is_finished(),
            "it waits until the subscription is held"
        );
        gate.set_armed();
        let first = tokio::time::timeout(SECOND, first)
            .await
            .expect("armed: the listener goes on")
            .expect("listener task");
        drop(first);
    }

    #[tokio::test]
    async fn a_tenants_first_listener_waits_until_the_subscriber_listens() {
        let feed = EventFeed::default();
        assert!(
            !feed.default.is_wanted() && !feed.tenants.is_wanted(),
            "no listener: no events subscription"
        );
        first_listener_waits_for(&feed, &feed.default, Tenant::default()).await;
        assert!(
            !feed.tenants.is_wanted(),
            "the default tenant needs no pattern"
        );
        let team_a = Tenant::parse("team-a").expect("a tenant name");
        first_listener_waits_for(&feed, &feed.tenants, team_a).await;
        // Later listeners find them subscribed.
        for tenant in [
            Tenant::default(),
            Tenant::parse("team-b").expect("a tenant name"),
        ] {
            tokio::time::timeout(SECOND, feed.listen(&tenant))
                .await
                .expect("already subscribed: no wait");
        }
    }
}
