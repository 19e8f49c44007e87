//! Operator actions: force releases and semaphore limits. Who asked is the caller's to say
//! (`by`); each action is recorded in the lock's history by its script.

use crate::locks::ops::inspect::holder_view;
use crate::locks::scripts::force_release::{ForceRelease, ForceReleaseReply};
use crate::locks::scripts::semaphore_force_release::SemaphoreForceRelease;
use crate::locks::scripts::semaphore_limit::{LimitReply, SemaphoreLimit};
use crate::locks::types::request_nonce;
use crate::locks::{ForcedRelease, HeldAs, LimitChange, LockError, LockName, Locks, Resource};

impl Locks {
    /// Removes every holder of `name` (an admin action): waiters wake, the removed leases'
    /// holders get 410 from then on, and the event names `by` and `reason`. For a semaphore,
    /// every permit comes back; with `clear`, the semaphore goes too (its counter and limit),
    /// so the next acquirer sets a new limit and the name can serve as a lock.
    pub async fn force_release(
        &self,
        resource: Resource,
        name: &LockName,
        by: &str,
        reason: &str,
        clear: bool,
    ) -> Result<ForcedRelease, LockError> {
        let nonce = request_nonce();
        let script = ForceRelease {
            by,
            reason,
            clear,
            nonce: &nonce,
        };
        let reply = match resource {
            Resource::Lock => self.call(name, &script).await?,
            Resource::Semaphore => self.call(name, &SemaphoreForceRelease(script)).await?,
        };
        let mut delay_lifted = false;
        let removed = match reply {
            ForceReleaseReply::ForceReleased { holders } => {
                holders.into_iter().map(holder_view).collect()
            }
            ForceReleaseReply::DelayLifted => {
                delay_lifted = true;
                Vec::new()
            }
            ForceReleaseReply::NotHeld => Vec::new(),
            ForceReleaseReply::KindConflict { held_as } => {
                return Err(LockError::kind_conflict(&held_as));
            }
            ForceReleaseReply::TooLate => return Err(LockError::TooLate),
            ForceReleaseReply::TooEarly { .. } => {
                return Err(LockError::BadReply(
                    "a force release answered too_early".into(),
                ));
            }
        };
        let forced = ForcedRelease {
            lock: name.clone(),
            removed,
            delay_lifted,
        };
        for id in forced.removed.iter().filter_map(|h| h.lease_id) {
            self.inner.observer.lease_ended(id);
        }
        Ok(forced)
    }

    /// Gives semaphore `name` another limit (an admin action): the free permits move by the
    /// difference; with fewer than are out, acquirers wait until enough come back.
    pub async fn set_semaphore_limit(
        &self,
        name: &LockName,
        limit: u32,
        by: &str,
    ) -> Result<LimitChange, LockError> {
        let nonce = request_nonce();
        let script = SemaphoreLimit {
            limit,
            by,
            nonce: &nonce,
        };
        match self.call(name, &script).await? {
            LimitReply::Changed {
                limit,
                previous,
                available,
            } => Ok(LimitChange {
                limit,
                previous,
                available,
            }),
            LimitReply::NotFound => Err(LockError::NoSuchSemaphore),
            LimitReply::KindConflict { held_as } => Err(LockError::kind_conflict(&held_as)),
            LimitReply::TooLate => Err(LockError::TooLate),
        }
    }
}

impl LockError {
    /// The name is held as `held_as` (as a script named it).
    pub(in crate::locks) fn kind_conflict(held_as: &str) -> Self {
        let held_as = serde_json::from_value(serde_json::Value::String(held_as.to_owned()))
            .unwrap_or(HeldAs::Foreign);
        Self::KindConflict { held_as }
    }
}
