//! RedLock (`kind: "redlock"`): one lock over N independent Redis masters
//! (`--redlock-nodes`), granted when a majority of them granted it within its validity time,
//! as antirez's algorithm (redis.io "Distributed Locks with Redis", reference implementation
//! redlock-rb) describes.
//!
//! Each node is a whole Leasehold store of its own ([`nodes`]): the same Lua functions write
//! Redisson's RLock layout there (hash `name`, field `<lease-id>:1` → reentry count, PEXPIRE,
//! unlock message on `redisson_lock__channel:{name}`), so Redisson's `RedissonRedLock` on the
//! same nodes excludes us and we it. The lease is one token, hence one lease id (of the
//! RedLock family, see [`super::Placement`]) and one holder field, on every node.
//!
//! - Acquire ([`acquire`]): every node is asked at once with a per-node timeout small against
//!   the TTL ([`quorum::node_timeout`]); granted when a majority granted and the validity
//!   ([`quorum::validity`]: TTL − elapsed − drift) is positive. Otherwise every node is told
//!   to let go (also those that failed or timed out: their grant may have happened), and the
//!   answer is [`LeaseError::NoQuorum`] (503), or the lock held (409) when so many nodes
//!   said "held" that no majority was possible.
//! - Waiting wakes on any node's unlock message: each node has its own subscriber and waiter
//!   registry, and a waiter registers on all of them; never a poll (the holder's TTL running
//!   out is the one timer, as for every lock).
//! - Heartbeat and release ([`lease`]): a majority must extend it within the validity, or it
//!   is 503 (a majority says the lease is gone: 410, and the rest are let go).
//! - Inspection ([`inspect`]): a name is held as RedLock by the holders a majority of nodes
//!   show; operators' force release and eviction ([`admin`]) act on every node.
//! - The main Redis indexes RedLock leases and carries their events ([`ledger`]); the expiry
//!   sweeper ([`sweeper`]) records an expiry once a majority of the nodes let the lease go.
//! - Fencing is best effort: there is no single counter. A grant's token is the largest of
//!   the granting nodes' counters (docs/book/src/redis/redlock.md says what that promises).
//!
//! It knows nothing of HTTP; the leases layer ([`super::Leases`]) routes RedLock leases here.

pub mod acquire;
pub mod admin;
pub mod inspect;
pub mod lease;
pub mod ledger;
pub mod nodes;
pub mod quorum;
pub mod sweeper;
mod vote;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::LeaseError;
use crate::locks::wakeups::{Parking, WakeEpoch};
use crate::locks::{Grant, LockSettings, Locks, Observer, Renewal};
use crate::redis::Redis;

pub use nodes::{Node, RedlockSettings, RedlockSetupError};
pub use watch::RedWatch;

/// The RedLock nodes, as the leases layer uses them; cheap to clone.
#[derive(Clone)]
pub struct Redlock {
    nodes: Arc<[Node]>,
    redis_timeout: Duration,
    shutdown: CancellationToken,
}

/// How many of the nodes acknowledged a grant or heartbeat, and for how long it holds.
#[derive(Debug, Clone, Copy)]
pub struct QuorumAck {
    pub nodes_acked: u32,
    pub validity: Duration,
}

/// A RedLock grant.
#[derive(Debug)]
pub struct RedGrant {
    /// The lease as the node with the largest fencing counter granted it (its
    /// `fencing_token` is that largest counter; its kind is `Redlock`).
    pub grant: Grant,
    pub ack: QuorumAck,
}

/// A RedLock heartbeat.
#[derive(Debug)]
pub struct RedRenewal {
    pub renewal: Renewal,
    pub ack: QuorumAck,
}

/// How long a woken or armed waiter waits at most for a node's unlock subscription to be
/// armed before it relies on the other nodes and its timer.
const ARM_WAIT: Duration = Duration::from_millis(500);

/// How long a read of one node (a lease's or a lock's state) may take: a node that is down
/// must not hold up the answer of the others for the whole Redis timeout (a failed call waits
/// that out, since a write may still land; a read changes nothing).
const READ_TIMEOUT: Duration = Duration::from_millis(250);

impl Redlock {
    /// Connects the nodes and starts their background tasks until `shutdown`; refuses nodes
    /// that are not independent masters (or are `main`, the Redis of everything else). The
    /// nodes report to `observer` as nodes (their own series), never as lease operations:
    /// the leases layer reports each RedLock call once.
    pub async fn start(
        settings: &RedlockSettings,
        lock_settings: &LockSettings,
        observer: &Arc<dyn Observer>,
        main: Option<&Redis>,
        shutdown: &CancellationToken,
    ) -> Result<(Self, Vec<tokio::task::JoinHandle<()>>), RedlockSetupError> {
        let (nodes, tasks) = nodes::connect(settings, lock_settings, observer, shutdown)?;
        // (On a refusal the caller stops: its shutdown ends the nodes' tasks.)
        nodes::check_independent(
            &nodes,
            main,
            lock_settings.redis_timeout.max(Duration::from_secs(1)),
        )
        .await?;
        for node in &nodes {
            if let Err(e) = node.locks.backend().load_functions().await {
                tracing::warn!(node = %node.url, error = %e, "could not load the function library on a RedLock node yet");
            }
        }
        Ok((
            Self {
                nodes: nodes.into(),
                redis_timeout: lock_settings.redis_timeout,
                shutdown: shutdown.clone(),
            },
            tasks,
        ))
    }

    /// The same nodes with each node's lock domain mapped (into a tenant's key space).
    pub fn map_locks(&self, f: impl Fn(&Locks) -> Locks) -> Self {
        Self {
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    locks: f(&n.locks),
                    ..n.clone()
                })
                .collect(),
            redis_timeout: self.redis_timeout,
            shutdown: self.shutdown.clone(),
        }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A majority of the nodes.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    fn no_quorum(&self, acked: usize) -> LeaseError {
        LeaseError::NoQuorum {
            acked,
            quorum: self.quorum(),
            nodes: self.nodes.len(),
        }
    }

    /// How long a read of one node may take.
    fn read_timeout(&self) -> Duration {
        READ_TIMEOUT.min(self.redis_timeout)
    }

    /// The wake-up epoch of `keys[i]` in node i's registry, taken before a look at the nodes
    /// (see [`Self::park`]).
    fn epochs(&self, keys: &[&str]) -> Vec<WakeEpoch> {
        self.nodes
            .iter()
            .zip(keys)
            .map(|(n, key)| n.locks.redlock_node().waiter_registry().epoch(key))
            .collect()
    }

    /// Parks a waiter or a watch under `keys[i]` on every node i that answered its last look
    /// (`answered`), until `until` (at most [`ARM_WAIT`], so a node whose subscription will
    /// not arm holds nothing up): the parkings, kept while the caller sleeps, or `None` when a
    /// node's subscription was only just armed, so the caller must look again (a message
    /// may have come before it listened). A node that failed to answer is not waited for.
    async fn park(
        &self,
        keys: &[&str],
        epochs: Vec<WakeEpoch>,
        answered: &[bool],
        until: Instant,
    ) -> Option<Vec<Parking>> {
        let parks = join_all(self.nodes.iter().zip(keys).zip(epochs).zip(answered).map(
            |(((n, key), epoch), answered)| async move {
                if !answered {
                    return Parking::Unheard;
                }
                let until = until.min(Instant::now() + ARM_WAIT);
                n.locks
                    .redlock_node()
                    .waiter_registry()
                    .park(key, epoch, until)
                    .await
            },
        ))
        .await;
        (!parks.iter().any(|p| matches!(p, Parking::Armed))).then_some(parks)
    }
}
