//! The one place that knows Redis connections. Everything else takes a [`Redis`] handle and
//! sends commands through it (`query_async(&mut redis)`: it is a `ConnectionLike`), or asks
//! it for what only the seam can do: load a function library, walk the keyspace, read the
//! memory, start the subscriber. The handle is one standalone server (the address, TLS,
//! timeouts and reconnects configured once here), in Sentinel mode whichever node the
//! Sentinels name master now, or in Cluster mode the primaries by slot, behind the same
//! calls. Code outside this module asks the handle what it can do
//! ([`Redis::capabilities`]: sharded pub/sub, re-sent calls, declared keys, one server),
//! never which mode it is in.
//!
//! - [`connect`]: the client (URL, TLS with a private CA) and the connection policy.
//! - [`functions`]: loading a Redis Function library, and telling a "not loaded" error.
//! - [`subscriber`]: the process's one pub/sub connection, routing `(channel, payload)` to
//!   whoever registered a [`subscriber::Route`]; [`gate`]: subscriptions held only while
//!   needed.
//! - [`scan`]: walking the keyspace page by page; [`batch`]: commands sent together (one
//!   pipeline, or one per slot in a cluster).
//! - [`durability`], [`memory`]: what this Redis can lose, and how full it is.
//! - [`embedded`]: the private `redis-server` child `serve` starts by default, in its data dir.
//!
//! - [`sentinel`]: Sentinel mode, the master followed through failovers; [`acks`]: calls
//!   that wait for replicas to acknowledge them, and how many each shard's grants wait for;
//!   [`replication`]: what the master says of its replicas, for the operators and the acks
//!   rule.
//! - [`cluster`]: Redis Cluster mode, the state spread over the primaries by slot, with
//!   what has to reach every primary (listeners, walks, clocks) following the topology.
//! - [`clock`]: the node's clock as this process estimates it, for script deadlines (one
//!   offset per node; the module says why).

pub mod acks;
pub mod batch;
pub mod clock;
pub mod cluster;
pub mod connect;
pub mod durability;
pub mod embedded;
pub mod functions;
pub mod gate;
pub mod health;
pub mod memory;
pub mod replication;
pub mod scan;
pub mod sentinel;
pub mod status;
pub mod subscriber;

use std::sync::Arc;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use acks::{AckRule, AckSettings, Acked, Acks, Degraded};
pub use batch::Batch;
pub use clock::{RedisClock, wall_ms};
pub use cluster::sharded::ShardedGates;
pub use cluster::{Cluster, ClusterSettings};
pub use connect::{ConnectError, RedisSettings};
pub use gate::{Claim, Epoch, SubscriptionGate};
pub use health::{Health, Reach};
pub use memory::{MemoryState, RedisMemory};
pub use replication::{Replication, ReplicationView};
pub use sentinel::{Follower, SentinelSettings};
pub use status::RedisStatus;
pub use subscriber::{Gated, Route, SubscriberStatus, Topics};

/// A handle on the Redis Leasehold keeps its state in; cheap to clone (every clone shares one
/// multiplexed connection, which reconnects by itself, or follows the Sentinels' master).
#[derive(Clone)]
pub struct Redis {
    link: Link,
    /// The server's clock, as measured from here.
    clock: Arc<RedisClock>,
    /// Calls that wait for replicas.
    acks: Arc<Acks>,
    /// What the master says of its replicas.
    replication: Arc<ReplicationView>,
    db: i64,
    /// How long a call may take (`--redis-timeout-ms`).
    timeout: std::time::Duration,
    /// Whether Redis answers now, probed while a lease watch asks.
    health: Arc<Health>,
}

/// How calls reach the master.
#[derive(Clone)]
enum Link {
    Standalone {
        conn: ConnectionManager,
        /// What the subscriber and the acks pool connect with.
        client: Arc<::redis::Client>,
    },
    Sentinel(Arc<Follower>),
    Cluster {
        conn: ::redis::cluster_async::ClusterConnection,
        cluster: Arc<Cluster>,
    },
}

/// Whether a failed call says its connection (or the node) can no longer be trusted as the
/// master's: it broke, or the node refused a write as a replica.
pub(crate) fn distrusts(error: &::redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_unrecoverable_error()
        || error.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::ReadOnly)
}

/// What a [`Redis`] handle can do (see [`Redis::capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Pub/sub is sharded: functions publish with `SPUBLISH` (in the channel's shard) and a
    /// subscriber listens per channel, since sharded pub/sub has no patterns.
    pub sharded_pubsub: bool,
    /// A call whose connection dropped is re-sent by the client, so it may run twice, and a
    /// rollback must wait until no run of it can take effect any more.
    pub resends_calls: bool,
    /// Every key a function touches must be declared (keys live on several nodes).
    pub declared_keys: bool,
    /// Every key lives on one server, with one run id: keys of different slots can be moved
    /// in one command, and a RedLock node can be told apart from it.
    pub one_server: bool,
}

