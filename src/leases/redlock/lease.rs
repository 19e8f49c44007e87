//! A RedLock lease once granted: heartbeat (a majority must extend it), release (on every
//! node that answers), and its state as the nodes that know it see it.

use tokio::time::Instant;

use super::vote::{Vote, ask_all, granted, same_error};
use super::{QuorumAck, RedRenewal, Redlock, quorum};
use crate::leases::LeaseError;
use crate::locks::{
    FencingToken, LeaseId, LeaseKind, LeaseState, LeaseToken, LeaseView, LockError, LockName,
    Release, Renewal, Resource, Ttl,
};

impl Redlock {
    /// Extends the lease on every node; a majority must within the validity.
    pub async fn renew(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<RedRenewal, LeaseError> {
        let ttl_ms = ttl.map_or(u64::MAX, Ttl::as_millis);
        let per_node = quorum::node_timeout(ttl_ms, self.redis_timeout);
        let started = Instant::now();
        let votes: Vec<Vote<Renewal>> = ask_all(&self.nodes, per_node, |n| {
            n.locks.renew(Resource::Lock, name, id, token, ttl)
        })
        .await;
        let elapsed = started.elapsed();
        let renewed = granted(&votes);
        let acked = renewed.len();
        let validity = renewed
            .iter()
            .map(|r| r.ttl_ms)
            .min()
            .and_then(|ttl_ms| quorum::validity(ttl_ms, elapsed));
        if acked >= self.quorum()
            && let Some(validity) = validity
            && let Some(best) = renewed.iter().max_by_key(|r| r.fencing_token.0)
        {
            let mut renewal = (*best).clone();
            renewal.replicas_acked = None;
            renewal.degraded = None;
            // A revocation any extending node recorded is told (the earliest deadline), as
            // the watch tells it: the node with the largest counter may not have it.
            renewal.revocation = renewed
                .iter()
                .filter_map(|r| r.revocation.clone())
                .min_by_key(|r| r.deadline);
            return Ok(RedRenewal {
                renewal,
                ack: QuorumAck {
                    nodes_acked: u32::try_from(acked).unwrap_or(u32::MAX),
                    validity,
                },
            });
        }
        let gone: Vec<&LockError> = votes
            .iter()
            .filter_map(Vote::refusal)
            .filter(|e| matches!(e, LockError::LeaseLost(_) | LockError::UnknownLease))
            .collect();
        if gone.len() >= self.quorum() {
            // A majority lost it: it is lost; what the others still hold goes too.
            let _ = self.release(name, id, token, true).await;
            let lost = gone
                .iter()
                .find_map(|e| match e {
                    LockError::LeaseLost(state) => Some(LockError::LeaseLost(*state)),
                    _ => None,
                })
                .unwrap_or(LockError::LeaseLost(LeaseState::Expired));
            return Err(lost.into());
        }
        if let Some(e) = votes.iter().find_map(Vote::refusal)
            && acked == 0
            && votes.iter().all(|v| matches!(v, Vote::No(_)))
        {
            return Err(same_error(e).into());
        }
        Err(self.no_quorum(acked))
    }

    /// Releases the lease (one level, or `all`) on every node that answers.
    pub async fn release(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
    ) -> Result<Release, LeaseError> {
        let votes: Vec<Vote<Release>> = ask_all(&self.nodes, self.redis_timeout, |n| {
            n.locks
                .release(Resource::Lock, name, id, token, all, None, None)
        })
        .await;
        if let Some(r) = granted(&votes).into_iter().max_by_key(|r| r.reentry_count) {
            return Ok(r.clone());
        }
        let failed = votes.iter().filter(|v| matches!(v, Vote::Failed)).count();
        if failed > 0 && failed >= self.quorum() {
            return Err(self.no_quorum(0));
        }
        let lost = votes.iter().find_map(|v| match v {
            Vote::No(LockError::LeaseLost(state)) => Some(*state),
            _ => None,
        });
        Err(match lost {
            Some(state) => LockError::LeaseLost(state),
            None => LockError::UnknownLease,
        }
        .into())
    }

    /// The lease as the nodes that know it see it (kind `Redlock`): held where it holds (the
    /// latest expiry and the largest fencing token of those), else as it ended; and on how
    /// many nodes it holds.
    pub async fn lease(&self, name: &LockName, id: LeaseId) -> Result<(LeaseView, u32), LockError> {
        let views = ask_all(&self.nodes, self.read_timeout(), |n| {
            n.locks.lease(Resource::Lock, name, id)
        })
        .await;
        let held: Vec<&LeaseView> = granted(&views)
            .into_iter()
            .filter(|v| v.state == LeaseState::Held)
            .collect();
        let holding = u32::try_from(held.len()).unwrap_or(u32::MAX);
        let found = if let Some(latest) = held.iter().max_by_key(|v| v.expires_at) {
            let mut view = (*latest).clone();
            view.fencing_token = FencingToken(
                held.iter()
                    .map(|v| v.fencing_token.0)
                    .max()
                    .unwrap_or_default(),
            );
            Some(view)
        } else {
            granted(&views).first().map(|v| (*v).clone())
        };
        if let Some(mut view) = found {
            view.kind = LeaseKind::Redlock;
            return Ok((view, holding));
        }
        // Unknown to a majority: no such lease. Else the nodes that did not answer may hold
        // it, and nobody can tell.
        let failed = views.iter().any(|v| matches!(v, Vote::Failed));
        let unknown = views.iter().filter_map(Vote::refusal).count();
        if failed && unknown < self.quorum() {
            Err(LockError::Busy)
        } else {
            Err(LockError::UnknownLease)
        }
    }
}
