//! Asking holders to let go: an operator's cooperative revocation (see
//! [`crate::leases::revocation`]). Every holder of a name (or the one lease named) is told
//! the reason and the deadline on its watch; a release in time is an ordinary release; at the
//! deadline the lease is evicted (reason `revoked`). Each step goes into the audit log: the
//! request (`revoke`) and, if it comes to it, the eviction (`revoke_enforced`).

use serde_json::json;

use super::{Operator, Reason};
use crate::audit::{AuditEntry, AuditLog};
use crate::leases::revocation::Deadlines;
use crate::locks::{LeaseId, LockName, Resource, Revoked};
use crate::problem::{Problem, ProblemKind};

/// The longest grace an operator may give (an hour): a revocation is a request to stop soon.
pub const MAX_GRACE_MS: u64 = 3_600_000;

/// One lease asked to let go.
#[derive(Debug, Clone)]
pub struct RevokedLease {
    pub lease_id: LeaseId,
    pub revoked: Revoked,
}

impl Operator<'_> {
    /// Asks the holders of `name` (`resource`'s; or only lease `only`) to release within
    /// `grace_ms`; the deadlines are kept by `deadlines`. `lock_not_found` when nobody holds
    /// it, `lease_not_found` when `only` does not hold it.
    pub async fn revoke(
        &self,
        resource: Resource,
        name: &LockName,
        only: Option<LeaseId>,
        grace_ms: u64,
        reason: &Reason,
        deadlines: &Deadlines,
    ) -> Result<Vec<RevokedLease>, Problem> {
        self.principal.check_name(name)?;
        if grace_ms > MAX_GRACE_MS {
            return Err(Problem::new(
                ProblemKind::InvalidBody,
                format!("grace_ms is at most {MAX_GRACE_MS} (an hour)"),
            ));
        }
        let ids = match only {
            Some(id) => vec![id],
            None => self.holders(resource, name).await?,
        };
        let mut asked = Vec::new();
        for id in ids {
            let revoked = match self
                .leases
                .revoke(resource, name, id, grace_ms, &self.by, reason.as_str())
                .await
            {
                Ok(revoked) => revoked,
                // A holder of many that ended meanwhile: the others are still asked.
                Err(e) if only.is_none() && e.is_gone() => continue,
                Err(e) => return Err(e.into()),
            };
            if !revoked.again {
                self.keep_deadline(resource, name, id, &revoked, deadlines);
            }
            asked.push(RevokedLease {
                lease_id: id,
                revoked,
            });
        }
        if asked.is_empty() {
            return Err(Problem::new(
                ProblemKind::LockNotFound,
                "nobody holds this name: there is nothing to revoke",
            ));
        }
        let leases: Vec<_> = asked
            .iter()
            .map(|a| {
                json!({"lease_id": a.lease_id.to_string(), "holder": a.revoked.holder,
                    "deadline_ms": a.revoked.revocation.deadline.0, "again": a.revoked.again})
            })
            .collect();
        self.record(
            "revoke",
            name.as_str(),
            reason,
            json!({"grace_ms": grace_ms, "leases": leases}),
        )
        .await;
        Ok(asked)
    }

    /// The leases holding `name` now, as `resource`.
    async fn holders(&self, resource: Resource, name: &LockName) -> Result<Vec<LeaseId>, Problem> {
        let ids: Vec<LeaseId> = match resource {
            Resource::Lock => self
                .leases
                .lock(name)
                .await?
                .map(|view| view.holders.iter().filter_map(|h| h.lease_id).collect())
                .unwrap_or_default(),
            Resource::Semaphore => self
                .leases
                .locks()
                .semaphore(name)
                .await
                .map_err(crate::leases::LeaseError::from)?
                .map(|view| view.holders.iter().filter_map(|h| h.lease_id).collect())
                .unwrap_or_default(),
        };
        Ok(ids)
    }

    /// Keeps the deadline of a new revocation: the lease is evicted then, unless it ended.
    fn keep_deadline(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        revoked: &Revoked,
        deadlines: &Deadlines,
    ) {
        let audit: AuditLog = self.audit.clone();
        let entry = AuditEntry {
            at_ms: revoked.revocation.deadline.0,
            by: self.by.clone(),
            action: "revoke_enforced".to_owned(),
            tenant: self.principal.tenant.clone(),
            target: name.to_string(),
            reason: revoked.revocation.reason.clone(),
            details: json!({"lease_id": id.to_string(), "holder": revoked.holder}),
        };
        let kept = deadlines.keep(
            self.leases.clone(),
            (resource, name.clone(), id),
            revoked.revocation.deadline,
            self.by.clone(),
            revoked.revocation.reason.clone(),
            async move { audit.record(&entry).await },
        );
        if !kept {
            tracing::warn!(lock = %name, lease = %id, "too many revocation deadlines kept here: \
                this one ends by the lease's expiry (its heartbeats stop at the deadline)");
        }
    }
}
