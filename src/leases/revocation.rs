//! Cooperative revocation, wherever the lease lives: the request is recorded with the lease
//! (`lua/revoke.lua`: on the main Redis, or on every RedLock node), and its deadline kept by
//! [`Deadlines`] on the instance that took the request, which evicts the lease then unless it
//! ended first. Should that instance stop before the deadline, the lease still ends by it at
//! the latest once its last expiry passes: a heartbeat extends it no further than the deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{LeaseError, Leases, Placement};
use crate::locks::ops::eviction::Eviction;
use crate::locks::{LeaseId, LockError, LockName, Resource, Revoked, Timestamp};

/// Deadlines an instance keeps at most; beyond that a revocation is still recorded (its
/// holder told, its heartbeats capped) and ends by its lease's expiry.
const MAX_PENDING: usize = 10_000;

impl Leases {
    /// Evicts revoked lease `id` of `name` at its `deadline`: `Some(left)` when Redis's clock
    /// says the deadline is that far off still. (RedLock: on every node, by this instance's
    /// clock: the nodes' clocks are independent.)
    async fn evict_revoked(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        deadline: Timestamp,
        by: &str,
        why: &str,
    ) -> Result<Option<Duration>, LeaseError> {
        if Self::placement(resource, id) == Placement::Redlock {
            return self.evict(resource, name, id, by, why).await.map(|_| None);
        }
        let evicted = self
            .locks
            .evict_at(resource, name, id, Some(deadline), (by, why))
            .await?;
        Ok(match evicted {
            Eviction::Done(_) => None,
            Eviction::TooEarly(left) => Some(left),
        })
    }

    /// Asks the holder of lease `id` of `name` to let go within `grace_ms` (see
    /// [`crate::locks::ops::revoke`]), where the lease lives.
    pub async fn revoke(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        grace_ms: u64,
        by: &str,
        reason: &str,
    ) -> Result<Revoked, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => Ok(self.nodes()?.revoke(name, id, grace_ms, by, reason).await?),
            _ => Ok(self
                .locks
                .revoke(resource, name, id, grace_ms, by, reason)
                .await?),
        }
    }
}

/// Sleeps until `deadline` (first `wait`, by this instance's estimate of Redis's clock) and
/// evicts the lease, unless it ended first; Redis checks the deadline by its own clock and
/// answers how much is left when the estimate woke too early, a few times at most. Whether
/// it evicted.
async fn enforce(
    leases: &Leases,
    (resource, name, id): (Resource, &LockName, LeaseId),
    deadline: Timestamp,
    wait: u64,
    (by, why): (&str, &str),
) -> bool {
    let mut wait = Duration::from_millis(wait);
    for _ in 0..EARLY_TRIES {
        tokio::time::sleep(wait).await;
        match leases
            .evict_revoked(resource, name, id, deadline, by, why)
            .await
        {
            Ok(None) => return true,
            Ok(Some(left)) => wait = left + Duration::from_millis(1),
            // Released (or gone) in time: nothing to do.
            Err(LeaseError::Lock(LockError::UnknownLease | LockError::LeaseLost(_))) => {
                return false;
            }
            Err(e) => {
                tracing::warn!(
                    lock = %name, lease = %id, error = %e,
                    "could not evict a revoked lease at its deadline (its heartbeats are \
                     capped there: it ends by its last expiry)"
                );
                return false;
            }
        }
    }
    false
}

/// How many times an eviction is tried again when Redis says the deadline has not come (the
/// estimate of its clock was ahead): each try waits what Redis said is left.
const EARLY_TRIES: usize = 4;

/// The revocations' deadlines this instance keeps: one task each, asleep until its deadline,
/// stopped on shutdown.
#[derive(Clone)]
pub struct Deadlines {
    pending: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

impl Deadlines {
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            pending: Arc::default(),
            shutdown,
        }
    }

    /// How many deadlines this instance keeps now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Evicts lease `id` of `name` at `deadline` (Redis's clock) unless it ended first,
    /// recorded as done `by` for the revocation's `reason`; `on_enforced` runs once it was
    /// evicted (the audit entry). `false` when this instance keeps as many as it may.
    pub fn keep<F>(
        &self,
        leases: Leases,
        what: (Resource, LockName, LeaseId),
        deadline: Timestamp,
        by: String,
        reason: String,
        on_enforced: F,
    ) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.pending.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        let (pending, shutdown) = (self.pending.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            let (resource, name, id) = what;
            let wait = deadline.0.saturating_sub(leases.locks.redis_now_ms());
            let why = if reason.is_empty() {
                "revoked: the grace ended".to_owned()
            } else {
                format!("revoked: {reason}")
            };
            let enforce = enforce(&leases, (resource, &name, id), deadline, wait, (&by, &why));
            tokio::select! {
                enforced = enforce => if enforced { on_enforced.await },
                () = shutdown.cancelled() => {}
            }
            pending.fetch_sub(1, Ordering::Relaxed);
        });
        true
    }
}
