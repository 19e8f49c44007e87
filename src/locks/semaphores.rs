//! Semaphores with expirable permits (Redisson RPermitExpirableSemaphore, Curator
//! InterProcessSemaphoreV2): each lease holds its permits with its own TTL, heartbeat and
//! release; permits of leases that ran out come back by themselves.

use std::time::Duration;

use super::replies::{ReleaseReply, SemaphoreSnapshot, non_empty, parse};
use super::waiting::Target;
use super::{
    Acquired, Family, FencingToken, ForcedRelease, Grant, LeaseId, LeaseState, LeaseToken,
    LeaseView, LockError, LockName, Locks, Metadata, PermitHolderView, PermitRequest, Release,
    Renewal, SemaphoreView, Timestamp, Ttl, prepared, scripts,
};

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

    /// Gives a semaphore lease's permits back.
    pub async fn release_permits(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Release, LockError> {
        self.release_permits_because(name, lease_id, token, "released")
            .await
    }

    pub(super) async fn release_permits_because(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        reason: &str,
    ) -> Result<Release, LockError> {
        let keys = self.inner.keys.lock(name);
        let mut invocation = prepared(&scripts::SEMAPHORE_RELEASE, &keys, Family::Semaphore);
        invocation
            .arg(lease_id.to_string())
            .arg(token.digest().hex())
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms)
            .arg(reason);
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
        let keys = self.inner.keys.lock(name);
        let mut invocation = prepared(&scripts::SEMAPHORE_INSPECT, &keys, Family::Semaphore);
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
                    lease_id: LeaseId::parse(&h.lease_id),
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

    /// Returns every permit of semaphore `name` (an admin action).
    pub async fn force_release_semaphore(
        &self,
        name: &LockName,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LockError> {
        let how = (
            &*scripts::SEMAPHORE_FORCE_RELEASE,
            "semaphore_force_release",
            Family::Semaphore,
        );
        self.force_release_via(how, name, by, reason).await
    }
}
