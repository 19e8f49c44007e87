//! Watching a RedLock lease until it ends (`GET .../watch`), as [`crate::locks::LeaseWatch`]
//! watches any other: no polling. The watch registers on every node's waiter registry (each
//! node's unlock messages wake it) and sets a timer at the moment fewer than a majority of
//! the nodes would still hold the lease; each wake-up reads the lease on every node. It ends
//! when a majority says the lease no longer holds there; while too few nodes answer to tell,
//! it keeps looking.

use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use super::{ARM_WAIT, Redlock};
use crate::locks::wakeups::{Parking, WatchRegistration};
use crate::locks::{
    LeaseEnd, LeaseId, LeaseState, LeaseToken, LeaseView, LockError, LockName, Resource,
};

/// How long to wait before reading again when too few nodes answered (an unlock message or
/// a subscriber reconnect wakes the watch sooner).
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

/// A RedLock lease being watched: [`RedWatch::ended`] resolves when a majority of the nodes
/// no longer hold it.
pub struct RedWatch {
    redlock: Redlock,
    name: LockName,
    id: LeaseId,
    registrations: Vec<WatchRegistration>,
}

/// What one read of every node found.
enum Read {
    /// A majority holds it, the last of them until `expires`.
    Held {
        expires: Instant,
    },
    Ended(LeaseEnd),
    /// Too few nodes answered to tell.
    Unknown,
}

impl Redlock {
    /// Starts watching RedLock lease `id` of `name` for the holder of `token`: refused when
    /// the token does not prove it, or when it no longer holds (or never did).
    pub async fn watch(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<RedWatch, LockError> {
        if !token.proves(id) {
            return Err(LockError::TokenMismatch);
        }
        // Registered before the first read, so an end right after it still wakes the watch.
        let registrations = self
            .nodes
            .iter()
            .map(|n| {
                n.locks
                    .redlock_node()
                    .waiter_registry()
                    .watch(&n.locks.redlock_node().wake_key_of(name))
            })
            .collect();
        let watch = RedWatch {
            redlock: self.clone(),
            name: name.clone(),
            id,
            registrations,
        };
        let (read, _, known) = watch.read().await;
        match read {
            Read::Held { .. } => Ok(watch),
            // Known to none of the nodes: no such lease (404), not a lost one.
            Read::Ended(_) if !known => Err(LockError::UnknownLease),
            Read::Ended(end) => Err(LockError::LeaseLost(end.state)),
            // A lease nobody can vouch for now: watched all the same (it may come back).
            Read::Unknown => Ok(watch),
        }
    }
}

impl RedWatch {
    /// Waits until a majority of the nodes no longer hold the lease, and says how.
    pub async fn ended(self) -> Result<LeaseEnd, LockError> {
        let shutdown = self.redlock.shutdown.clone();
        loop {
            let mut notified: Vec<_> = self
                .registrations
                .iter()
                .map(|r| {
                    let mut n = Box::pin(r.notified());
                    n.as_mut().enable();
                    n
                })
                .collect();
            let epochs: Vec<_> = self
                .redlock
                .nodes
                .iter()
                .zip(&self.registrations)
                .map(|(n, r)| n.locks.redlock_node().waiter_registry().epoch(r.key()))
                .collect();
            let (read, answered, _) = self.read().await;
            let retry_at = match read {
                Read::Ended(end) => return Ok(end),
                Read::Held { expires } => (expires + Duration::from_millis(1))
                    .max(Instant::now() + Duration::from_millis(5)),
                Read::Unknown => Instant::now() + RETRY_AFTER_ERROR,
            };
            let parks = join_all(
                self.redlock
                    .nodes
                    .iter()
                    .zip(&self.registrations)
                    .zip(epochs)
                    .zip(answered)
                    .map(|(((n, r), epoch), answered)| async move {
                        if !answered {
                            return Parking::Unheard;
                        }
                        let until = retry_at.min(Instant::now() + ARM_WAIT);
                        n.locks
                            .redlock_node()
                            .waiter_registry()
                            .park(r.key(), epoch, until)
                            .await
                    }),
            )
            .await;
            if parks.iter().any(|p| matches!(p, Parking::Armed)) {
                continue;
            }
            let _claims = parks;
            let woken = select_all(notified.iter_mut().map(|n| n.as_mut()));
            tokio::select! {
                _ = woken => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
            }
        }
    }

    /// Reads the lease on every node; which nodes answered, and whether any knew the lease.
    async fn read(&self) -> (Read, Vec<bool>, bool) {
        let redlock = &self.redlock;
        let views: Vec<Result<LeaseView, LockError>> =
            join_all(redlock.nodes.iter().map(|n| async move {
                let read = n.locks.lease(Resource::Lock, &self.name, self.id);
                match tokio::time::timeout(redlock.read_timeout(), read).await {
                    Ok(view) => view,
                    Err(_) => Err(LockError::Busy),
                }
            }))
            .await;
        let answered = views
            .iter()
            .map(|v| !matches!(v, Err(e) if e.unavailable()))
            .collect();
        let known = views.iter().any(Result::is_ok);
        let quorum = redlock.quorum();
        let mut held: Vec<u64> = views
            .iter()
            .filter_map(|v| v.as_ref().ok())
            .filter(|v| v.state == LeaseState::Held)
            .map(|v| v.remaining_ms.unwrap_or(3_600_000))
            .collect();
        if held.len() >= quorum {
            // Held until fewer than a majority would hold it: the quorum-th longest.
            held.sort_unstable_by(|a, b| b.cmp(a));
            let left = held[quorum - 1];
            return (
                Read::Held {
                    expires: Instant::now() + Duration::from_millis(left),
                },
                answered,
                known,
            );
        }
        let ended: Vec<Option<&LeaseView>> = views
            .iter()
            .filter_map(|v| match v {
                Ok(view) if view.state != LeaseState::Held => Some(Some(view)),
                Err(LockError::UnknownLease) => Some(None),
                _ => None,
            })
            .collect();
        // Nodes that did not answer might hold it: while they could make a majority with
        // those that do, nobody can tell.
        let unanswered = redlock.nodes.len() - held.len() - ended.len();
        if held.len() + unanswered >= quorum {
            return (Read::Unknown, answered, known);
        }
        // Released where a node says so; else how the others ended; else expired.
        let views: Vec<&LeaseView> = ended.iter().flatten().copied().collect();
        let end = views
            .iter()
            .find(|v| v.state == LeaseState::Released)
            .or(views.first())
            .map_or(
                LeaseEnd {
                    state: LeaseState::Expired,
                    ended_at: None,
                    revoked: false,
                },
                |v| LeaseEnd {
                    state: v.state,
                    ended_at: v.ended_at,
                    revoked: v.revocation.is_some() && v.state != LeaseState::Released,
                },
            );
        (Read::Ended(end), answered, known)
    }
}
