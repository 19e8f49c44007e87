//! The one place that knows where a lease lives: between the transports (`api`, `dashboard`,
//! `operator`) and the stores. A lease lives on the main Redis ([`crate::locks`]: every lock
//! kind and semaphore), on the RedLock nodes ([`redlock`]: `kind: "redlock"`), or as a
//! multilease record whose members are main leases ([`multi`]). Where is decided once, when
//! it is granted, and written into its id ([`Placement`]); every later call on it (heartbeat,
//! release, inspect, watch, eviction) goes straight to that store. What spans the stores (a
//! name's inspection, the listing, an operator's force release) asks each store that may
//! hold the name and shows one answer.
//!
//! [`Leases`] is the handle, one per caller (in the caller's tenant); like Redisson's one
//! `RLock` interface over `RedissonLock`, `RedissonRedLock` and `RedissonMultiLock`, the
//! transports see one set of calls whatever the lease's kind.

pub mod election;
mod error;
mod listing;
pub mod multi;
mod on_nodes;
mod placement;
pub mod redlock;
pub mod revocation;

use std::pin::Pin;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::Either;

pub use self::error::LeaseError;
pub use self::multi::HeldMultilease;
pub use self::placement::Placement;
pub use self::redlock::{QuorumAck, Redlock};
use crate::locks::{
    AcquireRequest, Acquired, ForcedRelease, IdempotencyKey, LeaseEnd, LeaseId, LeaseKind,
    LeaseToken, LeaseView, LockError, LockName, LockView, Locks, Release, Renewal, Resource,
    RwMode, Ttl,
};

/// A lease's end, awaited (see [`Leases::watch`]).
pub type LeaseEnding = Pin<Box<dyn Future<Output = Result<LeaseEnd, LockError>> + Send>>;

/// Signals told and not yet sent on, at most (the watch waits for its stream beyond that).
pub(crate) const SIGNALS_QUEUED: usize = 8;

/// A watch that tells its holder: the signals as they come, and the end (which must be
/// polled for the signals to come), with the member that ended a multilease.
pub struct Telling {
    pub signals: tokio::sync::mpsc::Receiver<crate::locks::ops::signals::Notice>,
    pub ended: TellingEnd,
}

/// How a telling watch's lease ended, and which member ended a multilease.
pub type TellingEnd =
    Pin<Box<dyn Future<Output = Result<(LeaseEnd, Option<LockName>), LockError>> + Send>>;

/// A grant, and for a lease held by a majority of stores, how many acknowledged it.
#[derive(Debug)]
pub struct Granted {
    pub acquired: Acquired,
    pub quorum: Option<QuorumAck>,
}

/// A heartbeat's answer.
#[derive(Debug)]
pub struct Renewed {
    pub renewal: Renewal,
    pub quorum: Option<QuorumAck>,
}

/// Every store a caller's leases may live in, in the caller's key space. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    locks: Locks,
    redlock: Option<Redlock>,
}

impl Leases {
    /// The stores of one key space: the main Redis's lock domain, and the RedLock nodes (in
    /// the same key space) when `--redlock-nodes` was given.
    pub fn new(locks: Locks, redlock: Option<Redlock>) -> Self {
        Self { locks, redlock }
    }

    /// The main Redis's lock domain, for what only it holds (semaphores' state, waiting
    /// lists, quotas' records).
    pub fn locks(&self) -> &Locks {
        &self.locks
    }

    /// The RedLock nodes, when configured.
    pub fn redlock(&self) -> Option<&Redlock> {
        self.redlock.as_ref()
    }

    fn nodes(&self) -> Result<&Redlock, LeaseError> {
        self.redlock.as_ref().ok_or(LeaseError::RedlockDisabled)
    }

    /// Where lease `id` of `resource` lives: RedLock leases are locks only.
    fn placement(resource: Resource, id: LeaseId) -> Placement {
        match Placement::of(id) {
            Placement::Redlock if resource == Resource::Lock => Placement::Redlock,
            Placement::Redlock | Placement::Multi | Placement::Election => Placement::Main,
            Placement::Main => Placement::Main,
        }
    }

    /// How many calls a call on a lease of `kind` makes of its stores: one, or one per RedLock
    /// node (what the caller's request rate pays).
    pub fn cost_of_kind(&self, kind: Option<LeaseKind>) -> u32 {
        match (&self.redlock, kind) {
            (Some(nodes), Some(LeaseKind::Redlock)) => {
                u32::try_from(nodes.nodes().len()).unwrap_or(u32::MAX)
            }
            _ => 1,
        }
    }

    /// [`Self::cost_of_kind`] for lease `id` of `resource`.
    pub fn cost_of(&self, resource: Resource, id: LeaseId) -> u32 {
        match Self::placement(resource, id) {
            Placement::Redlock => self.cost_of_kind(Some(LeaseKind::Redlock)),
            _ => 1,
        }
    }

    /// Whether an answer to Idempotency-Key `key` is kept for a new lease of `kind` on
    /// `name`, which a retry replays (taking nothing new): on the name's own record, or for a
    /// RedLock lease the key's claim (see [`Self::claim_kept`]).
    pub async fn answer_kept(
        &self,
        name: &LockName,
        kind: Option<LeaseKind>,
        key: &IdempotencyKey,
    ) -> Result<bool, LeaseError> {
        if kind == Some(LeaseKind::Redlock) {
            return self.claim_kept(key).await;
        }
        Ok(self.locks.answer_kept(name, key).await?)
    }

