//! Semaphores with expirable permits (Redisson RPermitExpirableSemaphore, Curator
//! InterProcessSemaphoreV2): each lease holds its permits with its own TTL, heartbeat and
//! release; permits of leases that ran out come back by themselves.

use std::time::Duration;

use super::replies::{LimitReply, ReleaseReply, SemaphoreSnapshot, non_empty, parse};
use super::waiting::Target;
use super::{
    Acquired, Family, FencingToken, ForcedRelease, Grant, IdempotencyKey, LeaseId, LeaseState,
    LeaseToken, LeaseView, LockError, LockName, Locks, Metadata, PermitHolderView, PermitRequest,
    Release, ReleaseHow, Renewal, SemaphoreView, Timestamp, Ttl, fingerprint, scripts,
};

/// A semaphore's limit, changed by an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub limit: u32,
    pub previous: u32,
    /// Permits free now; below zero while more permits are out than the new limit.
    pub available: i64,
}

impl Locks {
    /// Takes `request.permits` permits of semaphore `name` for a new lease, waiting up to
    /// `wait` for permits to free up (released, or expired).
    pub async fn acquire_permits(
        &self,
        name: &LockName,
        request: &PermitRequest,
        wait: Duration,
    ) -> Result<Grant, LockError> {
        let target = Target::Semaphore(request);
        match self
            .acquire_waiting(
                name,
                target,
                LeaseId::generate(),
                LeaseToken::generate(),
                wait,
            )
            .await?
        {
            Acquired::Granted(grant) => Ok(grant),
            Acquired::Queued(_) => Err(LockError::BadReply("a semaphore queued a ticket".into())),
        }
    }