impl Redis {
    /// The handle for `settings` (connects lazily: a Redis that does not answer yet is no
    /// error here; calls answer 503 until it does). In Sentinel mode nothing is asked until
    /// [`Self::start`].
    pub fn connect(settings: &RedisSettings) -> Result<Self, ConnectError> {
        let (link, target, db) = match (&settings.sentinel, &settings.cluster) {
            (_, Some(cluster)) => {
                let cluster =
                    Cluster::new(cluster.clone(), settings.timeout).map_err(ConnectError::Url)?;
                let target = acks::Target::Cluster(cluster.clone());
                let conn = cluster.conn();
                (Link::Cluster { conn, cluster }, target, 0)
            }
            (Some(sentinel), None) => {
                let follower = Follower::new(sentinel.clone(), settings.timeout);
                let target = acks::Target::Following(follower.clone());
                (Link::Sentinel(follower), target, sentinel.db)
            }
            (None, None) => {
                let client = connect::client(&settings.url, settings.ca_file.as_deref())?;
                let db = client.get_connection_info().redis_settings().db();
                let conn = ConnectionManager::new_lazy_with_config(
                    client.clone(),
                    connect::policy(settings.timeout),
                )
                .map_err(ConnectError::Url)?;
                let client = Arc::new(client);
                let target = acks::Target::Fixed(client.clone());
                (Link::Standalone { conn, client }, target, db)
            }
        };
        Ok(Self {
            link,
            clock: Arc::default(),
            acks: Acks::new(settings.acks.clone(), target, settings.timeout),
            replication: Arc::default(),
            db,
            timeout: settings.timeout,
            health: Arc::default(),
        })
    }

