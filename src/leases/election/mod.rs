//! Leader election: one leader per election name, and a line of candidates behind it.
//!
//! An election runs on a fair lock of its own on the main Redis: its lock name is the
//! election's name under [`ElectionName::LOCK_PREFIX`] (`election/<name>`), which no lock a
//! client names can be (lock names refuse `/`). A candidate is that lock's ticket, then its
//! lease: the line is the fair queue (FIFO, a place kept by heartbeats), the leader is the
//! lease, its **term** is the lease's fencing token (so it only grows per name, across
//! crashes, restarts without persistence and failovers, as every fencing token does), and its
//! **value** travels in the lease's metadata. A candidate's id is of the election family
//! ([`Placement::Election`]), so wherever an id alone decides, it is known for one.
//!
//! Everything a lease has, a candidate has: heartbeats and a TTL, lock-delay, an admin's
//! force release (which ends the term: the next candidate leads with a higher one), its
//! history and events (under the election's lock name).

pub mod listing;
pub mod observe;

use std::time::Duration;

use super::{LeaseError, Leases, Placement};
use crate::locks::{
    AcquireRequest, Acquired, FencingToken, ForcedRelease, HolderLabel, IdempotencyKey, LeaseId,
    LeaseKind, LeaseState, LeaseToken, LockDelay, LockError, LockName, LockView, Metadata,
    Resource, Timestamp, Ttl,
};

/// An election's name: the syntax of a lock's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ElectionName(LockName);

impl ElectionName {
    /// What an election's lock name starts with.
    pub const LOCK_PREFIX: &'static str = "election/";

