//! Sharded subscriptions (`SSUBSCRIBE`, Redis ≥ 7), what Cluster mode wakes waiters with.
//!
//! In a cluster a classic `PUBLISH` is copied to every node over the cluster bus, so the
//! standalone design (one pattern subscription for every lock's unlock channel) would cost
//! every node every release. A sharded message stays in its slot's shard, and Redisson on a
//! Redis 7 cluster publishes and subscribes sharded by default (`shardedSubscriptionMode =
//! AUTO`), so Leasehold does too: its functions `SPUBLISH` on Redisson's channels, and each
//! waited-for lock is subscribed on its own ([`ShardedGates`]; there are no sharded
//! patterns). A lock's channels share its hash tag `{L}`, so one `SSUBSCRIBE` takes them all.
//!
//! Per lock, the subscription follows the same rules as the standalone pattern's
//! ([`crate::redis::gate`]): a wait relies on a message only if the lock's subscription was
//! held without a break since its attempt; it is dropped a while after the last wait. It is
//! lost (and the waiters woken to look again) when Redis withdraws it (`sunsubscribe` when
//! the slot moved), when the connection drops, and when the topology changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use crate::redis::gate::SubscriptionGate;
use crate::redis::subscriber::{DISARM_AFTER, Route};

/// How long a subscribe may take before the connection counts as broken.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often idle subscriptions are dropped and unused gates forgotten.
const TIDY_EVERY: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Requests to subscribe a lock's channels not yet taken by the subscriber (it takes them as
/// fast as Redis answers; the queue fills only while it reconnects).
const REQUESTS_QUEUED: usize = 4096;

/// The channels a wake key's waiters listen on (all in the key's slot).
pub type ChannelsOf = fn(&str) -> Vec<String>;

/// One subscription gate per waited-for key, and the requests to arm them.
pub struct ShardedGates {
    gates: Mutex<HashMap<Arc<str>, Arc<SubscriptionGate>>>,
    requests: mpsc::Sender<Arc<str>>,
    receiver: Mutex<Option<mpsc::Receiver<Arc<str>>>>,
    channels_of: ChannelsOf,
    /// Where the next new gate's generations start (see [`SubscriptionGate::starting_at`]).
    generations: AtomicU64,
}

impl std::fmt::Debug for ShardedGates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedGates")
            .field("gates", &self.len())
            .finish_non_exhaustive()
    }
}

/// Each gate gets this many generations before the next gate's start (a gate lives through
/// far fewer subscribe/lose/drop changes than this before it is forgotten).
const GENERATIONS_PER_GATE: u64 = 1 << 32;

