//! What a kept lease ([`crate::KeptLease`]) and its two loops (`upkeep`) share: its last
//! renewal, its loss and the signal that carries it.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::{
    Degraded, GrantBody, LeaseId, MultiMemberBody, RenewalBody, RevocationBody, WatchSignal,
};

/// A kept lease was lost: the work under it may no longer be protected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lease {lease_id} on {lock:?} lost ({reason}): {detail}")]
pub struct LeaseLost {
    pub lease_id: LeaseId,
    /// The lock's or semaphore's name; a multilease's locks, joined by commas.
    pub lock: String,
    /// The server's reason (`expired`, `force_released`, `evicted`, `released` by someone
    /// else with its token, ...), `not_found` (the server no longer knows the lease), or
    /// [`UNRENEWABLE`].
    pub reason: String,
    /// A multilease's: the lock whose end ended it (given up as [`REVOKED`]: the member
    /// whose revocation had the earliest deadline).
    pub member: Option<String>,
    /// What happened, for people.
    pub detail: String,
}

/// The reason of a lease this client gave up: no heartbeat succeeded until only the loss
/// margin of its TTL was left, so the server might soon grant the lock to someone else.
pub const UNRENEWABLE: &str = "unrenewable";

/// The reason of a lease an operator revoked: given up by this client the loss margin before
/// the revocation's deadline (or told so by the server, at the deadline).
pub const REVOKED: &str = "revoked";

/// What a kept lease's watch told while the lease held (`clients/PROTOCOL.md`, "Signals
/// before the loss"): `kind` is the event (`expiring`, `renewed`, `degraded`, `recovered`,
/// `contended`, `revocation_requested`; later servers may add others). A revocation is told
/// once, by the watch or first by a heartbeat's answer (then as the watch would tell it).
#[derive(Debug, Clone)]
pub struct Signal {
    pub kind: String,
    pub body: WatchSignal,
}

/// What the last grant or renewal of a kept lease said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The TTL the server answered; the next renewal is due a third of it after this one
    /// was sent.
    pub ttl: Duration,
    /// When the lease runs out unless renewed, by the server's clock (RFC 3339).
    pub expires_at: String,
    /// Redis replicas that acknowledged it (a multilease's: its weakest member's); `None`
    /// when the server requires none (`--min-replica-acks`).
    pub replicas_acked: Option<u32>,
    /// Set when it stands on its Redis primary alone (see [`Degraded`]).
    pub degraded: Option<Degraded>,
    /// RedLock leases: the nodes that granted or extended it.
    pub nodes_acked: Option<u32>,
    /// RedLock leases: how long it could be relied on from the answer on.
    pub validity: Option<Duration>,
    /// Renewals that succeeded since the grant.
    pub renewals: u64,
}

impl Renewal {
    pub(crate) fn of_grant(grant: &GrantBody) -> Self {
        Self {
            ttl: Duration::from_millis(grant.ttl_ms),
            expires_at: grant.expires_at.clone(),
            replicas_acked: grant.replicas_acked,
            degraded: grant.degraded,
            nodes_acked: grant.nodes_acked,
            validity: grant.validity_ms.map(Duration::from_millis),
            renewals: 0,
        }
    }
}

/// A kept lease's loss, for the work under it: clone it into every task that must stop with
/// the lock.
#[derive(Debug, Clone)]
pub struct LossSignal(pub(crate) watch::Receiver<Option<LeaseLost>>);

impl LossSignal {
    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// Why it was lost, once it was.
    pub fn lost_error(&self) -> Option<LeaseLost> {
        self.0.borrow().clone()
    }

    /// Resolves when the lease is lost (at once if it already was); never after a release
    /// of a lease that held until then. For `tokio::select!` beside the work.
    pub async fn lost(&mut self) -> LeaseLost {
        if let Ok(lost) = self.0.wait_for(Option::is_some).await
            && let Some(lost) = lost.clone()
        {
            return lost;
        }
        std::future::pending().await
    }
}

/// What the keeper's loops and the lease share.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) lost: watch::Sender<Option<LeaseLost>>,
    /// Each signal the watch told, to any number of listeners (the oldest dropped for one
    /// that falls behind).
    pub(crate) signals: tokio::sync::broadcast::Sender<Signal>,
    /// An operator's revocation, once told (by the watch, or a heartbeat's answer), and the
    /// lock it is for: of a multilease's members' revocations, the one with the earliest
    /// deadline (of equal ones, the first told), which ends the lease.
    pub(crate) revocation: watch::Sender<Option<(String, RevocationBody)>>,
    /// Each revocation passed on (its lock and deadline): the watch (reopened) and every
    /// heartbeat's answer until the deadline tell it again.
    revocations_told: Mutex<Vec<(String, String)>>,
    /// A multilease's members, each with its revocation once one was told.
    pub(crate) members: Mutex<Vec<MultiMemberBody>>,
}

/// How many signals a listener may fall behind before the oldest are dropped for it.
pub(crate) const SIGNALS_KEPT: usize = 32;