    pub fn new(name: LockName) -> Self {
        Self(name)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The name as written (what keys' name patterns are checked against).
    pub fn name(&self) -> &LockName {
        &self.0
    }

    /// The fair lock the election runs on.
    pub fn lock(&self) -> LockName {
        LockName::internal(format!("{}{}", Self::LOCK_PREFIX, self.0))
    }

    /// The election whose lock `lock` is, if it is one's.
    pub fn of_lock(lock: &str) -> Option<&str> {
        lock.strip_prefix(Self::LOCK_PREFIX)
    }
}

impl std::fmt::Display for ElectionName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a candidate stands with.
#[derive(Debug, Clone)]
pub struct Candidacy {
    /// Shown to observers while it leads (text, at most [`Candidacy::VALUE_MAX`] bytes).
    pub value: String,
    pub ttl: Ttl,
    pub holder: Option<HolderLabel>,
    /// Once its term ends without a resignation (it expired, or was ended), nobody leads
    /// until this has passed.
    pub lock_delay: Option<LockDelay>,
    /// A retried campaign with the same key stands the same candidate (its first answer),
    /// not a second one.
    pub idempotency: Option<IdempotencyKey>,
}

impl Candidacy {
    pub const VALUE_MAX: usize = 4096;
}

/// The leader, as anyone may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub candidate_id: Option<LeaseId>,
    pub term: u64,
    pub value: Option<String>,
    pub holder: Option<String>,
    pub since: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
}

/// A candidate's standing: it leads (its term), or waits in line.
#[derive(Debug, Clone)]
pub enum Standing {
    Leads {
        candidate_id: LeaseId,
        /// Only in the answer that made the candidate.
        token: Option<LeaseToken>,
        term: u64,
        ttl_ms: u64,
        expires_at: Timestamp,
        /// This answer repeats one given before (a poll of a candidate that leads already).
        again: bool,
    },
    InLine {
        candidate_id: LeaseId,
        token: Option<LeaseToken>,
        /// 1 = next.
        position: u64,
        /// Its place is lost unless it heartbeats (or polls) before this.
        keep_by: Timestamp,
    },
}

/// An election as anyone may see it.
#[derive(Debug, Clone)]
pub struct ElectionView {
    pub leader: Option<Leader>,
    /// The last term handed out (the leader's, while one leads); 0 before the first.
    pub term: u64,
    /// The first candidates in line, in order.
    pub candidates: Vec<InLine>,
    pub candidates_waiting: u64,
}

/// A candidate in line.
#[derive(Debug, Clone)]
pub struct InLine {
    pub position: u64,
    pub candidate_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub since: Option<Timestamp>,
}

fn standing(acquired: Acquired) -> Standing {
    match acquired {
        Acquired::Granted(grant) => Standing::Leads {
            candidate_id: grant.lease_id,
            token: grant.token,
            term: grant.fencing_token.0,
            ttl_ms: grant.ttl_ms,
            expires_at: grant.expires_at,
            again: grant.replayed,
        },
        Acquired::Queued(ticket) => Standing::InLine {
            candidate_id: ticket.lease_id,
            token: ticket.token,
            position: ticket.position,
            keep_by: ticket.poll_by,
        },
    }
}

/// The value a leader's lease carries in its metadata.
fn value_of(metadata: Option<&Metadata>) -> Option<String> {
    metadata
        .and_then(|m| m.get(Metadata::ELECTION_VALUE_KEY))
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// An election's view from its lock's.
pub fn election_view(view: Option<LockView>) -> ElectionView {
    let Some(view) = view else {
        return ElectionView {
            leader: None,
            term: 0,
            candidates: Vec::new(),
            candidates_waiting: 0,
        };
    };
    let leader = view.holders.first().map(|h| Leader {
        candidate_id: h.lease_id,
        term: h.fencing_token.map_or(0, |f| f.0),
        value: value_of(h.metadata.as_ref()),
        holder: h.holder.clone(),
        since: h.acquired_at,
        expires_at: view.expires_at,
    });
    ElectionView {
        leader,
        term: view.fencing_counter.0,
        candidates: view
            .queue
            .iter()
            .map(|q| InLine {
                position: q.position,
                candidate_id: q.lease_id,
                holder: q.holder.clone(),
                since: q.queued_at,
            })
            .collect(),
        candidates_waiting: view.queue_length,
    }
}

impl Leases {
    /// Stands a new candidate in election `name`: it leads at once if nobody does and nobody
    /// is ahead in line, or within `wait`; otherwise it keeps its place in line.
    pub fn campaign(
        &self,
        name: &ElectionName,
        candidacy: Candidacy,
        wait: Duration,
    ) -> impl Future<Output = Result<Standing, LeaseError>> + Send + use<> {
        let token = LeaseToken::generate();
        let id = Placement::Election.lease_id(&token);
        let request = AcquireRequest {
            ttl: Some(candidacy.ttl),
            holder: candidacy.holder,
            metadata: Some(Metadata::election_value(&candidacy.value)),
            kind: Some(LeaseKind::Fair),
            lock_delay: candidacy.lock_delay,
            idempotency: candidacy.idempotency,
            ..AcquireRequest::default()
        };
        let campaign = self
            .locks
            .acquire_as(&name.lock(), request, token, id, candidacy.ttl, wait);
        async move { Ok(standing(campaign.await?)) }
    }

    /// A candidate asks again, waiting up to `wait` for its turn: it leads (also when it did
    /// already: the same term again), or is still in line (its place kept).
    pub async fn poll_candidate(
        &self,
        name: &ElectionName,
        id: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> Result<Standing, LeaseError> {
        let polled = self
            .locks
            .poll_ticket(&name.lock(), id, token, wait)
            .await?;
        Ok(standing(polled))
    }

    /// Keeps a leader's term (its TTL starts again) or a waiting candidate's place.
    ///
    /// `held`: the term the caller leads in, when it believes it leads. A candidate found in
    /// line then lost that term (Redis lost its grant and put it back in line: a crash, a
    /// failover): it leaves the line and is told it is out, rather than led into a new term
    /// it would take for the old one.
    pub async fn heartbeat_candidate(
        &self,
        name: &ElectionName,
        id: LeaseId,
        token: LeaseToken,
        held: Option<u64>,
    ) -> Result<Standing, LeaseError> {
        let lock = name.lock();
        match self
            .locks
            .renew(Resource::Lock, &lock, id, &token, None)
            .await
        {
            // Another term than the caller's (it cannot know it leads in this one): it is
            // let go, and the caller told its own term is over.
            Ok(renewal) if held.is_some_and(|t| t != renewal.fencing_token.0) => {
                self.locks
                    .release(Resource::Lock, &lock, id, &token, true, None, None)
                    .await?;
                Err(LockError::LeaseLost(LeaseState::Expired).into())
            }
            Err(LockError::TicketPending) if held.is_some() => {
                self.locks.leave(&lock, id, &token).await?;
                Err(LockError::LeaseLost(LeaseState::Expired).into())
            }
            Ok(renewal) => Ok(Standing::Leads {
                candidate_id: id,
                token: None,
                term: renewal.fencing_token.0,
                ttl_ms: renewal.ttl_ms,
                expires_at: renewal.expires_at,
                again: true,
            }),
            // Still in line: a poll keeps its place (and may find its turn come).
            Err(LockError::TicketPending) => {
                self.poll_candidate(name, id, token, Duration::ZERO).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A leader resigns (the next candidate leads at once) or a candidate leaves the line.
    pub async fn resign(
        &self,
        name: &ElectionName,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), LeaseError> {
        let lock = name.lock();
        let released = self
            .locks
            .release(Resource::Lock, &lock, id, token, true, None, None)
            .await;
        match released {
            Ok(_) => Ok(()),
            Err(LockError::TicketPending) => Ok(self.locks.leave(&lock, id, token).await?),
            Err(e) => Err(e.into()),
        }
    }

    /// The leader publishes a new value in its term: its term and until when it holds.
    /// Refused (409 `ticket_pending`) to a candidate still in line; 410 once its term ended.
    pub async fn proclaim(
        &self,
        name: &ElectionName,
        id: LeaseId,
        token: &LeaseToken,
        value: &str,
    ) -> Result<crate::locks::ops::proclaim::Proclaimed, LeaseError> {
        let metadata = Metadata::election_value(value);
        Ok(self
            .locks
            .proclaim(&name.lock(), id, token, &metadata)
            .await?)
    }

    /// Election `name`'s terms after log entry `after` (its last term only, without).
    pub async fn terms(
        &self,
        name: &ElectionName,
        after: Option<&str>,
    ) -> Result<crate::locks::feed::terms::Terms, LeaseError> {
        let count = crate::locks::feed::terms::TERMS_READ_MAX;
        Ok(self.locks.terms_after(&name.lock(), after, count).await?)
    }

    /// Election `name` now.
    pub async fn election(&self, name: &ElectionName) -> Result<ElectionView, LeaseError> {
        Ok(election_view(self.locks.lock(&name.lock()).await?))
    }

    /// Whether `term` is the current leader's.
    pub async fn is_current_term(
        &self,
        name: &ElectionName,
        term: u64,
    ) -> Result<(bool, u64), LeaseError> {
        let view = self.locks.lock(&name.lock()).await?;
        let current = view.as_ref().is_some_and(|v| {
            v.holders
                .iter()
                .any(|h| h.fencing_token == Some(FencingToken(term)))
        });
        Ok((current, view.map_or(0, |v| v.fencing_counter.0)))
    }

    /// Ends the current term (an admin's action): the next candidate leads with a higher
    /// term, after the leader's lock-delay if it asked for one.
    pub async fn end_term(
        &self,
        name: &ElectionName,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LeaseError> {
        Ok(self
            .locks
            .force_release(Resource::Lock, &name.lock(), by, reason, false)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elections_lock_is_no_lock_a_client_can_name() {
        let name = ElectionName::new(LockName::parse("scheduler").expect("a name"));
        let lock = name.lock();
        assert_eq!(lock.as_str(), "election/scheduler");
        assert!(LockName::parse(lock.as_str()).is_err());
        assert_eq!(ElectionName::of_lock(lock.as_str()), Some("scheduler"));
        assert_eq!(ElectionName::of_lock("scheduler"), None);
    }
}