    /// Extends every permit of a semaphore lease.
    pub async fn renew_permits(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewal, LockError> {
        let how = (
            &*scripts::SEMAPHORE_RENEW,
            "semaphore_renew",
            Family::Semaphore,
        );
        self.renew_via(how, name, lease_id, token, ttl).await
    }

    /// Gives a semaphore lease's permits back. A retry with the same `idempotency` key gets
    /// the first answer.
    pub async fn release_permits(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Release, LockError> {
        let how = ReleaseHow::Asked {
            all: true,
            mode: None,
            idempotency,
        };
        self.release_permits_because(name, lease_id, token, how)
            .await
    }

    pub(super) async fn release_permits_because(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        how: ReleaseHow<'_>,
    ) -> Result<Release, LockError> {
        let (reason, nonce, idempotency) = match how {
            ReleaseHow::Asked { idempotency, .. } => ("released", "", idempotency),
            ReleaseHow::Rollback { nonce } => ("client_gone", nonce, None),
        };
        let fp = fingerprint(&[
            "release_permits",
            &lease_id.to_string(),
            &token.digest().hex(),
        ]);
        let mut invocation = self.prepared(&scripts::SEMAPHORE_RELEASE, name, Family::Semaphore);
        invocation
            .arg(lease_id.to_string())
            .arg(token.digest().hex())
            .arg(reason)
            .arg(nonce)
            .arg(
                idempotency
                    .map(IdempotencyKey::digest_hex)
                    .unwrap_or_default(),
            )
            .arg(fp);
        let raw: String = self.invoke("semaphore_release", &invocation).await?;
        let reply = parse::<ReleaseReply>(&raw)?;
        self.observe_release(lease_id, &reply, reason);
        let released = super::release(lease_id, reply);
        if let Err(e) = &released {
            self.observe_refusal(lease_id, e);
        }
        released
    }

    async fn inspect_semaphore(
        &self,
        name: &LockName,
        lease: Option<LeaseId>,
    ) -> Result<SemaphoreSnapshot, LockError> {
        let mut invocation = self.prepared(&scripts::SEMAPHORE_INSPECT, name, Family::Semaphore);
        invocation.arg(lease.map(|id| id.to_string()).unwrap_or_default());
        let raw: String = self.invoke("semaphore_inspect", &invocation).await?;
        parse(&raw)
    }

    /// The semaphore's limit, permits in use and holders; `None` when never used.
    pub async fn semaphore(&self, name: &LockName) -> Result<Option<SemaphoreView>, LockError> {
        let snap = self.inspect_semaphore(name, None).await?;
        let (true, Some(limit)) = (snap.known, snap.limit) else {
            return Ok(None);
        };
        Ok(Some(SemaphoreView {
            name: name.clone(),
            limit,
            used: snap.used,
            fencing_counter: FencingToken(snap.fence),
            holders: snap
                .holders
                .into_iter()
                .map(|h| PermitHolderView {
                    lease_id: h.lease_id.as_deref().and_then(LeaseId::parse),
                    holder: non_empty(h.holder),
                    metadata: Metadata::from_stored(h.metadata.as_deref()),
                    permits: h.permits,
                    fencing_token: h.fencing_token.map(FencingToken),
                    acquired_at: h.created_ms.map(Timestamp),
                    expires_at: h.expires_ms.map(Timestamp),
                })
                .collect(),
        }))
    }

    /// One semaphore lease's state.
    pub async fn semaphore_lease(
        &self,
        name: &LockName,
        lease_id: LeaseId,
    ) -> Result<LeaseView, LockError> {
        let snap = self.inspect_semaphore(name, Some(lease_id)).await?;
        let Some(lease) = snap.lease else {
            return Err(LockError::UnknownLease);
        };
        let held = lease.state == LeaseState::Held;
        let expires = Timestamp(lease.expires_ms.unwrap_or(0));
        Ok(LeaseView {
            lease_id,
            lock: name.clone(),
            state: lease.state,
            kind: "semaphore".into(),
            read_count: None,
            write_count: None,
            position: None,
            permits: lease.permits,
            holder: non_empty(lease.holder),
            metadata: Metadata::from_stored(lease.metadata.as_deref()),
            fencing_token: FencingToken(lease.fencing_token.unwrap_or(0)),
            reentry_count: if held { lease.permits.unwrap_or(0) } else { 0 },
            ttl_ms: lease.ttl_ms.unwrap_or(0),
            acquired_at: Timestamp(lease.created_ms.unwrap_or(0)),
            expires_at: expires,
            ended_at: if held {
                None
            } else {
                lease.ended_ms.map(Timestamp)
            },
            remaining_ms: held.then(|| expires.0.saturating_sub(snap.now_ms)),
        })
    }

    /// Returns every permit of semaphore `name` (an admin action); with `clear`, removes the
    /// semaphore too (its counter and limit), so the next acquirer sets a new limit and the
    /// name can serve as a lock.
    pub async fn force_release_semaphore(
        &self,
        name: &LockName,
        by: &str,
        reason: &str,
        clear: bool,
    ) -> Result<ForcedRelease, LockError> {
        let how = (
            &*scripts::SEMAPHORE_FORCE_RELEASE,
            "semaphore_force_release",
            Family::Semaphore,
        );
        self.force_release_via(how, name, by, reason, clear).await
    }

    /// Gives semaphore `name` another limit (an admin action): the free permits move by the
    /// difference; with fewer than are out, acquirers wait until enough come back.
    pub async fn set_semaphore_limit(
        &self,
        name: &LockName,
        limit: u32,
        by: &str,
    ) -> Result<LimitChange, LockError> {
        let mut invocation = self.prepared(&scripts::SEMAPHORE_LIMIT, name, Family::Semaphore);
        invocation.arg(limit).arg(by);
        let raw: String = self.invoke("semaphore_limit", &invocation).await?;
        match parse::<LimitReply>(&raw)? {
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
            LimitReply::KindConflict { held_as } => Err(LockError::KindConflict { held_as }),
            LimitReply::TooLate => Err(LockError::TooLate),
        }
    }
}
