//! Replica acknowledgements: a call that grants or extends a lease is followed by `WAIT`, so
//! its answer says how many replicas have the change, and a grant too few replicas have can
//! be refused (rolled back by the lock domain) instead of lost in a failover.
//!
//! - [`rule`]: how many each shard's grants wait for (`--min-replica-acks`), and what a
//!   grant says when its shard has no replica to ask;
//! - [`census`]: what each shard has that could acknowledge, as last read;
//! - [`pool`]: the connections the calls and their `WAIT`s run on.
//!
//! The `WAIT` is sent only when the reply granted or extended something (a refused acquire
//! must not sit out the ack timeout while replicas are away).

pub mod census;
mod pool;
pub mod rule;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ::redis::{Cmd, RedisResult, Value};
use deadpool::managed;

pub use census::Census;
pub(super) use pool::Target;
pub use rule::{AckRule, AckSettings, Acked, Degraded, Requirement, ShardReplicas};

/// What the operators see of acknowledgements.
#[derive(Debug, Default)]
pub struct AckStats {
    pub waits: AtomicU64,
    pub short: AtomicU64,
    /// The last `WAIT`'s answer.
    pub last_acked: AtomicU32,
    /// Grants and heartbeats answered on a shard with no replica to ask (`auto`).
    pub no_replica: AtomicU64,
    /// Heartbeats answered though too few replicas acknowledged them.
    pub short_heartbeats: AtomicU64,
}

/// Calls that wait for replicas, and what they found.
pub struct Acks {
    settings: AckSettings,
    pool: managed::Pool<pool::Manager>,
    target: Target,
    census: Census,
    pub stats: AckStats,
}

impl Acks {
    pub(super) fn new(settings: AckSettings, target: Target, timeout: Duration) -> Arc<Self> {
        let manager = pool::Manager {
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
            census: Census::default(),
            stats: AckStats::default(),
        })
    }

    pub fn settings(&self) -> &AckSettings {
        &self.settings
    }

    /// The readings the rule goes by (the readers write them).
    pub fn census(&self) -> &Census {
        &self.census
    }

    /// Whether this mode has a failover authority (Sentinel, Cluster).
    fn fails_over(&self) -> bool {
        !matches!(self.target, Target::Fixed(_))
    }

    /// What the shard at `primary` (its address in Cluster mode, [`census::THE_MASTER`]
    /// otherwise) has that could acknowledge.
    pub fn shard(&self, primary: &str) -> ShardReplicas {
        let promotable = match &self.target {
            Target::Fixed(_) => None,
            Target::Following(follower) => follower.promotable(),
            Target::Cluster(cluster) => cluster.promotable(primary),
        };
        ShardReplicas {
            linked: self.census.linked_to(primary),
            promotable,
        }
    }

    /// What a call on the key `key` must wait for now.
    pub fn requirement_for(&self, key: &str) -> Requirement {
        if let AckRule::Exactly(required) = self.settings.rule {
            return Requirement {
                required,
                no_replica: false,
            };
        }
        let Target::Cluster(cluster) = &self.target else {
            return self.requirement_at(census::THE_MASTER);
        };
        let topology = cluster.topology();
        match topology.owner(crate::redis::cluster::topology::key_slot(key)) {
            Some(shard) => {
                let replicas = ShardReplicas {
                    linked: self.census.linked_to(&shard.primary),
                    promotable: cluster.promotable(&shard.primary),
                };
                rule::requirement(self.settings.rule, replicas, true)
            }
            // Not read yet: ask as for a shard that has one, which a replica-less shard
            // answers short (refused, once) rather than unreplicated.
            None => Requirement {
                required: 1,
                no_replica: false,
            },
        }
    }

    /// The requirement on the shard at `primary` (see [`Self::shard`]).
    pub fn requirement_at(&self, primary: &str) -> Requirement {
        rule::requirement(self.settings.rule, self.shard(primary), self.fails_over())
    }

    /// Runs `cmd` on a connection of the pool and, when `changed` says its reply granted or
    /// extended something, `WAIT`s on that same connection for the replicas `requirement`
    /// asks for (a refusal changed nothing worth waiting for).
    pub async fn call(
        &self,
        cmd: &Cmd,
        requirement: Requirement,
        changed: impl FnOnce(&Value) -> bool,
    ) -> RedisResult<(Value, Option<Acked>)> {
        let required = requirement.required;
        let pool_timeout = self.pool.manager().timeout;
        let mut conn = match tokio::time::timeout(pool_timeout, self.pool.get()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(managed::PoolError::Backend(e))) => return Err(e),
            Ok(Err(e)) => return Err(io_error(e.to_string())),
            Err(_) => return Err(io_error("no connection free to wait for replicas".into())),
        };
        let epoch = conn.epoch;
        let wait_ms = u64::try_from(self.settings.timeout.as_millis()).unwrap_or(u64::MAX);
        let result = conn
            .conn
            .call_and_wait(cmd, required, wait_ms, changed)
            .await;
        match result {
            Ok((value, None)) => Ok((value, None)),
            Ok((value, Some(acked))) => {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                self.stats.last_acked.store(acked, Ordering::Relaxed);
                let acked = Acked {
                    acked,
                    required,
                    no_replica: false,
                };
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

    /// Counts what was answered degraded (the metric and the Redis page).
    pub fn answered(&self, degraded: Option<Degraded>) {
        match degraded {
            Some(Degraded::NoReplica) => &self.stats.no_replica,
            Some(Degraded::NotReplicated) => &self.stats.short_heartbeats,
            None => return,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

fn io_error(detail: String) -> ::redis::RedisError {
    ::redis::RedisError::from((::redis::ErrorKind::Io, "replica acks", detail))
}
