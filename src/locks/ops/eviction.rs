//! Targeted eviction: an admin removes one lease (a dead reader among three, one trainer's
//! permits) and leaves the other holders alone. Audited like a force release: the history
//! entry names the lease, who asked and why.

use crate::locks::ops::inspect::holder_view;
use crate::locks::scripts::evict::Evict;
use crate::locks::scripts::force_release::ForceReleaseReply;
use crate::locks::types::request_nonce;
use crate::locks::{ForcedRelease, LeaseId, LockError, LockName, Locks, Resource, Timestamp};

/// What an eviction at a revocation's deadline did.
#[derive(Debug)]
pub enum Eviction {
    Done(ForcedRelease),
    /// The deadline has not come yet by Redis's clock: try again after this long.
    TooEarly(std::time::Duration),
}

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
        match self
            .evict_at(resource, name, id, None, (by, reason))
            .await?
        {
            Eviction::Done(forced) => Ok(forced),
            Eviction::TooEarly(_) => Err(LockError::BadReply(
                "an eviction with no deadline answered too_early".into(),
            )),
        }
    }

    /// [`Self::evict`], but not before `not_before` by Redis's clock (a revocation's
    /// deadline: the holder was promised the lease until then).
    pub async fn evict_at(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        not_before: Option<Timestamp>,
        (by, reason): (&str, &str),
    ) -> Result<Eviction, LockError> {
        let nonce = request_nonce();
        let script = Evict {
            lease: id,
            resource,
            by,
            reason,
            nonce: &nonce,
            not_before,
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
            ForceReleaseReply::TooEarly { wait_ms } => {
                return Ok(Eviction::TooEarly(std::time::Duration::from_millis(
                    wait_ms,
                )));
            }
        };
        self.inner.observer.lease_ended(id);
        Ok(Eviction::Done(ForcedRelease {
            lock: name.clone(),
            removed,
            delay_lifted: false,
        }))
    }
}