    /// Whether `key` has a claim on a lease (a multilease's, a RedLock lease's): its first
    /// request's token, kept for a retry.
    pub async fn claim_kept(&self, key: &IdempotencyKey) -> Result<bool, LeaseError> {
        Ok(self.locks.records().claim_kept(key).await?)
    }

    /// Acquires `name` for a new lease of `request.kind` (`kind: redlock` on the RedLock
    /// nodes, every other kind on the main Redis), or re-enters the lease the `reentry` token
    /// proves, waiting up to `wait` while the lock is taken.
    ///
    /// Not an `async fn`: the main Redis's waiting future owns the request and borrows
    /// nothing, so a caller can make it ahead and box it (see `Locks::acquire`).
    pub fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
        reentry: Option<LeaseToken>,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Granted, LeaseError>> + Send + use<> {
        if request.kind == Some(LeaseKind::Redlock) {
            let (leases, name) = (self.clone(), name.clone());
            return Either::Left(Box::pin(async move {
                leases
                    .acquire_on_nodes(&name, request, reentry, ttl, wait)
                    .await
            }));
        }
        Either::Right(
            self.locks
                .acquire(name, request, reentry, ttl, wait)
                .map(|acquired| {
                    Ok(Granted {
                        acquired: acquired?,
                        quorum: None,
                    })
                }),
        )
    }

    /// Extends a live lease to its TTL (or to `ttl`).
    pub async fn renew(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewed, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => self.renew_on_nodes(name, id, token, ttl).await,
            _ => Ok(Renewed {
                renewal: self.locks.renew(resource, name, id, token, ttl).await?,
                quorum: None,
            }),
        }
    }

    /// Releases one level of the lease (or `all`; `mode`: which hold of a read/write lease).
    #[allow(clippy::too_many_arguments)] // The lease, its proof, and what to let go.
    pub async fn release(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
        mode: Option<RwMode>,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Release, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => {
                self.release_on_nodes(name, id, token, all, idempotency)
                    .await
            }
            _ => Ok(self
                .locks
                .release(resource, name, id, token, all, mode, idempotency)
                .await?),
        }
    }

    /// The lease as anyone may see it (never its token).
    pub async fn lease(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
    ) -> Result<LeaseView, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => Ok(self.nodes()?.lease(name, id).await?.0),
            _ => Ok(self.locks.lease(resource, name, id).await?),
        }
    }

    /// Waits until the lease ends, for the holder of `token`: refused when the token does not
    /// prove it or it has ended already.
    pub async fn watch(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<LeaseEnding, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => {
                let watch = self.nodes()?.watch(name, id, token).await?;
                Ok(Box::pin(watch.ended()))
            }
            _ => {
                let watch = self.locks.watch(resource, name, id, token).await?;
                Ok(Box::pin(watch.ended()))
            }
        }
    }

    /// As [`Self::watch`], telling the holder on the way (see
    /// [`crate::locks::ops::signals`]); a RedLock lease's from what a majority of its nodes
    /// say, and its waiters from the main Redis's waiting list.
    pub async fn watch_telling(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        slack: Option<std::time::Duration>,
    ) -> Result<Telling, LeaseError> {
        let (tx, signals) = tokio::sync::mpsc::channel(SIGNALS_QUEUED);
        let ended: LeaseEnding = match Self::placement(resource, id) {
            Placement::Redlock => {
                let watch = self.nodes()?.watch(name, id, token).await?;
                let waiters = self.locks.follow_redlock_waiters(name);
                Box::pin(watch.ended_telling(slack, tx, waiters))
            }
            _ => {
                let watch = self.locks.watch(resource, name, id, token).await?;
                Box::pin(watch.ended_telling(slack, tx, None))
            }
        };
        Ok(Telling {
            signals,
            ended: Box::pin(ended.map(|end| end.map(|end| (end, None)))),
        })
    }

    /// `name` as every store holds it: the main Redis's view, with the leases a majority of
    /// the RedLock nodes hold on it (`None`: free everywhere, and unknown).
    pub async fn lock(&self, name: &LockName) -> Result<Option<LockView>, LeaseError> {
        let Some(redlock) = &self.redlock else {
            return Ok(self.locks.lock(name).await?);
        };
        let (main, indexed) = tokio::join!(self.locks.lock(name), self.indexed_on_nodes(name));
        let main = main?;
        if !indexed {
            return Ok(main);
        }
        let red = redlock.lock(name).await?;
        Ok(listing::merged(main, red))
    }

    /// Removes every holder of `name` (on the main Redis, and on every RedLock node for a
    /// lock) and wakes its waiters, recorded as done `by` for `reason`; with `clear`, a
    /// semaphore goes too.
    pub async fn force_release(
        &self,
        resource: Resource,
        name: &LockName,
        by: &str,
        reason: &str,
        clear: bool,
    ) -> Result<ForcedRelease, LeaseError> {
        let mut forced = self
            .locks
            .force_release(resource, name, by, reason, clear)
            .await?;
        if resource == Resource::Lock && self.redlock.is_some() {
            let on_nodes = self.force_release_on_nodes(name, by, reason).await?;
            forced.removed.extend(on_nodes.removed);
        }
        Ok(forced)
    }

    /// Removes lease `id` of `name` (where it lives), recorded like a force release.
    pub async fn evict(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LeaseError> {
        match Self::placement(resource, id) {
            Placement::Redlock => self.evict_on_nodes(name, id, by, reason).await,
            _ => Ok(self.locks.evict(resource, name, id, by, reason).await?),
        }
    }
}
