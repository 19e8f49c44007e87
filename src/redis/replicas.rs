//! Replica acknowledgements: a call that grants or extends a lease is followed by `WAIT`, so
//! its answer says how many replicas have the change, and a grant no replica has can be
//! refused (rolled back by the lock domain) instead of lost in a failover.
//!
//! `WAIT` covers the writes of the connection it runs on, and blocks that connection (a
//! `PING` queued behind `WAIT 5 800` came back after 848 ms), so the call and its `WAIT` go
//! one after the other on a connection of a small pool of their own ([`deadpool`]), never
//! on the shared multiplexed one; the `WAIT` only when the reply granted or extended
//! something (a refused acquire must not sit out the ack timeout while replicas are away). Connections to a master that is no longer the master are dropped
//! when they come back to the pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Cmd, RedisResult, Value};
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};

use super::sentinel::Follower;

/// How many replicas must acknowledge a grant before it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckRule {
    /// One when the master has (had) a replica, none while it never had one: a master seen
    /// with a replica keeps asking for one (a replica that stops is the case acks are for).
    Auto,
    Exactly(u32),
}

impl std::str::FromStr for AckRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        s.parse()
            .map(Self::Exactly)
            .map_err(|_| format!("{s:?} is neither \"auto\" nor a number of replicas"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckSettings {
    pub rule: AckRule,
    /// How long `WAIT` may wait for them.
    pub timeout: Duration,
    /// Connections kept for calls that wait (each blocks its connection while it waits).
    pub connections: usize,
}

/// What a call's `WAIT` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub acked: u32,
    pub required: u32,
}

impl Acked {
    /// Fewer replicas have it than required: the change must not stand.
    pub fn short(self) -> bool {
        self.acked < self.required
    }
}

/// What the operators see of acknowledgements.
#[derive(Debug, Default)]
pub struct AckStats {
    pub waits: AtomicU64,
    pub short: AtomicU64,
    /// The last `WAIT`'s answer.
    pub last_acked: AtomicU32,
}

/// Where the pool's connections go: the one server, the master the Sentinels name now, or
/// a cluster (each pooled connection then is a cluster connection of its own, and a call's
/// `WAIT` goes to the node its function ran on).
#[derive(Clone)]
pub(super) enum Target {
    Fixed(Arc<::redis::Client>),
    Following(Arc<Follower>),
    Cluster(Arc<super::Cluster>),
}

/// A pooled connection, and the master epoch it was made for.
pub(super) struct AckConn {
    conn: AckLink,
    epoch: u64,
}

enum AckLink {
    Node(MultiplexedConnection),
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl AckLink {
    /// Runs `cmd` and, when `changed` says its reply granted or extended something, `WAIT`s
    /// for `required` replicas on the connection it ran on (`WAIT` counts the writes of its
    /// own connection): `(reply, acked)`.
    ///
    /// On a cluster the two go as one pipeline, which redis-rs routes by the call's key and
    /// sends again whole to wherever a `MOVED` or `ASK` points: a `WAIT` sent after the call
    /// would be routed by a slot map that may not know yet where the call went (after a
    /// failover, to the old primary, a replica by then, which refuses `WAIT`; during a slot
    /// move, to a node where this connection wrote nothing, which would count every replica
    /// as having it). The cost: a call that changed nothing waits too, at once while the
    /// replicas keep up, up to the ack timeout while they do not (when grants there are
    /// refused anyway).
    async fn call_and_wait(
        &mut self,
        cmd: &Cmd,
        required: u32,
        wait_ms: u64,
        changed: impl FnOnce(&Value) -> bool,
    ) -> RedisResult<(Value, Option<u32>)> {
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(required).arg(wait_ms);
        match self {
            Self::Node(conn) => {
                let value: Value = cmd.query_async(conn).await?;
                if !changed(&value) {
                    return Ok((value, None));
                }
                Ok((value, Some(wait.query_async(conn).await?)))
            }
            Self::Cluster(conn) => {
                let mut pipe = ::redis::pipe();
                pipe.add_command(cmd.clone()).add_command(wait);
                let (value, acked): (Value, u32) = pipe.query_async(conn).await?;
                let changed = changed(&value);
                Ok((value, changed.then_some(acked)))
            }
        }
    }
}

pub(super) struct Manager {
    target: Target,
    timeout: Duration,
    /// The `WAIT` timeout, which a response may take on top of the call's.
    wait: Duration,
}

impl Manager {
    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout.min(Duration::from_millis(500))))
            .set_response_timeout(Some(self.timeout + self.wait))
    }
}

impl managed::Manager for Manager {
    type Type = AckConn;
    type Error = ::redis::RedisError;

