//! Redis Cluster mode: the lock state spread over the cluster's primaries by slot, each lock
//! in the slot of its own name (every key of a lock carries the hash tag `{L}`), and
//! Leasehold's own data in the slot of `{leasehold/}`.
//!
//! Calls go through one redis-rs [`ClusterConnection`], which routes each by its first key,
//! follows `MOVED`/`ASK`, and re-sends a call whose connection dropped (so a function may run
//! twice: each is safe to, see `lua/README.md`). What redis-rs does not do, this module does:
//!
//! - reads the topology every second ([`topology`]), for everything that has to reach every
//!   primary: the expired-key listeners (keyspace notifications are node-local), the SCAN
//!   walks, the per-node clocks, `INFO`, and the operators' page;
//! - runs commands on one node by address ([`Cluster::on_node`]);
//! - keeps sharded subscriptions (`SSUBSCRIBE`, Redis ≥ 7) on a cluster connection of their
//!   own that carries no other command ([`sharded`]): redis-rs hands an unsolicited
//!   `sunsubscribe` (sent when a slot moves) to the oldest pending command of the connection
//!   it arrives on, which on a connection shared with lock calls gave callers each other's
//!   replies in the research's lab (redis-scale-out.md §0.1).
//!
//! Only database 0 exists in a cluster (`--redis-db` is refused with `--redis-cluster`).

pub mod sharded;
pub(super) mod subscriber;
pub mod topology;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{Cmd, RedisResult, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use topology::{Shard, Topology};

/// How often the topology is read even when nothing failed (Redisson reads `CLUSTER NODES`
/// every 5 s; a second keeps the listeners' gap after a failover short).
const READ_EVERY: Duration = Duration::from_secs(1);
/// Failovers and slot moves kept for the operators' page.
const CHANGES_KEPT: usize = 20;
/// How long a promoted primary counts its old primary's other replicas as its own (see
/// [`Cluster::promotable`]).
const INHERITED_FOR: Duration = Duration::from_secs(5);

/// Where the cluster is and how to talk to it. (Its `Debug` leaves the password out.)
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `host:port` of a few of the cluster's nodes; the rest are discovered.
    pub nodes: Vec<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// TLS to every node (`rediss`).
    pub tls: bool,
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("nodes", &self.nodes)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl ClusterSettings {
    /// How to reach the node at `addr` (`host:port`), with the credentials and TLS every
    /// node shares.
    pub fn node_info(&self, addr: &str) -> RedisResult<::redis::ConnectionInfo> {
        use ::redis::IntoConnectionInfo as _;
        let (host, port) = topology::split_addr(addr).ok_or_else(|| {
            ::redis::RedisError::from((
                ::redis::ErrorKind::InvalidClientConfig,
                "not a host:port address",
                addr.to_owned(),
            ))
        })?;
        let mut redis = ::redis::RedisConnectionInfo::default();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        Ok(super::connect::tcp_addr(self.tls, host, port)
            .into_connection_info()?
            .set_redis_settings(redis))
    }

    /// A plain client for one node (the expired-key listeners, one per primary).
    pub fn node_client(&self, addr: &str) -> RedisResult<::redis::Client> {
        ::redis::Client::open(self.node_info(addr)?)
    }
}

/// A change the topology poll saw: a primary gone or come, or slots moved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Change {
    /// What changed, in words (`127.0.0.1:7004 took over 5461-10922 from 127.0.0.1:7001`).
    pub what: String,
    /// Wall-clock milliseconds.
    pub at_ms: u64,
}

/// The cluster as this process uses it.
pub struct Cluster {
    settings: ClusterSettings,
    client: ::redis::cluster::ClusterClient,
    conn: ClusterConnection,
    topology: watch::Sender<Arc<Topology>>,
    changes: std::sync::Mutex<Vec<Change>>,
    /// A promoted primary → the other replicas its old primary had, and until when they
    /// count as its own (see [`Cluster::promotable`]).
    inherited: std::sync::Mutex<std::collections::HashMap<String, (u32, std::time::Instant)>>,
    /// Topology readings that differed from the one before.
    pub epochs: AtomicU64,
}