impl Shared {
    pub(crate) fn new(state: State) -> Self {
        Self {
            state: Mutex::new(state),
            lost: watch::Sender::new(None),
            signals: tokio::sync::broadcast::Sender::new(SIGNALS_KEPT),
            revocation: watch::Sender::new(None),
            revocations_told: Mutex::new(Vec::new()),
            members: Mutex::new(Vec::new()),
        }
    }

    /// With a multilease's members (as granted).
    pub(crate) fn with_members(self, members: Vec<MultiMemberBody>) -> Self {
        *self.members.lock().unwrap_or_else(PoisonError::into_inner) = members;
        self
    }

    /// A signal the watch told: passed on (a revocation once), and a revocation kept.
    pub(crate) fn told(&self, kind: String, body: WatchSignal) {
        if let Some(revocation) = &body.revocation
            && !self.revoked(&body.lock, revocation)
        {
            return;
        }
        let _ = self.signals.send(Signal { kind, body });
    }

    /// Keeps the revocation with the earliest deadline (a multilease's members may each have
    /// one; a revocation is never put off), shows it on its member; false when this one (for
    /// `lock`, by its deadline) was told before.
    fn revoked(&self, lock: &str, revocation: &RevocationBody) -> bool {
        self.revocation.send_if_modified(|current| {
            let earlier = current
                .as_ref()
                .is_none_or(|(_, kept)| ends_before(revocation, kept));
            if earlier {
                *current = Some((lock.to_owned(), revocation.clone()));
            }
            earlier
        });
        for member in self
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter_mut()
            .filter(|m| m.lock == lock && m.revocation.is_none())
        {
            member.revocation = Some(revocation.clone());
        }
        let told = (lock.to_owned(), revocation.deadline.clone());
        let mut revocations = self
            .revocations_told
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if revocations.contains(&told) {
            return false;
        }
        revocations.push(told);
        true
    }
}

/// Whether `a`'s deadline is earlier than `b`'s (both RFC 3339 by the server's clock).
pub(crate) fn ends_before(a: &RevocationBody, b: &RevocationBody) -> bool {
    match (
        humantime::parse_rfc3339(&a.deadline),
        humantime::parse_rfc3339(&b.deadline),
    ) {
        (Ok(a), Ok(b)) => a < b,
        _ => a.deadline < b.deadline,
    }
}

pub(crate) struct State {
    pub(crate) renewal: Renewal,
    /// When the last grant or renewal that succeeded was sent: the lease holds until at
    /// least this plus its TTL.
    pub(crate) renewed_at: Instant,
    /// Our release is under way: its `released` is no loss.
    pub(crate) releasing: bool,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The TTL, and when the last renewal that succeeded was sent.
    pub(crate) fn schedule(&self) -> (Duration, Instant) {
        let state = self.state();
        (state.renewal.ttl, state.renewed_at)
    }

    /// A renewal that succeeded; `members`: a multilease's, as the answer gave them (each
    /// revoked one's revocation on it; `body.revocation` is then the earliest of them).
    pub(crate) fn renewed(&self, sent: Instant, body: &RenewalBody, members: &[MultiMemberBody]) {
        let told: Vec<(&str, &RevocationBody)> = if members.is_empty() {
            body.revocation
                .iter()
                .map(|r| (body.lock.as_str(), r))
                .collect()
        } else {
            members
                .iter()
                .filter_map(|m| Some((m.lock.as_str(), m.revocation.as_ref()?)))
                .collect()
        };
        for (lock, revocation) in told {
            // Told as the watch tells it (a multilease's naming the member), for a lease kept
            // without one; once, whichever told it first.
            let signal = WatchSignal {
                lease_id: body.lease_id,
                lock: lock.to_owned(),
                remaining_ms: None,
                valid_until: None,
                since: None,
                waiters: None,
                revocation: Some(revocation.clone()),
            };
            self.told("revocation_requested".to_owned(), signal);
        }
        let mut state = self.state();
        state.renewed_at = state.renewed_at.max(sent);
        let renewals = state.renewal.renewals + 1;
        // While a revocation stands the answer's TTL only counts down to its deadline: the
        // lease's own TTL still sets the heartbeats' pace (the revocation its end).
        let ttl = if body.revocation.is_some() {
            state.renewal.ttl
        } else {
            Duration::from_millis(body.ttl_ms)
        };
        state.renewal = Renewal {
            ttl,
            expires_at: body.expires_at.clone(),
            replicas_acked: body.replicas_acked,
            degraded: body.degraded,
            nodes_acked: body.nodes_acked,
            validity: body.validity_ms.map(Duration::from_millis),
            renewals,
        };
    }

    /// Records the loss (the first one counts), unless it is our own release's.
    pub(crate) fn lose(&self, lost: LeaseLost) {
        if self.state().releasing && lost.reason == "released" {
            return;
        }
        self.lost.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(lost);
            }
            first
        });
    }

    pub(crate) fn lost(&self) -> Option<LeaseLost> {
        self.lost.borrow().clone()
    }
}
