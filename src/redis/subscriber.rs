//! The one Redis subscriber of this process: one connection for every subscription the
//! process needs, whoever needs it. Some channels are held all the time (Redis's expired-key
//! notifications); others only while someone needs them ([`Gated`]: the unlock patterns while
//! a request waits, the events channels while a stream is open; see [`super::gate`]), since
//! every PUBLISH on the Redis is matched against every pattern subscribed. What it hears goes,
//! as `(channel, payload)`, to the [`Route`]s it was given (the lock domain's wake-ups, the
//! sweeper's expiries, the event feed), the same inversion as the lock domain's observer: the
//! seam knows nothing of what the messages mean.
//!
//! Pub/sub is at-most-once: after any reconnect every route is told ([`Route::connected`]),
//! and gated subscriptions are taken again when still wanted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::future::{BoxFuture, select_all};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::gate::SubscriptionGate;

/// How long a connect, subscribe or ping may take before the connection counts as dead.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the idle subscription is pinged, to notice a Redis that vanished silently.
const PING_EVERY: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long a gated subscription stays after its last claim: a lock waited for now and then,
/// or a stream reopened, keeps it, instead of subscribing each time.
pub const DISARM_AFTER: Duration = Duration::from_secs(10);

/// Whoever takes some of what the subscriber hears.
pub trait Route: Send + Sync {
    /// A message on `channel` (a pattern subscription's message carries its channel):
    /// handled, or `false` when it is not this route's.
    fn route(&self, channel: &str, payload: &[u8]) -> bool;

    /// The subscription was (re)established: anything published before was missed.
    fn connected(&self) {}

    /// The subscription was lost (a reconnect follows).
    fn lost(&self) {}

    /// One channel's subscription was withdrawn (Cluster mode: its slot moved); anything
    /// published on it since is lost.
    fn lost_channel(&self, _channel: &str) {}
}

/// A subscription held only while needed: its gate, and the channels (or patterns) it
/// stands for.
#[derive(Clone)]
pub struct Gated {
    pub gate: Arc<SubscriptionGate>,
    pub topics: Vec<String>,
    pub pattern: bool,
    /// For the log: what it brings.
    pub what: &'static str,
}

/// What the subscriber listens to.
pub struct Topics {
    /// Channels held all the time.
    pub always: Vec<String>,
    /// For the log: what they bring.
    pub always_what: &'static str,
    pub gated: Vec<Gated>,
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

    /// For a subscriber made of several (Cluster mode): whether all of them are connected.
    pub(super) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    pub(super) fn reconnects_add(&self, n: u64) {
        self.reconnects.fetch_add(n, Ordering::Relaxed);
    }
}

/// Where the subscriber connects: the one server, or the master the Sentinels name now (it
/// moves with every failover, and reconnects).
pub(super) enum Source {
    Fixed(Box<::redis::Client>),
    Following(tokio::sync::watch::Receiver<Option<super::sentinel::Master>>),
}

impl Source {
    /// The client to subscribe with, waiting for a master to be known.
    async fn client(&mut self) -> ::redis::Client {
        match self {
            Self::Fixed(client) => (**client).clone(),
            Self::Following(rx) => loop {
                if let Some(master) = rx.borrow_and_update().as_ref() {
                    return (*master.client).clone();
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            },
        }
    }

    /// Resolves when the master changes (never, for one server).
    async fn moved(&mut self) {
        match self {
            Self::Fixed(_) => std::future::pending().await,
            Self::Following(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Starts the subscriber on `source`; it runs until `shutdown` is cancelled.
pub(super) fn spawn(
    source: Source,
    topics: Topics,
    routes: Vec<Arc<dyn Route>>,
    shutdown: CancellationToken,
) -> (Arc<SubscriberStatus>, JoinHandle<()>) {
    let status = Arc::new(SubscriberStatus::default());
    let task = tokio::spawn(run(source, topics, routes, status.clone(), shutdown));
    (status, task)
}

async fn run(
    mut source: Source,
    topics: Topics,
    routes: Vec<Arc<dyn Route>>,
    status: Arc<SubscriberStatus>,
    shutdown: CancellationToken,
) {
    let mut backoff = BACKOFF_MIN;
    let mut ever_connected = false;
    loop {
        let connected = tokio::select! {
            c = async {
                let client = source.client().await;
                subscribe(&client, &topics.always).await
            } => c,
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
                    channels = ?topics.always,
                    "subscribed to {} (and, while needed, to {})",
                    topics.always_what,
                    topics.gated.iter().map(|g| g.what).collect::<Vec<_>>().join(", ")
                );
                for route in &routes {
                    route.connected();
                }
                let stopped = listen(pubsub, &topics.gated, &routes, &mut source, &shutdown).await;
                status.connected.store(false, Ordering::Relaxed);
                for gated in &topics.gated {
                    gated.gate.set_lost();
                }
                for route in &routes {
                    route.lost();
                }
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
    client: &::redis::Client,
    channels: &[String],
) -> ::redis::RedisResult<::redis::aio::PubSub> {
    let attempt = async {
        let mut pubsub = client.get_async_pubsub().await?;
        if !channels.is_empty() {
            pubsub.subscribe(channels).await?;
        }
        Ok(pubsub)
    };
    tokio::time::timeout(IO_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(::redis::RedisError::from((
                ::redis::ErrorKind::Io,
                "subscribe timed out",
            )))
        })
}

impl Gated {
    /// Subscribes (false: the connection failed) and says so to those waiting.
    async fn arm(&self, sink: &mut ::redis::aio::PubSubSink) -> bool {
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
    async fn disarm_if_idle(&self, sink: &mut ::redis::aio::PubSubSink) -> bool {
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

/// Routes messages until the connection ends or the master moves (false), or shutdown
/// (true).
async fn listen(
    pubsub: ::redis::aio::PubSub,
    gated: &[Gated],
    routes: &[Arc<dyn Route>],
    source: &mut Source,
    shutdown: &CancellationToken,
) -> bool {
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
    // Each gate's doorbell, kept across messages (each yields its gate's index): a message
    // costs no new future.
    let ring = |i: usize| -> BoxFuture<'_, usize> {
        Box::pin(async move {
            gated[i].gate.requested().await;
            i
        })
    };
    let mut requested = (!gated.is_empty()).then(|| select_all((0..gated.len()).map(ring)));
    loop {
        // A request is answered only if the subscription is not held: one that came in while
        // it was already held found it armed and did not wait.
        let asked = tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return false };
                route(&msg, routes);
                continue;
            }
            (index, _, mut rest) = async {
                match requested.as_mut() {
                    Some(doorbells) => doorbells.await,
                    None => std::future::pending().await,
                }
            } => {
                rest.push(ring(index));
                requested = Some(select_all(rest));
                &gated[index]
            }
            _ = ping.tick() => {
                let pong = tokio::time::timeout(IO_TIMEOUT, sink.ping::<::redis::Value>()).await;
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
            // A failover: the subscription must move to the new master.
            () = source.moved() => return false,
            () = shutdown.cancelled() => return true,
        };
        if !asked.gate.is_armed() && !asked.arm(&mut sink).await {
            return false;
        }
    }
}

/// Hands one message to the first route that takes it.
fn route(msg: &::redis::Msg, routes: &[Arc<dyn Route>]) {
    let channel = msg.get_channel_name();
    let payload = msg.get_payload_bytes();
    for route in routes {
        if route.route(channel, payload) {
            return;
        }
    }
}