    async fn create(&self) -> Result<AckConn, ::redis::RedisError> {
        let (client, epoch) = match &self.target {
            Target::Cluster(cluster) => {
                let conn = cluster
                    .client()
                    .get_async_connection_with_config(
                        ::redis::cluster::ClusterConfig::new()
                            .set_connection_timeout(self.timeout.min(Duration::from_millis(500)))
                            .set_response_timeout(self.timeout + self.wait),
                    )
                    .await?;
                return Ok(AckConn {
                    conn: AckLink::Cluster(conn),
                    epoch: 0,
                });
            }
            Target::Fixed(client) => (client.clone(), 0),
            Target::Following(follower) => {
                let master = follower.master_within_timeout().await?;
                (master.client, master.epoch)
            }
        };
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config())
            .await?;
        Ok(AckConn {
            conn: AckLink::Node(conn),
            epoch,
        })
    }

    async fn recycle(&self, conn: &mut AckConn, _: &Metrics) -> RecycleResult<::redis::RedisError> {
        match &self.target {
            Target::Following(follower)
                if follower.master().map(|m| m.epoch) != Some(conn.epoch) =>
            {
                Err(RecycleError::message("made for an earlier master"))
            }
            _ => Ok(()),
        }
    }
}

/// Calls that wait for replicas, and what they found.
pub struct Acks {
    settings: AckSettings,
    pool: managed::Pool<Manager>,
    target: Target,
    /// Under [`AckRule::Auto`]: 1 once the master was seen with a replica.
    seen_replica: std::sync::atomic::AtomicBool,
    pub stats: AckStats,
}

impl Acks {
    pub(super) fn new(settings: AckSettings, target: Target, timeout: Duration) -> Arc<Self> {
        let manager = Manager {
            target: target.clone(),
            timeout,
            wait: settings.timeout,
        };
        let pool = managed::Pool::builder(manager)
            .max_size(settings.connections.max(1))
            .build()
            .expect("a pool without a runtime-bound timeout builds");
        Arc::new(Self {
            settings,
            pool,
            target,
            seen_replica: std::sync::atomic::AtomicBool::new(false),
            stats: AckStats::default(),
        })
    }

    pub fn settings(&self) -> &AckSettings {
        &self.settings
    }

    /// Replicas each grant needs now (0: calls do not wait).
    pub fn required(&self) -> u32 {
        match self.settings.rule {
            AckRule::Exactly(n) => n,
            AckRule::Auto => u32::from(self.seen_replica.load(Ordering::Relaxed)),
        }
    }

    /// The master has `replicas` connected now (from `INFO replication`).
    pub fn saw_replicas(&self, replicas: usize) {
        if replicas > 0 && !self.seen_replica.swap(true, Ordering::Relaxed) {
            tracing::info!("the Redis master has a replica: grants now wait for one to have them");
        }
    }

    /// Runs `cmd` on a connection of the pool and, when `changed` says its reply granted or
    /// extended something, `WAIT`s on that same connection for `required` replicas (a
    /// refusal changed nothing worth waiting for).
    pub async fn call(
        &self,
        cmd: &Cmd,
        required: u32,
        changed: impl FnOnce(&Value) -> bool,
    ) -> RedisResult<(Value, Option<Acked>)> {
        let pool_timeout = self.pool.manager().timeout;
        let mut conn = match tokio::time::timeout(pool_timeout, self.pool.get()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(managed::PoolError::Backend(e))) => return Err(e),
            Ok(Err(e)) => return Err(io_error(e.to_string())),
            Err(_) => return Err(io_error("no connection free to wait for replicas".into())),
        };
        let epoch = conn.epoch;
        let result = async {
            let wait_ms = u64::try_from(self.settings.timeout.as_millis()).unwrap_or(u64::MAX);
            conn.conn
                .call_and_wait(cmd, required, wait_ms, changed)
                .await
        }
        .await;
        match result {
            Ok((value, None)) => Ok((value, None)),
            Ok((value, Some(acked))) => {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                self.stats.last_acked.store(acked, Ordering::Relaxed);
                let acked = Acked { acked, required };
                if acked.short() {
                    self.stats.short.fetch_add(1, Ordering::Relaxed);
                }
                Ok((value, Some(acked)))
            }
            Err(e) => {
                if super::distrusts(&e) {
                    // Not back into the pool: it may be a dead connection or an old master's.
                    drop(managed::Object::take(conn));
                    if let Target::Following(follower) = &self.target {
                        follower.distrust(epoch, &e);
                    }
                }
                Err(e)
            }
        }
    }
}

fn io_error(detail: String) -> ::redis::RedisError {
    ::redis::RedisError::from((::redis::ErrorKind::Io, "replica acks", detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_from_auto_or_a_count() {
        assert_eq!("auto".parse(), Ok(AckRule::Auto));
        assert_eq!("0".parse(), Ok(AckRule::Exactly(0)));
        assert_eq!("2".parse(), Ok(AckRule::Exactly(2)));
        assert!("-1".parse::<AckRule>().is_err());
        assert!("one".parse::<AckRule>().is_err());
    }

    #[test]
    fn a_grant_is_short_below_the_required_count() {
        assert!(
            Acked {
                acked: 0,
                required: 1
            }
            .short()
        );
        assert!(
            !Acked {
                acked: 1,
                required: 1
            }
            .short()
        );
        assert!(
            !Acked {
                acked: 2,
                required: 1
            }
            .short()
        );
        assert!(
            !Acked {
                acked: 0,
                required: 0
            }
            .short()
        );
    }
}
