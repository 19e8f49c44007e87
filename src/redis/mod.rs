//! The one place that knows Redis connections. Everything else takes a [`Redis`] handle and
//! sends commands through it (`query_async(&mut redis)`: it is a `ConnectionLike`), or asks
//! it for what only the seam can do: load a function library, walk the keyspace, read the
//! memory, start the subscriber. Today the handle is one standalone server (the address, TLS,
//! timeouts and reconnects configured once here); Sentinel and Cluster modes belong inside
//! it, behind the same calls.
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
//! - [`clock`]: the node's clock as this process estimates it, for script deadlines (one
//!   offset per node; the module says why).

pub mod clock;
pub mod connect;
pub mod durability;
pub mod embedded;
pub mod functions;
pub mod gate;
pub mod memory;
pub mod scan;
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
pub use subscriber::{Gated, Route, SubscriberStatus, Topics};

/// A handle on the Redis Leasehold keeps its state in; cheap to clone (every clone shares one
/// multiplexed connection, which reconnects by itself).
#[derive(Clone)]
pub struct Redis {
    conn: ConnectionManager,
    /// What the subscriber connects with (a pub/sub connection of its own).
    client: Arc<::redis::Client>,
    /// The server's clock, as measured from here.
    clock: Arc<RedisClock>,
}

impl Redis {
    /// The handle for `settings` (connects lazily: a Redis that does not answer yet is no
    /// error here; calls answer 503 until it does).
    pub fn connect(settings: &RedisSettings) -> Result<Self, ConnectError> {
        let client = connect::client(&settings.url, settings.ca_file.as_deref())?;
        let conn = ConnectionManager::new_lazy_with_config(
            client.clone(),
            connect::policy(settings.timeout),
        )
        .map_err(ConnectError::Url)?;
        Ok(Self {
            conn,
            client: Arc::new(client),
            clock: Arc::default(),
        })
    }

    /// The database the keys live in (0 but for a `redis://host/N` URL).
    pub fn db(&self) -> i64 {
        self.client.get_connection_info().redis_settings().db()
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
        subscriber::spawn((*self.client).clone(), topics, routes, shutdown)
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