    /// Starts what the handle runs in the background until `shutdown`: following the
    /// Sentinels' master (in that mode), and reading the master's replication.
    pub fn start(&self, shutdown: &CancellationToken) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        match &self.link {
            Link::Sentinel(follower) => tasks.push(follower.spawn(shutdown.clone())),
            Link::Cluster { cluster, .. } => tasks.push(cluster.spawn(shutdown.clone())),
            Link::Standalone { .. } => {}
        }
        tasks.push(replication::spawn(self.clone(), shutdown.clone()));
        tasks.push(self.spawn_health(shutdown));
        tasks
    }

    /// Starts the health probe alone (a RedLock node, which follows nothing and whose
    /// replication nobody reads): it pings only while someone subscribes to [`Self::health`].
    pub fn spawn_health(&self, shutdown: &CancellationToken) -> JoinHandle<()> {
        health::spawn(self.clone(), shutdown.clone())
    }

    /// Whether Redis answers now (probed while someone subscribes).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// The database the keys live in (0 but for a `redis://host/N` URL).
    pub fn db(&self) -> i64 {
        self.db
    }

    /// The Sentinel follower, in that mode.
    pub fn follower(&self) -> Option<&Arc<Follower>> {
        match &self.link {
            Link::Sentinel(follower) => Some(follower),
            Link::Standalone { .. } | Link::Cluster { .. } => None,
        }
    }

    /// The cluster, in that mode.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        match &self.link {
            Link::Cluster { cluster, .. } => Some(cluster),
            Link::Standalone { .. } | Link::Sentinel(_) => None,
        }
    }

    /// What this Redis can do and how it behaves, for code outside this module: it asks
    /// these rather than which mode Redis runs in, so a new mode is placed by the compiler
    /// (here), not found by grep.
    pub fn capabilities(&self) -> Capabilities {
        let spread = self.cluster().is_some();
        Capabilities {
            sharded_pubsub: spread,
            resends_calls: spread,
            declared_keys: spread,
            one_server: !spread,
        }
    }

    /// Which master calls go to: grows with every master taken on in Sentinel mode (0 while
    /// none is known, and always for one server), and with every topology change in Cluster
    /// mode. Per-node settings (keyspace notifications) are applied again when it changes.
    pub fn master_epoch(&self) -> u64 {
        if let Some(cluster) = self.cluster() {
            return cluster.epochs.load(std::sync::atomic::Ordering::Relaxed);
        }
        self.follower()
            .and_then(|f| f.master())
            .map_or(0, |m| m.epoch)
    }

    /// Whether a master is known (always, for one server: calls then find out).
    pub fn has_master(&self) -> bool {
        self.follower().is_none_or(|f| f.master().is_some())
    }

    /// The master's address, as far as this process knows it (in Cluster mode, the
    /// primaries', comma-separated).
    pub fn master_addr(&self) -> Option<String> {
        match &self.link {
            Link::Standalone { client, .. } => {
                Some(client.get_connection_info().addr().to_string())
            }
            Link::Sentinel(follower) => follower.master().map(|m| m.addr),
            Link::Cluster { cluster, .. } => {
                let primaries = cluster.topology().primaries();
                (!primaries.is_empty()).then(|| primaries.join(","))
            }
        }
    }

    /// The primaries (or the one master) a walk or a per-node setting must reach: their
    /// addresses, or `None` for the one node the handle talks to.
    pub fn nodes(&self) -> Vec<Option<String>> {
        match self.cluster() {
            Some(cluster) => cluster
                .topology()
                .primaries()
                .into_iter()
                .map(Some)
                .collect(),
            None => vec![None],
        }
    }

    /// [`Self::nodes`], after reading the cluster's topology if it was not read yet (at
    /// start-up; an unreachable cluster gives no node).
    pub async fn known_nodes(&self) -> Vec<Option<String>> {
        if let Some(cluster) = self.cluster()
            && cluster.topology().shards.is_empty()
            && let Err(e) = cluster.refresh().await
        {
            tracing::warn!(error = %e, "could not read the Redis Cluster's topology yet");
        }
        self.nodes()
    }

    /// A connection of its own to the node at `addr` (Cluster mode; for what must ask each
    /// primary itself, several commands in a row).
    pub async fn node_conn(
        &self,
        addr: &str,
    ) -> ::redis::RedisResult<::redis::aio::MultiplexedConnection> {
        let Some(cluster) = self.cluster() else {
            return Err(::redis::RedisError::from((
                ::redis::ErrorKind::Client,
                "not in Cluster mode",
            )));
        };
        let config = ::redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        cluster
            .settings()
            .node_client(addr)?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Runs `cmd` on `node` (one of [`Self::nodes`]).
    pub async fn on_node<T: ::redis::FromRedisValue>(
        &self,
        node: Option<&str>,
        cmd: Cmd,
    ) -> ::redis::RedisResult<T> {
        match (node, self.cluster()) {
            (Some(addr), Some(cluster)) => {
                let value = cluster.on_node(addr, cmd).await?;
                Ok(::redis::from_redis_value(value)?)
            }
            _ => cmd.query_async(&mut self.clone()).await,
        }
    }

    /// Calls that wait for replicas, and their figures.
    pub fn acks(&self) -> &Arc<Acks> {
        &self.acks
    }

    /// The master's replication, as last read.
    pub fn replication(&self) -> &Arc<ReplicationView> {
        &self.replication
    }

    /// Runs `cmd`, a call on the key `key`; when replicas of its shard must acknowledge it
    /// and `changed` says its reply granted or extended something, waits for them too. The
    /// acks are `None` when none were asked for, and say `no_replica` when `auto` had none
    /// to ask on a shard of a mode that fails over.
    pub async fn call_replicated(
        &mut self,
        cmd: &Cmd,
        key: &str,
        changed: impl FnOnce(&Value) -> bool,
    ) -> ::redis::RedisResult<(Value, Option<Acked>)> {
        let requirement = self.acks.requirement_for(key);
        match requirement.required {
            0 => {
                let value = cmd.query_async(self).await?;
                let acked = (requirement.no_replica && changed(&value)).then_some(Acked {
                    acked: 0,
                    required: 0,
                    no_replica: true,
                });
                Ok((value, acked))
            }
            // Boxed: the pool's and WAIT's states are the larger part of this future, and
            // every acquire's attempt holds it inline; without replicas they would cost
            // every parked waiter's request about 1.5 KB of memory for nothing (measured,
            // BENCHMARKS.md W14).
            _ => Box::pin(self.acks.call(cmd, requirement, changed)).await,
        }
    }

    /// The clock scripts' deadlines are set by (in a cluster, the slowest primary's).
    pub fn clock(&self) -> &RedisClock {
        &self.clock
    }

    /// Keeps the clock estimate fresh until `shutdown`.
    pub fn spawn_clock_sync(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        self.clock.clone().spawn_sync(self.clone(), shutdown)
    }

    /// Starts the process's subscriber on `topics`, routing what it hears to `routes`, until
    /// `shutdown`.
    /// `sharded`: in Cluster mode, the per-lock sharded subscriptions (see
    /// [`cluster::sharded`]).
    pub fn spawn_subscriber(
        &self,
        topics: Topics,
        routes: Vec<Arc<dyn Route>>,
        sharded: Option<Arc<ShardedGates>>,
        shutdown: CancellationToken,
    ) -> (Arc<SubscriberStatus>, JoinHandle<()>) {
        let source = match &self.link {
            Link::Standalone { client, .. } => {
                subscriber::Source::Fixed(Box::new((**client).clone()))
            }
            Link::Sentinel(follower) => subscriber::Source::Following(follower.watch()),
            Link::Cluster { cluster, .. } => {
                return cluster::subscriber::spawn(
                    cluster.clone(),
                    topics,
                    routes,
                    sharded,
                    self.timeout,
                    shutdown,
                );
            }
        };
        subscriber::spawn(source, topics, routes, shutdown)
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Standalone { conn, .. } => conn.req_packed_command(cmd),
            Link::Cluster { conn, .. } => conn.req_packed_command(cmd),
            Link::Sentinel(follower) => Box::pin(async move {
                let master = follower.master_within_timeout().await?;
                let mut conn = master.conn;
                let result = conn.req_packed_command(cmd).await;
                if let Err(e) = &result
                    && distrusts(e)
                {
                    follower.distrust(master.epoch, e);
                }
                result
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Standalone { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(follower) => Box::pin(async move {
                let master = follower.master_within_timeout().await?;
                let mut conn = master.conn;
                let result = conn.req_packed_commands(pipeline, offset, count).await;
                if let Err(e) = &result
                    && distrusts(e)
                {
                    follower.distrust(master.epoch, e);
                }
                result
            }),
        }
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}