impl Cluster {
    /// The cluster handle (connects in the background: a cluster that does not answer yet
    /// is no error here; calls answer 503 until it does).
    pub fn new(settings: ClusterSettings, timeout: Duration) -> RedisResult<Arc<Self>> {
        let client = client(&settings, timeout, None)?;
        let conn = client.get_pending_async_connection_with_config(
            ::redis::cluster::ClusterConfig::new()
                .set_connection_timeout(timeout.min(Duration::from_millis(500)))
                .set_response_timeout(timeout),
        );
        Ok(Arc::new(Self {
            settings,
            client,
            conn,
            topology: watch::Sender::new(Arc::default()),
            changes: std::sync::Mutex::default(),
            inherited: std::sync::Mutex::default(),
            epochs: AtomicU64::new(0),
        }))
    }

    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// The connection every call shares (clones share it).
    pub fn conn(&self) -> ClusterConnection {
        self.conn.clone()
    }

    /// The cluster client (the acks pool makes cluster connections of its own from it; the
    /// sharded subscriber builds one of its own, with RESP3 and a push channel).
    pub fn client(&self) -> &::redis::cluster::ClusterClient {
        &self.client
    }

    /// A client like [`Self::client`] whose calls may take `timeout` (the replica-acks pool:
    /// a call and its `WAIT` take up to the Redis timeout plus the ack timeout).
    pub fn client_with_timeout(
        &self,
        timeout: Duration,
    ) -> RedisResult<::redis::cluster::ClusterClient> {
        client(&self.settings, timeout, None)
    }

    /// The topology as last read (empty before the first reading).
    pub fn topology(&self) -> Arc<Topology> {
        self.topology.borrow().clone()
    }

    /// Every change of topology, for whoever must follow the primaries.
    pub fn watch(&self) -> watch::Receiver<Arc<Topology>> {
        self.topology.subscribe()
    }

    /// The failovers and slot moves seen, oldest first.
    pub fn changes(&self) -> Vec<Change> {
        self.changes.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Replicas the cluster could promote in place of the primary at `primary`: those
    /// `CLUSTER SLOTS` lists for it (it leaves out the ones flagged `FAIL` and the ones never
    /// synced), and, for [`INHERITED_FOR`] after it was promoted, the other replicas of the
    /// primary it replaced: the cluster re-parents them to it (and `CLUSTER SLOTS` lists them
    /// under it) only after the failover, up to a second or two later as a node's view
    /// goes, and until then the shard would look as if it had none. `None` for a primary
    /// the topology does not list.
    pub fn promotable(&self, primary: &str) -> Option<u32> {
        let listed = self
            .topology()
            .shards
            .iter()
            .find(|s| s.primary == primary)
            .map(|s| u32::try_from(s.replicas.len()).unwrap_or(u32::MAX))?;
        let inherited = self.inherited.lock().ok().and_then(|map| {
            map.get(primary)
                .filter(|(_, until)| std::time::Instant::now() < *until)
                .map(|(n, _)| *n)
        });
        Some(listed.max(inherited.unwrap_or(0)))
    }

    /// Notes, for each primary that took over another's slots, the other replicas of the
    /// one it replaced (see [`Self::promotable`]).
    fn note_inherited(&self, before: &Topology, after: &Topology) {
        let Ok(mut map) = self.inherited.lock() else {
            return;
        };
        let now = std::time::Instant::now();
        map.retain(|_, (_, until)| now < *until);
        for shard in &after.shards {
            let Some(&(first, _)) = shard.slots.first() else {
                continue;
            };
            let Some(old) = before
                .owner(first)
                .filter(|old| old.primary != shard.primary)
            else {
                continue;
            };
            let others = old.replicas.iter().filter(|r| **r != shard.primary).count();
            if others > 0 {
                let others = u32::try_from(others).unwrap_or(u32::MAX);
                map.insert(shard.primary.clone(), (others, now + INHERITED_FOR));
            }
        }
    }

    /// Runs `cmd` on the node at `addr` (`host:port`).
    pub async fn on_node(&self, addr: &str, cmd: Cmd) -> RedisResult<Value> {
        let Some((host, port)) = topology::split_addr(addr) else {
            return Err(::redis::RedisError::from((
                ::redis::ErrorKind::Client,
                "not a host:port address",
                addr.to_owned(),
            )));
        };
        self.conn
            .clone()
            .route_command(
                cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
            )
            .await
    }

    /// Reads the topology now, and publishes it when it changed.
    pub async fn refresh(&self) -> RedisResult<Arc<Topology>> {
        let reply: Value = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.conn.clone())
            .await?;
        let read = Topology::parse(&reply).ok_or_else(|| {
            ::redis::RedisError::from((::redis::ErrorKind::Parse, "unreadable CLUSTER SLOTS"))
        })?;
        let before = self.topology();
        if *before != read && !read.shards.is_empty() {
            let read = Arc::new(read);
            self.note_changes(&before, &read);
            self.note_inherited(&before, &read);
            self.epochs.fetch_add(1, Ordering::Relaxed);
            self.topology.send_replace(read.clone());
            return Ok(read);
        }
        Ok(before)
    }

