//! Watching a lease until it ends, for its holder: no polling. A watch wakes on the lock's
//! wake-ups through the process's one subscriber (a release, a force release, a reconnect:
//! see [`crate::locks::wakeups::WaitRegistry::watch`]) and on a timer at the lease's current expiry (an
//! expiry publishes nothing); each wake-up re-reads the lease (one read-only script call).
//! A heartbeat moves the expiry: the timer then finds the lease still held and is re-armed at
//! the new expiry.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::signals::{Notice, Signals};
use crate::locks::types::Resource;
use crate::locks::wakeups::{Parking, WatchRegistration};
use crate::locks::{
    LeaseId, LeaseState, LeaseToken, LeaseView, LockError, LockName, Locks, Timestamp,
};

/// How long to wait before reading the lease again after Redis failed to answer (a
/// subscriber reconnect, or Redis answering the health probe again, wakes the watch sooner).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// How long a watch that tells its holder waits for a read of the lease before it takes
/// Redis as unreachable (`degraded`): well above a healthy read (about a millisecond), well
/// below the second within which a holder should hear of it.
const READ_WITHIN: Duration = Duration::from_millis(400);

/// How often a lease with no expiry is re-read without a wake-up.
const NO_EXPIRY: Duration = Duration::from_secs(3600);

/// How a watched lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseEnd {
    /// `Released`, `Expired`, `ForceReleased` (or `Left`, never for a held lease).
    pub state: LeaseState,
    pub ended_at: Option<Timestamp>,
    /// An admin had asked its holder to let go, and it ended other than by a release: the
    /// revocation's deadline (or an admin) ended it (reason `revoked`).
    pub revoked: bool,
}

impl LeaseEnd {
    /// This end, marked revoked when the watch told a revocation and the lease was not
    /// released.
    pub(crate) fn revoked_if(mut self, told: bool) -> Self {
        self.revoked |= told && self.state != LeaseState::Released;
        self
    }

    /// The reason a holder is told: the state, or `revoked`.
    pub fn reason(&self) -> &str {
        if self.revoked {
            "revoked"
        } else {
            self.state.as_str()
        }
    }
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
        self.follow(None, None).await
    }

    /// As [`Self::ended`], telling the holder on the way ([`Signal`]s, see
    /// [`super::signals`]) through `tx`, with `slack` before the expiry for `expiring`
    /// (`None`: a third of the TTL). It stops early when `tx`'s receiver goes.
    /// `member`: the multilease member this lease is (its signals say so).
    pub async fn ended_telling(
        self,
        slack: Option<Duration>,
        tx: mpsc::Sender<Notice>,
        member: Option<LockName>,
    ) -> Result<LeaseEnd, LockError> {
        self.follow(Some(Signals::new(slack)), Some((tx, member)))
            .await
    }

    async fn follow(
        self,
        mut signals: Option<Signals>,
        tx: Option<(mpsc::Sender<Notice>, Option<LockName>)>,
    ) -> Result<LeaseEnd, LockError> {
        let shutdown = self.locks.inner.shutdown.clone();
        // Whether this instance reaches Redis (probed only while someone asks).
        let mut reach = signals
            .is_some()
            .then(|| self.locks.inner.conn.health().subscribe());
        loop {
            // Each round reads the lease after its wake-up is armed: an end that lands in
            // between still wakes it (the first read repeats `watch`'s for that reason).
            let notified = self.registration.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let waiters = &self.locks.inner.waiters;
            let epoch = waiters.epoch(self.registration.key());
            let (told, retry_at) = match self.read_within(signals.is_some()).await {
                Ok(Read::Ended(end)) => {
                    let revoked = signals.as_ref().and_then(Signals::revocation).is_some();
                    return Ok(end.revoked_if(revoked));
                }
                Ok(Read::Held { view }) => match signals.as_mut() {
                    Some(s) => s.held(&view, Instant::now()),
                    None => (Vec::new(), after(&view)),
                },
                Err(e) if e.unavailable() => {
                    let told = signals
                        .as_mut()
                        .and_then(|s| s.unreachable(Timestamp(crate::redis::wall_ms())));
                    (
                        told.into_iter().collect(),
                        Instant::now() + RETRY_AFTER_ERROR,
                    )
                }
                Err(e) => return Err(e),
            };
            if let Some((tx, member)) = &tx {
                for signal in told {
                    let notice = Notice {
                        member: member.clone(),
                        signal,
                    };
                    if tx.send(notice).await.is_err() {
                        return Err(LockError::ShuttingDown);
                    }
                }
            }
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
            let gone = async {
                match &tx {
                    Some((tx, _)) => tx.closed().await,
                    None => std::future::pending().await,
                }
            };
            let reach_changed = async {
                match reach.as_mut() {
                    Some(r) => {
                        let _ = r.changed().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = reach_changed => {}
                () = gone => return Err(LockError::ShuttingDown),
                () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
            }
        }
    }

    /// Reads the lease; when telling the holder, within [`READ_WITHIN`] (a Redis that does
    /// not answer by then is taken as unreachable: `degraded`).
    async fn read_within(&self, bounded: bool) -> Result<Read, LockError> {
        if !bounded {
            return self.read().await;
        }
        tokio::time::timeout(READ_WITHIN, self.read())
            .await
            .unwrap_or_else(|_| {
                Err(LockError::Unavailable(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "a lease read took longer than the watch waits",
                ))))
            })
    }

    /// Reads the lease: still held (as it looks now), or how it ended.
    async fn read(&self) -> Result<Read, LockError> {
        let view = match self.locks.lease(self.resource, &self.name, self.id).await {
            Ok(view) => view,
            // The record outlives the lease by the tombstone time: gone means long over.
            Err(LockError::UnknownLease) => {
                return Ok(Read::Ended(LeaseEnd {
                    state: LeaseState::Expired,
                    ended_at: None,
                    revoked: false,
                }));
            }
            Err(e) => return Err(e),
        };
        Ok(match view.state {
            // A held lease never goes back to a queue: `Queued` cannot come here.
            LeaseState::Held | LeaseState::Queued => Read::Held {
                view: Box::new(view),
            },
            state => Read::Ended(LeaseEnd {
                state,
                ended_at: view.ended_at,
                revoked: view.revocation.is_some() && state != LeaseState::Released,
            }),
        })
    }
}

/// What one read of a watched lease found.
enum Read {
    Held { view: Box<LeaseView> },
    Ended(LeaseEnd),
}

/// When to read a held lease again when nothing wakes the watch sooner: just past its
/// expiry, so Redis has let the key go by then (and never in a tight loop should a lease
/// read as held with no time left). One without a TTL (a lock a Redisson client took with no
/// lease time) is re-read only on wake-ups, and once an hour.
fn after(view: &LeaseView) -> Instant {
    let left = view.remaining_ms.map_or(NO_EXPIRY, Duration::from_millis);
    (Instant::now() + left + Duration::from_millis(1))
        .max(Instant::now() + Duration::from_millis(5))
}
