//! Cooperative revocation: an admin asks a lease's holder to let go within a grace
//! (`lua/revoke.lua`). The lease stands until the holder releases it or the deadline comes;
//! meanwhile its heartbeats extend it no further than the deadline, so it ends by then even
//! should nobody evict it (`crate::leases::revocation` does, at the deadline).

use crate::locks::scripts::revoke::{Revoke, RevokeReply};
use crate::locks::{LeaseId, LockError, LockName, Locks, Resource, Revocation};

/// A revocation asked for.
#[derive(Debug, Clone)]
pub struct Revoked {
    pub revocation: Revocation,
    /// It was pending already: the earlier deadline (and reason) stand.
    pub again: bool,
    pub holder: Option<String>,
    pub fencing_token: Option<u64>,
}

impl Locks {
    /// Asks the holder of lease `id` of `name` to let go within `grace_ms`, recorded as asked
    /// `by` for `reason`: `UnknownLease` when the lease does not hold `name`.
    pub async fn revoke(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        grace_ms: u64,
        by: &str,
        reason: &str,
    ) -> Result<Revoked, LockError> {
        let script = Revoke {
            lease: id,
            resource,
            grace_ms,
            by,
            reason,
        };
        match self.call(name, &script).await? {
            RevokeReply::RevocationRequested {
                revocation,
                again,
                holder,
                fencing_token,
            } => Ok(Revoked {
                revocation,
                again,
                holder: holder.filter(|h| !h.is_empty()),
                fencing_token,
            }),
            RevokeReply::NotHeld => Err(LockError::UnknownLease),
            RevokeReply::TooLate => Err(LockError::TooLate),
        }
    }
}

impl Locks {
    /// Redis's clock now, as this instance estimates it (ms): what a revocation's deadline
    /// is measured in.
    pub fn redis_now_ms(&self) -> u64 {
        self.inner.conn.clock().now_ms()
    }
}

impl Locks {
    /// The revocations recorded on `name` (pending, or past their deadline while the record
    /// lasts), by lease: what the lock page shows beside its holders.
    pub async fn revocations_of(
        &self,
        name: &LockName,
    ) -> Result<std::collections::HashMap<LeaseId, Revocation>, LockError> {
        let key = format!("{}:revoke", self.inner.keys.lock(name).state());
        let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(fields
            .into_iter()
            .filter_map(|(id, raw)| {
                Some((LeaseId::parse(&id)?, Revocation::from_stored(Some(&raw))?))
            })
            .collect())
    }
}
