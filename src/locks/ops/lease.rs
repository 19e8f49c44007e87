//! What a lease's holder does after the grant, for locks and semaphores alike: heartbeat,
//! release, give up a queue place; and what anyone may see of a lease.

use std::time::Duration;

use crate::locks::calls::On;
use crate::locks::scripts::inspect_lease::InspectLease;
use crate::locks::scripts::leave::{Leave, LeaveReply};
use crate::locks::scripts::release::{Release as ReleaseScript, ReleaseHow, ReleaseReply};
use crate::locks::scripts::renew::{Renew, RenewReply};
use crate::locks::scripts::semaphore_inspect::SemaphoreInspect;
use crate::locks::scripts::semaphore_release::SemaphoreRelease;
use crate::locks::scripts::semaphore_renew::SemaphoreRenew;
use crate::locks::scripts::{lost, non_empty};
use crate::locks::types::{Resource, Revocation, request_nonce};
use crate::locks::{
    EventKind, FencingToken, IdempotencyKey, LeaseId, LeaseKind, LeaseState, LeaseToken, LeaseView,
    LockError, LockEvent, LockName, Locks, Metadata, Release, Renewal, RwMode, Timestamp, Ttl,
};

impl Locks {
    /// Extends a live lease to its TTL (or to `ttl`, which becomes its TTL from now on).
    pub async fn renew(
        &self,
        resource: Resource,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewal, LockError> {
        let renew = Renew {
            lease: lease_id,
            token,
            ttl,
        };
        let (reply, acked) = match resource {
            Resource::Lock => self.call_with(On::Lock(name), &renew, None).await?,
            Resource::Semaphore => {
                self.call_with(On::Lock(name), &SemaphoreRenew(renew), None)
                    .await?
            }
        };
        let renewed = match reply {
            RenewReply::Renewed {
                reentry_count,
                ttl_ms,
                now_ms,
                fencing_token,
                slack_ms,
                holder,
                revocation,
            } => {
                // Its event came with the reply (`ev`). Too few replicas acknowledged it:
                // answered all the same, marked. The extension stands on the primary; a 503
                // would only have the holder stop (or retry, extending it again) while the
                // lease blocks everyone else until it expires; what a failover would keep is
                // the deadline of the last answer without the mark, which the holder knows.
                let degraded = acked.and_then(crate::redis::Acked::degraded);
                self.inner.conn.acks().answered(degraded);
                Ok(Renewal {
                    lease_id,
                    reentry_count,
                    fencing_token: FencingToken(fencing_token),
                    ttl_ms,
                    expires_at: Timestamp(now_ms).plus(ttl_ms),
                    slack_ms,
                    holder: non_empty(holder),
                    replicas_acked: acked.map(|a| a.acked),
                    degraded,
                    revocation,
                })
            }
            RenewReply::Refused(r) => Err(LockError::from(r)),
        };
        let observer = &self.inner.observer;
        match &renewed {
            Ok(r) => {
                let ttl = Duration::from_millis(r.ttl_ms);
                let slack = Duration::from_millis(u64::try_from(r.slack_ms).unwrap_or(0));
                observer.heartbeat(slack, ttl);
                observer.lease_live(lease_id, ttl);
            }
            Err(e) => {
                if matches!(e, LockError::LeaseLost(LeaseState::Expired)) {
                    observer.heartbeat_too_late();
                }
                self.observe_refusal(lease_id, e);
            }
        }
        renewed
    }

    /// Releases one reentry level of a lease, or all of them (for a read/write lease: of both
    /// modes, or of the `mode` hold; one level goes write first by default); a semaphore
    /// lease gives back all its permits. At zero the lock is free and its waiters wake. A
    /// retry with the same `idempotency` key gets the first answer.
    #[allow(clippy::too_many_arguments)]
    pub async fn release(
        &self,
        resource: Resource,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        all: bool,
        mode: Option<RwMode>,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Release, LockError> {
        let nonce = request_nonce();
        let how = ReleaseHow::Asked {
            all,
            mode,
            idempotency,
            nonce: &nonce,
        };
        self.release_how(resource, name, lease_id, token, how).await
    }

    /// Takes back a grant whose client went away, if the request that made it (`nonce`) is
    /// still the only one that answered with it.
    pub(in crate::locks) async fn roll_back(
        &self,
        resource: Resource,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        nonce: &str,
    ) -> Result<Release, LockError> {
        let how = ReleaseHow::Rollback { nonce };
        self.release_how(resource, name, lease_id, token, how).await
    }

    pub(super) async fn release_how(
        &self,
        resource: Resource,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        how: ReleaseHow<'_>,
    ) -> Result<Release, LockError> {
        let reply = match resource {
            Resource::Lock => {
                let script = ReleaseScript {
                    lease: lease_id,
                    token,
                    how,
                };
                self.call(name, &script).await?
            }
            Resource::Semaphore => {
                let script = SemaphoreRelease {
                    lease: lease_id,
                    token,
                    how,
                };
                self.call(name, &script).await?
            }
        };
        let released = match reply {
            ReleaseReply::Released(released) => {
                // Hold times count releases their holders asked for, not rollbacks, and a
                // replayed answer counts nothing again.
                if !released.replayed {
                    let held = matches!(how, ReleaseHow::Asked { .. })
                        .then(|| released.held())
                        .flatten();
                    self.inner.observer.released(lease_id, released.kind, held);
                }
                Ok(Release {
                    lease_id,
                    reentry_count: 0,
                    released: true,
                    replayed: released.replayed,
                })
            }
            ReleaseReply::StillHeld {
                reentry_count,
                holder,
                replayed,
            } => {
                if !replayed {
                    self.publish(
                        &LockEvent::new(
                            EventKind::Released,
                            name,
                            self.inner.conn.clock().now_ms(),
                        )
                        .lease(lease_id, non_empty(holder).as_deref())
                        .with("reentry_count", reentry_count)
                        .with("reason", how.reason()),
                    );
                }
                Ok(Release {
                    lease_id,
                    reentry_count,
                    released: false,
                    replayed,
                })
            }
            ReleaseReply::NotRolledBack => Err(LockError::NotRolledBack),
            ReleaseReply::IdempotencyMismatch => Err(LockError::IdempotencyMismatch),
            ReleaseReply::Refused(r) => Err(r.into()),
        };
        if let Err(e) = &released {
            self.observe_refusal(lease_id, e);
        }
        released
    }

    /// Gives up a fair-queue ticket's place (or a waiting writer's).
    pub async fn leave(
        &self,
        name: &LockName,
        ticket: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), LockError> {
        let nonce = request_nonce();
        let script = Leave {
            ticket,
            token,
            nonce: &nonce,
        };
        match self.call(name, &script).await? {
            LeaveReply::Left => Ok(()),
            LeaveReply::NotQueued { state } => Err(lost(state)),
            LeaveReply::Refused(r) => Err(r.into()),
        }
    }

    /// One lease's (or fair ticket's) state, as anyone may see it.
    pub async fn lease(
        &self,
        resource: Resource,
        name: &LockName,
        lease_id: LeaseId,
    ) -> Result<LeaseView, LockError> {
        let view = match resource {
            Resource::Lock => self.lock_lease(name, lease_id).await?,
            Resource::Semaphore => self.permit_lease(name, lease_id).await?,
        };
        view.ok_or(LockError::UnknownLease)
    }

    async fn lock_lease(
        &self,
        name: &LockName,
        lease_id: LeaseId,
    ) -> Result<Option<LeaseView>, LockError> {
        let snap = self.call(name, &InspectLease { lease: lease_id }).await?;
        let (true, Some(state)) = (snap.found, snap.state) else {
            return Ok(None);
        };
        let held = state == LeaseState::Held;
        let remaining_ms = held.then(|| u64::try_from(snap.pttl).ok()).flatten();
        Ok(Some(LeaseView {
            lease_id,
            lock: name.clone(),
            state,
            kind: snap.kind.unwrap_or(LeaseKind::Reentrant),
            read_count: snap.read_count,
            write_count: snap.write_count,
            position: snap.position,
            permits: None,
            holder: non_empty(snap.holder),
            metadata: Metadata::from_stored(snap.metadata.as_deref()),
            fencing_token: FencingToken(snap.fencing_token.unwrap_or(0)),
            reentry_count: snap.reentry_count,
            ttl_ms: snap.ttl_ms.unwrap_or(0),
            acquired_at: Timestamp(snap.created_ms.unwrap_or(0)),
            // While held, the live expiry (a reentry or heartbeat may have moved it).
            expires_at: match remaining_ms {
                Some(left) => Timestamp(snap.now_ms).plus(left),
                None => Timestamp(snap.expires_ms.unwrap_or(0)),
            },
            ended_at: if held {
                None
            } else {
                snap.ended_ms.map(Timestamp)
            },
            remaining_ms,
            revocation: Revocation::from_stored(snap.revocation.as_deref()),
            waiters: snap.waiters,
        }))
    }

    async fn permit_lease(
        &self,
        name: &LockName,
        lease_id: LeaseId,
    ) -> Result<Option<LeaseView>, LockError> {
        let inspect = SemaphoreInspect {
            lease: Some(lease_id),
        };
        let snap = self.call(name, &inspect).await?;
        let Some(lease) = snap.lease else {
            return Ok(None);
        };
        let held = lease.state == LeaseState::Held;
        let expires = Timestamp(lease.expires_ms.unwrap_or(0));
        Ok(Some(LeaseView {
            lease_id,
            lock: name.clone(),
            state: lease.state,
            kind: LeaseKind::Semaphore,
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
            revocation: Revocation::from_stored(lease.revocation.as_deref()),
            waiters: lease.waiters,
        }))
    }
}
