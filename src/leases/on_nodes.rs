//! RedLock leases through the leases handle: the quorum calls ([`super::redlock`]), what the
//! main Redis is told of them ([`super::redlock::ledger`]), `Idempotency-Key`s (claimed on the
//! main Redis, as a multilease's are: a retry takes the first request's token), and what each
//! call reports to the observer, once per call (the nodes' own calls are their own series).

use std::time::Duration;

use super::redlock::acquire::RedLease;
use super::redlock::ledger::Ledger;
use super::{Granted, LeaseError, Leases, Placement, Renewed};
use crate::locks::feed::waitlist::Wanted;
use crate::locks::observer::{AcquireOutcome, AcquireReport};
use crate::locks::ops::records::{MultiOp, MultiReply};
use crate::locks::types::fingerprint;
use crate::locks::{
    AcquireRequest, Acquired, ForcedRelease, Grant, HolderLabel, IdempotencyKey, LeaseId,
    LeaseKind, LeaseState, LeaseToken, LockError, LockName, Metadata, Release, Ttl,
};

/// A key's claim: the token to use, and whether a first request claimed it before.
struct Claimed {
    token: LeaseToken,
    replayed: bool,
}

impl Leases {
    /// A RedLock acquire (see [`Leases::acquire`]).
    pub(super) async fn acquire_on_nodes(
        &self,
        name: &LockName,
        request: AcquireRequest,
        reentry: Option<LeaseToken>,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<Granted, LeaseError> {
        let redlock = self.nodes()?;
        let reenter = reentry.is_some();
        let claim = self.claim(name, &request, reentry, ttl).await?;
        let id = Placement::Redlock.lease_id(&claim.token);
        if claim.replayed
            && let Some(granted) = self.replay(name, id, &claim.token, reenter).await?
        {
            // Counted as the call it is, as a replayed grant of the main Redis is.
            let outcome = if reenter {
                AcquireOutcome::Reentered
            } else {
                AcquireOutcome::Granted
            };
            self.report(name, outcome);
            return Ok(granted);
        }
        let lease = RedLease {
            id,
            token: claim.token,
            reenter,
        };
        let key = request.idempotency.clone();
        // A RedLock waiter is listed on the main Redis, where every other waiter of the name
        // is (`GET /v1/locks/{name}`, the dashboard), marked as waiting for `redlock`.
        let holder = request.holder.clone();
        let listed = |deadline| {
            let wanted = Wanted {
                kind: Some(LeaseKind::Redlock),
                holder: holder.as_ref().map(HolderLabel::as_str),
                permits: None,
            };
            self.locks.list_waiting(name, wanted, id, deadline)
        };
        let asked = redlock
            .acquire(name, (request, lease), ttl, wait, listed)
            .await;
        self.report_acquire(name, &asked, reenter);
        match asked {
            Ok(red) => {
                Ledger { main: &self.locks }
                    .granted(name, &red.grant, red.ack)
                    .await;
                self.locks
                    .records()
                    .observer()
                    .lease_live(id, Duration::from_millis(red.grant.ttl_ms));
                Ok(Granted {
                    acquired: Acquired::Granted(red.grant),
                    quorum: Some(red.ack),
                })
            }
            Err(e) => {
                if let Some(key) = &key
                    && !claim.replayed
                {
                    let _ = self
                        .locks
                        .records()
                        .lease_claim(key, id, MultiOp::Unclaim)
                        .await;
                }
                Err(e)
            }
        }
    }

    /// The token this acquire uses: the bearer's (a reentry), a new one, or with an
    /// Idempotency-Key the one its first request claimed.
    async fn claim(
        &self,
        name: &LockName,
        request: &AcquireRequest,
        reentry: Option<LeaseToken>,
        ttl: Ttl,
    ) -> Result<Claimed, LeaseError> {
        let reenter = reentry.is_some();
        let token = reentry.unwrap_or_else(LeaseToken::generate);
        let Some(key) = &request.idempotency else {
            return Ok(Claimed {
                token,
                replayed: false,
            });
        };
        let id = Placement::Redlock.lease_id(&token);
        let ttl_ms = ttl.as_millis().to_string();
        let holder = request.holder.as_ref().map_or("", |h| h.as_str());
        let metadata = request
            .metadata
            .as_ref()
            .map(Metadata::to_json)
            .unwrap_or_default();
        // A reentry's key is bound to its lease too.
        let reentry = if reenter {
            id.to_string()
        } else {
            String::new()
        };
        let fp = fingerprint(
            Some(key),
            &[
                "redlock",
                name.as_str(),
                &ttl_ms,
                holder,
                &metadata,
                &reentry,
            ],
        );
        let sealed = key.seal(&token);
        let claim = MultiOp::Claim {
            keep_ms: self.locks.records().tombstone_ms().max(ttl.as_millis()),
            fingerprint: &fp,
            sealed: &sealed,
        };
        match self.locks.records().lease_claim(key, id, claim).await? {
            MultiReply::New => Ok(Claimed {
                token,
                replayed: false,
            }),
            MultiReply::Claimed {
                fingerprint,
                sealed,
            } => {
                if fingerprint != fp {
                    return Err(LockError::IdempotencyMismatch.into());
                }
                let token = key
                    .unseal(&sealed)
                    .ok_or_else(|| LockError::BadReply("an unreadable lease claim".into()))?;
                Ok(Claimed {
                    token,
                    replayed: true,
                })
            }
            MultiReply::TooLate => Err(LockError::TooLate.into()),
            other => Err(LockError::BadReply(format!("a lease claim: {other:?}")).into()),
        }
    }

    /// A retry's answer from the first request's lease: that grant again while a majority
    /// holds it, lost once it ended; `None` while no node knows it (the first request is
    /// still waiting, or never got it): the retry acquires with the same token.
    async fn replay(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        reenter: bool,
    ) -> Result<Option<Granted>, LeaseError> {
        let redlock = self.nodes()?;
        let (view, holding) = match redlock.lease(name, id).await {
            Ok(found) => found,
            Err(LockError::UnknownLease) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if view.state != LeaseState::Held {
            return Err(LockError::LeaseLost(view.state).into());
        }
        if (holding as usize) < redlock.quorum() {
            return Ok(None);
        }
        let grant = Grant {
            lease_id: id,
            token: (!reenter).then(|| token.clone()),
            new_lease: !reenter,
            replayed: true,
            kind: LeaseKind::Redlock,
            holder: view.holder,
            fencing_token: view.fencing_token,
            reentry_count: view.reentry_count,
            ttl_ms: view.ttl_ms,
            acquired_at: view.acquired_at,
            expires_at: view.expires_at,
            replicas_acked: None,
            degraded: None,
        };
        let validity = Duration::from_millis(view.remaining_ms.unwrap_or(0));
        Ok(Some(Granted {
            acquired: Acquired::Granted(grant),
            quorum: Some(super::QuorumAck {
                nodes_acked: holding,
                validity,
            }),
        }))
    }

    /// One report of a RedLock acquire, as any acquire's.
    fn report_acquire(
        &self,
        name: &LockName,
        asked: &Result<super::redlock::RedGrant, LeaseError>,
        reenter: bool,
    ) {
        let outcome = match asked {
            Ok(_) if reenter => AcquireOutcome::Reentered,
            Ok(_) => AcquireOutcome::Granted,
            Err(LeaseError::Lock(LockError::Held(_))) => AcquireOutcome::Contended,
            Err(LeaseError::Lock(e)) if !e.unavailable() => AcquireOutcome::Refused,
            Err(_) => AcquireOutcome::Failed,
        };
        self.report(name, outcome);
    }

    fn report(&self, name: &LockName, outcome: AcquireOutcome) {
        self.locks.records().observer().acquisition(AcquireReport {
            lock: name,
            kind: Some(LeaseKind::Redlock),
            outcome,
            waited: None,
            handoff: None,
        });
    }

    /// A RedLock heartbeat (see [`Leases::renew`]).
    pub(super) async fn renew_on_nodes(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewed, LeaseError> {
        let renewed = self.nodes()?.renew(name, id, token, ttl).await;
        let observer = self.locks.records().observer();
        match renewed {
            Ok(red) => {
                Ledger { main: &self.locks }.renewed(name, &red.renewal, red.ack);
                observer.lease_live(id, Duration::from_millis(red.renewal.ttl_ms));
                Ok(Renewed {
                    renewal: red.renewal,
                    quorum: Some(red.ack),
                })
            }
            Err(e) => {
                if let LeaseError::Lock(LockError::LeaseLost(state)) = &e {
                    if *state == LeaseState::Expired {
                        observer.heartbeat_too_late();
                        observer.lease_expired(id);
                    } else {
                        observer.lease_ended(id);
                    }
                }
                Err(e)
            }
        }
    }

    /// A RedLock release (see [`Leases::release`]): with an Idempotency-Key, a retry is
    /// answered from the lease as it is (it let go no further level).
    pub(super) async fn release_on_nodes(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Release, LeaseError> {
        let redlock = self.nodes()?;
        if let Some(key) = idempotency
            && self.release_claimed(key, name, id, token, all).await?
        {
            return self.release_replayed(name, id).await;
        }
        let released = redlock.release(name, id, token, all).await?;
        if released.released {
            self.locks
                .records()
                .observer()
                .released(id, Some(LeaseKind::Redlock), None);
        }
        Ledger { main: &self.locks }.released(name, &released).await;
        Ok(released)
    }

    /// Claims `key` for this release; `true` when a first request claimed it before.
    async fn release_claimed(
        &self,
        key: &IdempotencyKey,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
    ) -> Result<bool, LeaseError> {
        let lease = id.to_string();
        let fp = fingerprint(
            Some(key),
            &[
                "redlock release",
                name.as_str(),
                &lease,
                if all { "all" } else { "" },
            ],
        );
        let sealed = key.seal(token);
        let claim = MultiOp::Claim {
            keep_ms: self.locks.records().tombstone_ms(),
            fingerprint: &fp,
            sealed: &sealed,
        };
        match self.locks.records().lease_claim(key, id, claim).await? {
            MultiReply::New => Ok(false),
            MultiReply::Claimed { fingerprint, .. } if fingerprint == fp => Ok(true),
            MultiReply::Claimed { .. } => Err(LockError::IdempotencyMismatch.into()),
            MultiReply::TooLate => Err(LockError::TooLate.into()),
            other => Err(LockError::BadReply(format!("a lease claim: {other:?}")).into()),
        }
    }

    /// A retried release's answer: the lease's levels as they are now.
    async fn release_replayed(&self, name: &LockName, id: LeaseId) -> Result<Release, LeaseError> {
        let (view, _) = self.nodes()?.lease(name, id).await?;
        let held = view.state == LeaseState::Held;
        Ok(Release {
            lease_id: id,
            reentry_count: if held { view.reentry_count } else { 0 },
            released: !held,
            replayed: true,
        })
    }

    /// Every RedLock holder of `name` removed on every node, each told once as force
    /// released.
    pub(super) async fn force_release_on_nodes(
        &self,
        name: &LockName,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LeaseError> {
        let acted = self.nodes()?.force_release(name, by, reason).await?;
        self.told_removed(name, &acted.forced, by, reason).await;
        Ok(acted.forced)
    }

    /// RedLock lease `id` of `name` removed on every node, told as force released.
    pub(super) async fn evict_on_nodes(
        &self,
        name: &LockName,
        id: LeaseId,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LeaseError> {
        let acted = self.nodes()?.evict(name, id, by, reason).await?;
        self.told_removed(name, &acted.forced, by, reason).await;
        Ok(acted.forced)
    }

    /// The leases an operator removed from the nodes: out of the index, told, untracked.
    async fn told_removed(&self, name: &LockName, forced: &ForcedRelease, by: &str, reason: &str) {
        let ledger = Ledger { main: &self.locks };
        for id in forced.removed.iter().filter_map(|h| h.lease_id) {
            let at = crate::locks::wall_ms();
            ledger
                .ended(name, id, LeaseState::ForceReleased, at, Some((by, reason)))
                .await;
            self.locks.records().observer().lease_ended(id);
        }
    }

    /// Whether the main Redis's index has a RedLock lease on `name` (a failed read says yes:
    /// the nodes are asked then).
    pub(super) async fn indexed_on_nodes(&self, name: &LockName) -> bool {
        let (from, to) = (format!("[{name}\t"), format!("({name}\n"));
        self.locks
            .records()
            .redlock_leases(&from, &to, 1)
            .await
            .map_or(true, |found| !found.is_empty())
    }
}