    fn note_changes(&self, before: &Topology, after: &Topology) {
        if before.shards.is_empty() {
            tracing::info!(
                primaries = ?after.primaries(),
                "Redis Cluster: {} primaries",
                after.shards.len()
            );
            return;
        }
        let mut noted = Vec::new();
        for shard in &after.shards {
            let earlier = before.shards.iter().find(|s| s.primary == shard.primary);
            if earlier.map(|e| &e.slots) != Some(&shard.slots) {
                let from: Vec<&str> = shard
                    .slots
                    .iter()
                    .filter_map(|(a, _)| before.owner(*a).map(|s| s.primary.as_str()))
                    .filter(|p| *p != shard.primary)
                    .collect();
                noted.push(format!(
                    "{} serves {} slots{}",
                    shard.primary,
                    shard.slot_count(),
                    if from.is_empty() {
                        String::new()
                    } else {
                        format!(" (took over from {})", from.join(", "))
                    }
                ));
            }
        }
        for gone in before
            .shards
            .iter()
            .filter(|s| !after.shards.iter().any(|a| a.primary == s.primary))
        {
            noted.push(format!("{} is no longer a primary", gone.primary));
        }
        if noted.is_empty() {
            return;
        }
        let what = noted.join("; ");
        tracing::warn!("Redis Cluster topology changed: {what}");
        if let Ok(mut changes) = self.changes.lock() {
            changes.push(Change {
                what,
                at_ms: super::wall_ms(),
            });
            let extra = changes.len().saturating_sub(CHANGES_KEPT);
            changes.drain(..extra);
        }
    }

    /// Reads the topology every second until `shutdown`.
    pub fn spawn(self: &Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(READ_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = shutdown.cancelled() => return,
                }
                tokio::select! {
                    read = me.refresh() => {
                        if let Err(e) = read {
                            tracing::debug!(error = %e, "could not read the cluster's topology");
                        }
                    }
                    () = shutdown.cancelled() => return,
                }
            }
        })
    }
}

/// A cluster client: short retry waits, since a call's whole budget is the Redis timeout
/// (redis-rs's default first wait for `TRYAGAIN`, 1.28 s, is most of it); `push` for the
/// sharded subscriber's connection (RESP3, which its subscriptions need).
pub(super) fn client(
    settings: &ClusterSettings,
    timeout: Duration,
    push: Option<tokio::sync::mpsc::UnboundedSender<::redis::PushInfo>>,
) -> RedisResult<::redis::cluster::ClusterClient> {
    let nodes = settings
        .nodes
        .iter()
        .map(|n| settings.node_info(n))
        .collect::<RedisResult<Vec<_>>>()?;
    let mut builder = ClusterClientBuilder::new(nodes)
        .retries(8)
        .min_retry_wait(5)
        .max_retry_wait(200)
        .retry_wait_formula(10, 2)
        .connection_timeout(timeout.min(Duration::from_millis(500)))
        .response_timeout(timeout);
    if let Some(push) = push {
        builder = builder
            .use_protocol(::redis::ProtocolVersion::RESP3)
            .push_sender(push);
    }
    builder.build()
}
