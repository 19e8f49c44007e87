//! Watching a RedLock lease until it ends (`GET .../watch`), as [`crate::locks::LeaseWatch`]
//! watches any other: no polling. The watch registers on every node's waiter registry (each
//! node's unlock messages and watch messages wake it) and sets a timer at the moment fewer
//! than a majority of the nodes would still hold the lease; each wake-up reads the lease on
//! every node. It ends when a majority says the lease no longer holds there; while too few
//! nodes answer to tell, it keeps looking.
//!
//! A watch that tells its holder ([`RedWatch::ended_telling`]) tells what the majority says,
//! with the same [`Signals`] as a lease on the main Redis: `expiring` when the lease would
//! end on a majority within the slack (the quorum-th longest expiry), `renewed` after a late
//! heartbeat, `revocation_requested` when a node that holds the lease records a revocation
//! (the earliest deadline any of them set), and `degraded` while too few nodes answer to
//! confirm it (each node pinged while someone watches, as the main Redis is), `recovered`
//! when they do again; `contended` when the number of RedLock requests waiting for the name
//! changes: no node counts them, they are listed on the main Redis, and the watch follows
//! that list ([`crate::locks::Locks::follow_redlock_waiters`]), a change waking it as a
//! node's message does.
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Redlock;
use crate::locks::ops::signals::{Notice, Signals};
use crate::locks::wakeups::WatchRegistration;
use crate::locks::{
    LeaseEnd, LeaseId, LeaseKind, LeaseState, LeaseToken, LeaseView, LockError, LockName, Resource,
    Revocation, Timestamp,
};
use crate::redis::health::Reach;

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
    /// A majority holds it: the lease as the majority holds it (see [`quorum_view`]).
    Held {
        view: Box<LeaseView>,
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
        self.follow(None, None, None).await
    }

    /// As [`Self::ended`], telling the holder on the way through `tx` (see the module's
    /// comment), with `slack` before the majority's expiry for `expiring` (`None`: a third of
    /// the TTL) and `waiters` the count of RedLock requests waiting for the name. It stops
    /// early when `tx`'s receiver goes.
    pub async fn ended_telling(
        self,
        slack: Option<Duration>,
        tx: mpsc::Sender<Notice>,
        waiters: watch::Receiver<u64>,
    ) -> Result<LeaseEnd, LockError> {
        self.follow(Some(Signals::new(slack)), Some(tx), Some(waiters))
            .await
    }

    async fn follow(
        self,
        mut signals: Option<Signals>,
        tx: Option<mpsc::Sender<Notice>>,
        mut waiters: Option<watch::Receiver<u64>>,
    ) -> Result<LeaseEnd, LockError> {
        let shutdown = self.redlock.shutdown.clone();
        // Whether each node answers (probed only while someone is told).
        let mut reach: Vec<tokio::sync::watch::Receiver<Reach>> = match signals {
            Some(_) => self.redlock.nodes.iter().map(|n| n.reach()).collect(),
            None => Vec::new(),
        };
        let mut told_revocation: Option<Revocation> = None;
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
            let keys: Vec<&str> = self.registrations.iter().map(|r| r.key()).collect();
            let epochs = self.redlock.epochs(&keys);
            let (read, answered, _) = self.read().await;
            let (told, retry_at) = match read {
                Read::Ended(end) => {
                    let revoked = signals.as_ref().and_then(Signals::revocation).is_some();
                    return Ok(end.revoked_if(revoked));
                }
                Read::Held { mut view } => {
                    view.revocation = earliest(told_revocation.take(), view.revocation.take());
                    told_revocation.clone_from(&view.revocation);
                    view.waiters = waiters.as_mut().map(|w| *w.borrow_and_update());
                    match signals.as_mut() {
                        Some(s) => s.held(&view, Instant::now()),
                        None => (Vec::new(), after(&view)),
                    }
                }
                Read::Unknown => {
                    let told = signals
                        .as_mut()
                        .and_then(|s| s.unreachable(Timestamp(crate::redis::wall_ms())));
                    (
                        told.into_iter().collect(),
                        Instant::now() + RETRY_AFTER_ERROR,
                    )
                }
            };
            if let Some(tx) = &tx {
                for signal in told {
                    let notice = Notice {
                        member: None,
                        signal,
                    };
                    if tx.send(notice).await.is_err() {
                        return Err(LockError::ShuttingDown);
                    }
                }
            }
            // Held while the watch sleeps: each node's subscription it relies on stays.
            let parked = self.redlock.park(&keys, epochs, &answered, retry_at).await;
            let Some(_claims) = parked else {
                continue;
            };
            let woken = select_all(notified.iter_mut().map(|n| n.as_mut()));
            let reach_changed = async {
                if reach.is_empty() {
                    std::future::pending::<()>().await;
                }
                let _ = select_all(reach.iter_mut().map(|r| Box::pin(r.changed()))).await;
            };
            let gone = async {
                match &tx {
                    Some(tx) => tx.closed().await,
                    None => std::future::pending().await,
                }
            };
            let waiters_changed = async {
                let stopped = match waiters.as_mut() {
                    Some(w) => w.changed().await.is_err(),
                    None => true,
                };
                // The follower stopped (shutting down): nothing more to hear from it.
                if stopped {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = woken => {}
                () = waiters_changed => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = reach_changed => {}
                () = gone => return Err(LockError::ShuttingDown),
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
        let held: Vec<&LeaseView> = views
            .iter()
            .filter_map(|v| v.as_ref().ok())
            .filter(|v| v.state == LeaseState::Held)
            .collect();
        if held.len() >= quorum {
            let view = quorum_view(held, quorum);
            return (Read::Held { view }, answered, known);
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
        let views: Vec<&LeaseView> = ended.iter().flatten().copied().collect();
        (Read::Ended(end_of(&views)), answered, known)
    }
}

/// The lease as a majority of the nodes hold it (`held`: at least `quorum` views): held until
/// fewer than a majority would hold it, the quorum-th longest expiry, as this instance's
/// clock has it (the nodes' clocks are independent); with the earliest revocation any of
/// them recorded.
fn quorum_view(mut held: Vec<&LeaseView>, quorum: usize) -> Box<LeaseView> {
    let left = |v: &LeaseView| v.remaining_ms.unwrap_or(3_600_000);
    held.sort_unstable_by_key(|v| std::cmp::Reverse(left(v)));
    let revocation = held
        .iter()
        .filter_map(|v| v.revocation.clone())
        .min_by_key(|r| r.deadline);
    let mut view = Box::new(held[quorum - 1].clone());
    let remaining = left(&view);
    view.kind = LeaseKind::Redlock;
    view.remaining_ms = Some(remaining);
    view.expires_at = Timestamp(crate::redis::wall_ms()).plus(remaining);
    view.revocation = revocation;
    view.waiters = None;
    view
}

/// How a lease ended, from the nodes' views of its end: released where a node says so; else
/// how the others ended; else (no node remembers it) expired.
fn end_of(views: &[&LeaseView]) -> LeaseEnd {
    views
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
        )
}

/// The earlier of two revocations: the one told stands until a read shows an earlier
/// deadline (a node that recorded the earliest may not answer every read).
fn earliest(told: Option<Revocation>, read: Option<Revocation>) -> Option<Revocation> {
    match (told, read) {
        (Some(t), Some(r)) if r.deadline < t.deadline => Some(r),
        (Some(t), Some(_)) => Some(t),
        (t, r) => t.or(r),
    }
}

/// When to read a held lease again when nothing wakes the watch sooner: just past the
/// majority's expiry (never in a tight loop).
fn after(view: &LeaseView) -> Instant {
    let left = Duration::from_millis(view.remaining_ms.unwrap_or(3_600_000));
    (Instant::now() + left + Duration::from_millis(1))
        .max(Instant::now() + Duration::from_millis(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::ops::signals::tests::view;

    fn held(remaining_ms: u64, deadline: Option<u64>) -> LeaseView {
        LeaseView {
            revocation: deadline.map(revocation),
            ..view(remaining_ms, 30_000, 0, 4)
        }
    }

    fn revocation(deadline: u64) -> Revocation {
        Revocation {
            reason: "r".into(),
            by: "admin".into(),
            requested_at: Timestamp(0),
            deadline: Timestamp(deadline),
        }
    }

    #[test]
    fn the_majority_holds_until_the_quorum_th_longest_expiry_with_the_earliest_revocation() {
        let (a, b, c) = (
            held(9_000, None),
            held(3_000, Some(70)),
            held(6_000, Some(50)),
        );
        let view = quorum_view(vec![&a, &b, &c], 2);
        assert_eq!(view.remaining_ms, Some(6_000), "two nodes hold it 6 s more");
        assert_eq!(view.kind, LeaseKind::Redlock);
        assert_eq!(view.revocation.map(|r| r.deadline), Some(Timestamp(50)));
        assert_eq!(
            view.waiters, None,
            "no node counts RedLock waiters (the watch follows the main Redis)"
        );
    }

    #[test]
    fn a_revocation_told_stands_until_an_earlier_one_is_read() {
        let told = Some(revocation(50));
        assert_eq!(earliest(told.clone(), Some(revocation(70))), told);
        assert_eq!(earliest(told.clone(), None), told);
        assert_eq!(
            earliest(told, Some(revocation(40))),
            Some(revocation(40)),
            "a second, shorter revocation is told"
        );
        assert_eq!(earliest(None, Some(revocation(70))), Some(revocation(70)));
    }
}
