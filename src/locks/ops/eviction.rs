//! Targeted eviction: an admin removes one lease (a dead reader among three, one trainer's
//! permits) and leaves the other holders alone. Audited like a force release: the history
//! entry names the lease, who asked and why.

use crate::locks::ops::inspect::holder_view;
use crate::locks::scripts::evict::Evict;
use crate::locks::scripts::force_release::ForceReleaseReply;
use crate::locks::types::request_nonce;
use crate::locks::{ForcedRelease, LeaseId, LockError, LockName, Locks, Resource};

impl Locks {
    /// Removes lease `id` from `name` (a lock, or a semaphore's permits): waiters wake, its
    /// holder gets 410 from then on. `UnknownLease` when the lease does not hold `name`.
    pub async fn evict(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LockError> {
        let nonce = request_nonce();
        let script = Evict {
            lease: id,
            resource,
            by,
            reason,
            nonce: &nonce,
        };
        let removed = match self.call(name, &script).await? {
            ForceReleaseReply::ForceReleased { holders } => {
                holders.into_iter().map(holder_view).collect()
            }
            ForceReleaseReply::NotHeld | ForceReleaseReply::DelayLifted => {
                return Err(LockError::UnknownLease);
            }
            ForceReleaseReply::KindConflict { held_as } => {
                return Err(LockError::kind_conflict(&held_as));
            }
            ForceReleaseReply::TooLate => return Err(LockError::TooLate),
        };
        self.inner.observer.lease_ended(id);
        Ok(ForcedRelease {
            lock: name.clone(),
            removed,
            delay_lifted: false,
        })
    }
}