impl ShardedGates {
    pub fn new(channels_of: ChannelsOf) -> Arc<Self> {
        let (requests, receiver) = mpsc::channel(REQUESTS_QUEUED);
        Arc::new(Self {
            gates: Mutex::default(),
            requests,
            receiver: Mutex::new(Some(receiver)),
            channels_of,
            generations: AtomicU64::new(0),
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<SubscriptionGate>>> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gates known now (waited for, or lately).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gate of `key`'s subscription (made when nobody waited for it lately).
    pub fn gate(&self, key: &str) -> Arc<SubscriptionGate> {
        let mut map = self.map();
        if let Some(gate) = map.get(key) {
            return gate.clone();
        }
        let start = self
            .generations
            .fetch_add(GENERATIONS_PER_GATE, Ordering::Relaxed);
        let gate = Arc::new(SubscriptionGate::starting_at(start));
        map.insert(Arc::from(key), gate.clone());
        gate
    }

    /// Asks for `key`'s subscription and waits until it is held or `deadline` (false).
    pub async fn arm(&self, key: &str, deadline: Instant) -> bool {
        let gate = self.gate(key);
        if gate.is_armed() {
            return true;
        }
        // Queued for the subscriber. When the queue is full (the subscriber is reconnecting,
        // or shut down) the wait below times out and the request waits unheard, as with a
        // subscriber down; a reconnect subscribes every claimed gate anyway.
        let _ = self.requests.try_send(Arc::from(key));
        gate.arm(deadline).await
    }

    fn take_receiver(&self) -> Option<mpsc::Receiver<Arc<str>>> {
        self.receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn armed(&self) -> Vec<(Arc<str>, Arc<SubscriptionGate>)> {
        self.map()
            .iter()
            .filter(|(_, g)| g.is_armed())
            .map(|(k, g)| (k.clone(), g.clone()))
            .collect()
    }

    /// Every subscription is gone (connection lost, topology changed).
    fn lose_all(&self) {
        for gate in self.map().values() {
            gate.set_lost();
        }
    }

    /// The gates wanted (claimed) but not held: after a reconnect, subscribe them again.
    fn wanted(&self) -> Vec<Arc<str>> {
        self.map()
            .iter()
            .filter(|(_, g)| g.is_wanted())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The key whose channels include `channel`, if it is waited for.
    fn key_of_channel(&self, channel: &str) -> Option<Arc<str>> {
        self.map()
            .keys()
            .find(|k| (self.channels_of)(k).iter().any(|c| c == channel))
            .cloned()
    }

    /// Forgets the gates nobody uses (neither held nor claimed).
    fn forget_unused(&self) {
        self.map().retain(|_, g| !g.is_unused());
    }
}

/// Runs the sharded subscriptions on a cluster connection of their own until `shutdown`.
pub(in crate::redis) async fn run(
    cluster: Arc<Cluster>,
    gates: Arc<ShardedGates>,
    routes: Vec<Arc<dyn Route>>,
    timeout: Duration,
    shutdown: CancellationToken,
) {
    let Some(mut requests) = gates.take_receiver() else {
        tracing::error!("the sharded subscriber was started twice");
        return;
    };
    let mut backoff = BACKOFF_MIN;
    loop {
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let connected = async {
            let client = super::client(cluster.settings(), timeout, Some(push_tx))?;
            tokio::time::timeout(IO_TIMEOUT, client.get_async_connection())
                .await
                .unwrap_or_else(|_| Err(timed_out()))
        };
        let conn = tokio::select! {
            c = connected => c,
            () = shutdown.cancelled() => return,
        };
        match conn {
            Ok(conn) => {
                backoff = BACKOFF_MIN;
                let stopped = Session {
                    conn,
                    gates: &gates,
                    routes: &routes,
                    topology: cluster.watch(),
                }
                .listen(push_rx, &mut requests, &shutdown)
                .await;
                gates.lose_all();
                for route in &routes {
                    route.lost();
                }
                if stopped {
                    return;
                }
                tracing::warn!("lost the sharded subscriptions; reconnecting");
            }
            Err(e) => tracing::warn!(error = %e, "cannot open the sharded subscriber; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn timed_out() -> ::redis::RedisError {
    ::redis::RedisError::from((::redis::ErrorKind::Io, "sharded subscriber timed out"))
}

struct Session<'a> {
    conn: ::redis::cluster_async::ClusterConnection,
    gates: &'a ShardedGates,
    routes: &'a [Arc<dyn Route>],
    topology: tokio::sync::watch::Receiver<Arc<super::Topology>>,
}

impl Session<'_> {
    /// Subscribes `key`'s channels and says so to its waiters (false: the connection failed).
    async fn subscribe(&mut self, key: &str) -> bool {
        let gate = self.gates.gate(key);
        if gate.is_armed() {
            return true;
        }
        let channels = (self.gates.channels_of)(key);
        match tokio::time::timeout(IO_TIMEOUT, self.conn.ssubscribe(&channels)).await {
            Ok(Ok(())) => {
                gate.set_armed();
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, key, "could not subscribe a lock's channels");
                false
            }
            Err(_) => false,
        }
    }

    /// Routes messages until the connection breaks (false) or shutdown (true).
    async fn listen(
        mut self,
        mut pushes: mpsc::UnboundedReceiver<::redis::PushInfo>,
        requests: &mut mpsc::Receiver<Arc<str>>,
        shutdown: &CancellationToken,
    ) -> bool {
        for key in self.gates.wanted() {
            if !self.subscribe(&key).await {
                return false;
            }
        }
        for route in self.routes {
            route.connected();
        }
        let mut tidy = tokio::time::interval(TIDY_EVERY);
        tidy.reset();
        self.topology.mark_unchanged();
        loop {
            tokio::select! {
                push = pushes.recv() => {
                    let Some(push) = push else { return false };
                    if !self.pushed(push).await {
                        return false;
                    }
                }
                key = requests.recv() => {
                    let Some(key) = key else { return true };
                    if !self.subscribe(&key).await {
                        return false;
                    }
                }
                _ = tidy.tick() => {
                    if !self.tidy().await {
                        return false;
                    }
                }
                changed = self.topology.changed() => {
                    if changed.is_err() {
                        return true;
                    }
                    // A slot may have moved: what its old owner would have delivered is
                    // lost, and redis-rs moves the subscriptions only once it notices.
                    // Subscribe again (redis-rs routes by its slot map, refreshed on
                    // MOVED) and let every waiter look again.
                    for (key, gate) in self.gates.armed() {
                        gate.set_lost();
                        if !self.subscribe(&key).await {
                            return false;
                        }
                    }
                    for route in self.routes {
                        route.connected();
                    }
                }
                () = shutdown.cancelled() => return true,
            }
        }
    }

    /// Handles one push (false: the connection is gone).
    async fn pushed(&mut self, push: ::redis::PushInfo) -> bool {
        match push.kind {
            ::redis::PushKind::SMessage | ::redis::PushKind::Message => {
                if let (Some(channel), Some(payload)) = (push.data.first(), push.data.get(1)) {
                    let (Some(channel), Some(payload)) = (bytes(channel), bytes(payload)) else {
                        return true;
                    };
                    let channel = String::from_utf8_lossy(channel);
                    for route in self.routes {
                        if route.route(&channel, payload) {
                            break;
                        }
                    }
                }
                true
            }
            // Redis withdrew a channel: its slot moved (or the node stopped being a
            // primary). Whatever was published since is lost to us: wake its waiters, and
            // subscribe again where the slot is now while someone still waits.
            ::redis::PushKind::SUnsubscribe => {
                let Some(channel) = push.data.first().and_then(bytes) else {
                    return true;
                };
                let channel = String::from_utf8_lossy(channel).into_owned();
                if let Some(key) = self.gates.key_of_channel(&channel) {
                    let gate = self.gates.gate(&key);
                    if gate.is_armed() {
                        gate.set_lost();
                        for route in self.routes {
                            route.lost_channel(&channel);
                        }
                        if gate.is_wanted() {
                            return self.subscribe(&key).await;
                        }
                    }
                }
                true
            }
            ::redis::PushKind::Disconnection => false,
            _ => true,
        }
    }

    /// Drops the subscriptions nobody waited on lately, and forgets unused gates.
    async fn tidy(&mut self) -> bool {
        for (key, gate) in self.gates.armed() {
            if gate.disarm_if_idle(DISARM_AFTER) {
                let channels = (self.gates.channels_of)(&key);
                match tokio::time::timeout(IO_TIMEOUT, self.conn.sunsubscribe(&channels)).await {
                    Ok(Ok(())) => {}
                    _ => return false,
                }
            }
        }
        self.gates.forget_unused();
        true
    }
}

fn bytes(value: &::redis::Value) -> Option<&[u8]> {
    match value {
        ::redis::Value::BulkString(b) => Some(b),
        ::redis::Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channels(key: &str) -> Vec<String> {
        vec![format!("a:{{{key}}}"), format!("b:{{{key}}}")]
    }

    #[test]
    fn a_gate_made_again_never_repeats_a_generation_of_the_one_before() {
        let gates = ShardedGates::new(channels);
        let first = gates.gate("jobs");
        first.set_armed();
        let armed = first.epoch();
        first.set_lost();
        gates.forget_unused();
        assert!(gates.is_empty(), "neither held nor claimed: forgotten");
        let second = gates.gate("jobs");
        second.set_armed();
        assert!(
            second.claim_since(armed).is_none(),
            "an epoch of the forgotten gate does not pass for the new one"
        );
        assert!(second.claim_since(second.epoch()).is_some());
    }

    #[test]
    fn a_channel_names_the_key_waiting_for_it_and_claimed_gates_are_kept() {
        let gates = ShardedGates::new(channels);
        let gate = gates.gate("jobs");
        let _claim = gate.claim();
        gates.forget_unused();
        assert_eq!(gates.len(), 1, "claimed: kept");
        assert_eq!(gates.wanted(), vec![Arc::<str>::from("jobs")]);
        assert_eq!(gates.key_of_channel("b:{jobs}").as_deref(), Some("jobs"));
        assert_eq!(gates.key_of_channel("b:{other}"), None);
    }

    #[tokio::test]
    async fn arming_waits_unheard_when_no_subscriber_takes_the_request() {
        let gates = ShardedGates::new(channels);
        let until = Instant::now() + Duration::from_millis(50);
        assert!(!gates.arm("jobs", until).await);
    }
}
