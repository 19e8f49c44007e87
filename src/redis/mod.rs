//! The one place that knows Redis connections. Everything else takes a [`Redis`] handle and
//! sends commands through it (`query_async(&mut redis)`: it is a `ConnectionLike`), or asks
//! it for what only the seam can do: load a function library, walk the keyspace, read the
//! memory, start the subscriber. The handle is one standalone server (the address, TLS,
//! timeouts and reconnects configured once here) or, in Sentinel mode, whichever node the
//! Sentinels name master now, behind the same calls.
//!
//! - [`connect`]: the client (URL, TLS with a private CA) and the connection policy.
//! - [`functions`]: loading a Redis Function library, and telling a "not loaded" error.
//! - [`subscriber`]: the process's one pub/sub connection, routing `(channel, payload)` to
//!   whoever registered a [`subscriber::Route`]; [`gate`]: subscriptions held only while
//!   needed.
//! - [`scan`]: walking the keyspace page by page.
//! - [`durability`], [`memory`]: what this Redis can lose, and how full it is.
//! - [`embedded`]: the private `redis-server` child `serve` starts by default, in its data dir.
//!
//! - [`sentinel`]: Sentinel mode, the master followed through failovers; [`replicas`]:
//!   calls that wait for replicas to acknowledge them; [`replication`]: what the master says
//!   of its replicas, for the operators and the acks rule.
//! - [`clock`]: the node's clock as this process estimates it, for script deadlines (one
//!   offset per node; the module says why).

pub mod clock;
pub mod connect;
pub mod durability;
pub mod embedded;
pub mod functions;
pub mod gate;
pub mod memory;
pub mod replicas;
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

pub use clock::{RedisClock, wall_ms};
pub use connect::{ConnectError, RedisSettings};
pub use gate::{Claim, Epoch, SubscriptionGate};
pub use memory::{MemoryState, RedisMemory};
pub use replicas::{AckRule, AckSettings, Acked, Acks};
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
}

/// Whether a failed call says its connection (or the node) can no longer be trusted as the
/// master's: it broke, or the node refused a write as a replica.
pub(crate) fn distrusts(error: &::redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_unrecoverable_error()
        || error.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::ReadOnly)
}

impl Redis {
    /// The handle for `settings` (connects lazily: a Redis that does not answer yet is no
    /// error here; calls answer 503 until it does). In Sentinel mode nothing is asked until
    /// [`Self::start`].
    pub fn connect(settings: &RedisSettings) -> Result<Self, ConnectError> {
        let (link, target, db) = match &settings.sentinel {
            Some(sentinel) => {
                let follower = Follower::new(sentinel.clone(), settings.timeout);
                let target = replicas::Target::Following(follower.clone());
                (Link::Sentinel(follower), target, sentinel.db)
            }
            None => {
                let client = connect::client(&settings.url, settings.ca_file.as_deref())?;
                let db = client.get_connection_info().redis_settings().db();
                let conn = ConnectionManager::new_lazy_with_config(
                    client.clone(),
                    connect::policy(settings.timeout),
                )
                .map_err(ConnectError::Url)?;
                let client = Arc::new(client);
                let target = replicas::Target::Fixed(client.clone());
                (Link::Standalone { conn, client }, target, db)
            }
        };
        Ok(Self {
            link,
            clock: Arc::default(),
            acks: Acks::new(settings.acks.clone(), target, settings.timeout),
            replication: Arc::default(),
            db,
        })
    }

    /// Starts what the handle runs in the background until `shutdown`: following the
    /// Sentinels' master (in that mode), and reading the master's replication.
    pub fn start(&self, shutdown: &CancellationToken) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Link::Sentinel(follower) = &self.link {
            tasks.push(follower.spawn(shutdown.clone()));
        }
        tasks.push(replication::spawn(self.clone(), shutdown.clone()));
        tasks
    }

    /// The database the keys live in (0 but for a `redis://host/N` URL).
    pub fn db(&self) -> i64 {
        self.db
    }

    /// The Sentinel follower, in that mode.
    pub fn follower(&self) -> Option<&Arc<Follower>> {
        match &self.link {
            Link::Sentinel(follower) => Some(follower),
            Link::Standalone { .. } => None,
        }
    }

    /// Which master calls go to: grows with every master taken on in Sentinel mode (0 while
    /// none is known, and always for one server). Per-node settings (keyspace
    /// notifications) are applied again when it changes.
    pub fn master_epoch(&self) -> u64 {
        self.follower()
            .and_then(|f| f.master())
            .map_or(0, |m| m.epoch)
    }

    /// Whether a master is known (always, for one server: calls then find out).
    pub fn has_master(&self) -> bool {
        self.follower().is_none_or(|f| f.master().is_some())
    }

    /// The master's address, as far as this process knows it.
    pub fn master_addr(&self) -> Option<String> {
        match &self.link {
            Link::Standalone { client, .. } => {
                Some(client.get_connection_info().addr().to_string())
            }
            Link::Sentinel(follower) => follower.master().map(|m| m.addr),
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

    /// Runs `cmd`; when replicas must acknowledge it and `changed` says its reply granted or
    /// extended something, waits for them too (the acks are `None` otherwise).
    pub async fn call_replicated(
        &mut self,
        cmd: &Cmd,
        changed: impl FnOnce(&Value) -> bool,
    ) -> ::redis::RedisResult<(Value, Option<Acked>)> {
        match self.acks.required() {
            0 => Ok((cmd.query_async(self).await?, None)),
            // Boxed: the pool's and WAIT's states are the larger part of this future, and
            // every acquire's attempt holds it inline; without replicas they would cost
            // every parked waiter's request about 1.5 KB of memory for nothing (measured,
            // BENCHMARKS.md W14).
            required => Box::pin(self.acks.call(cmd, required, changed)).await,
        }
    }

    /// The clock of the node a script on any key runs on (one node today).
    pub fn clock(&self) -> &RedisClock {
        &self.clock
    }

    /// Keeps the clock estimate fresh until `shutdown`.
    pub fn spawn_clock_sync(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        self.clock.clone().spawn_sync(self.clone(), shutdown)
    }

    /// Starts the process's subscriber on `topics`, routing what it hears to `routes`, until
    /// `shutdown`.
    pub fn spawn_subscriber(
        &self,
        topics: Topics,
        routes: Vec<Arc<dyn Route>>,
        shutdown: CancellationToken,
    ) -> (Arc<SubscriberStatus>, JoinHandle<()>) {
        let source = match &self.link {
            Link::Standalone { client, .. } => {
                subscriber::Source::Fixed(Box::new((**client).clone()))
            }
            Link::Sentinel(follower) => subscriber::Source::Following(follower.watch()),
        };
        subscriber::spawn(source, topics, routes, shutdown)
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Standalone { conn, .. } => conn.req_packed_command(cmd),
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
