//! Watching a lease until it ends, for its holder: no polling. A watch wakes on the lock's
//! wake-ups through the process's one subscriber (a release, a force release, a reconnect:
//! see [`crate::locks::wakeups::WaitRegistry::watch`]) and on a timer at the lease's current expiry (an
//! expiry publishes nothing); each wake-up re-reads the lease (one read-only script call).
//! A heartbeat moves the expiry: the timer then finds the lease still held and is re-armed at
//! the new expiry.

use std::time::Duration;

use tokio::time::Instant;

use crate::locks::types::Resource;
use crate::locks::wakeups::{Parking, WatchRegistration};
use crate::locks::{LeaseId, LeaseState, LeaseToken, LockError, LockName, Locks, Timestamp};

/// How long to wait before reading the lease again after Redis failed to answer (a
/// subscriber reconnect wakes the watch sooner).
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

/// How often a lease with no expiry is re-read without a wake-up.
const NO_EXPIRY: Duration = Duration::from_secs(3600);

/// How a watched lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseEnd {
    /// `Released`, `Expired`, `ForceReleased` (or `Left`, never for a held lease).
    pub state: LeaseState,
    pub ended_at: Option<Timestamp>,
}

/// A lease being watched: [`LeaseWatch::ended`] resolves when it no longer holds its lock.
pub struct LeaseWatch {
    locks: Locks,
    resource: Resource,
    name: LockName,
    id: LeaseId,
    registration: WatchRegistration,
}

impl Locks {
    /// Starts watching lease `id` of `name` for the holder of `token`: refused when the token
    /// does not prove the lease, when the lease has already ended (`LeaseLost`) or when it is
    /// a fair ticket still queued.
    pub async fn watch(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<LeaseWatch, LockError> {
        self.check_token(resource, name, id, token).await?;
        // Registered before the first read, so an end right after it still wakes the watch.
        let registration = self.inner.waiters.watch(self.inner.keys.lock(name).lock());
        let watch = LeaseWatch {
            locks: self.clone(),
            resource,
            name: name.clone(),
            id,
            registration,
        };
        let view = self.lease(resource, name, id).await?;
        match view.state {
            LeaseState::Held => Ok(watch),
            LeaseState::Queued => Err(LockError::TicketPending),
            state => Err(LockError::LeaseLost(state)),
        }
    }

    /// Whether `token` proves lease `id` (a lease id is made from its token: no lookup);
    /// a token that does not is refused as the wrong one for a lease that exists, else the
    /// lease is unknown.
    async fn check_token(
        &self,
        resource: Resource,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), LockError> {
        if token.proves(id) {
            return Ok(());
        }
        match self.lease(resource, name, id).await {
            Ok(_) => Err(LockError::TokenMismatch),
            Err(e) => Err(e),
        }
    }
}

impl LeaseWatch {
    /// Waits until the lease no longer holds its lock and says how. While Redis does not
    /// answer it keeps trying (a lease is not lost because its server cannot see it); it
    /// fails only when the service shuts down.
    pub async fn ended(self) -> Result<LeaseEnd, LockError> {
        let shutdown = self.locks.inner.shutdown.clone();
        loop {
            // Each round reads the lease after its wake-up is armed: an end that lands in
            // between still wakes it (the first read repeats `watch`'s for that reason).
            let notified = self.registration.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let waiters = &self.locks.inner.waiters;
            let epoch = waiters.epoch(self.registration.key());
            let retry_at = match self.read().await {
                Ok(Read::Ended(end)) => return Ok(end),
                Ok(Read::Held { expires }) => {
                    // Just past the expiry, so Redis has let the key go by then (and never
                    // in a tight loop should a lease read as held with no time left).
                    (expires + Duration::from_millis(1))
                        .max(Instant::now() + Duration::from_millis(5))
                }
                Err(e) if e.unavailable() => Instant::now() + RETRY_AFTER_ERROR,
                Err(e) => return Err(e),
            };
            // As a waiting request (see `acquire_waiting`): a message wakes the watch only if
            // this process listened since before the read; if not, listen and read again.
            let parking = tokio::select! {
                parking = waiters.park(self.registration.key(), epoch, retry_at) => parking,
                () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
            };
            let _reliance = match parking {
                Parking::Heard(reliance) => Some(reliance),
                Parking::Armed => continue,
                Parking::Unheard => None,
            };
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
            }
        }
    }

    /// Reads the lease: still held (until when), or how it ended.
    async fn read(&self) -> Result<Read, LockError> {
        let view = match self.locks.lease(self.resource, &self.name, self.id).await {
            Ok(view) => view,
            // The record outlives the lease by the tombstone time: gone means long over.
            Err(LockError::UnknownLease) => {
                return Ok(Read::Ended(LeaseEnd {
                    state: LeaseState::Expired,
                    ended_at: None,
                }));
            }
            Err(e) => return Err(e),
        };
        Ok(match view.state {
            // A held lease never goes back to a queue: `Queued` cannot come here.
            LeaseState::Held | LeaseState::Queued => Read::Held {
                expires: expiry(view.remaining_ms),
            },
            state => Read::Ended(LeaseEnd {
                state,
                ended_at: view.ended_at,
            }),
        })
    }
}

/// What one read of a watched lease found.
enum Read {
    Held { expires: Instant },
    Ended(LeaseEnd),
}

/// When a lease with `remaining_ms` left runs out; one without a TTL (a lock a Redisson
/// client took with no lease time) is re-read only on wake-ups, and once an hour.
fn expiry(remaining_ms: Option<u64>) -> Instant {
    Instant::now() + remaining_ms.map_or(NO_EXPIRY, Duration::from_millis)
}
