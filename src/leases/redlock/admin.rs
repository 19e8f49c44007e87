//! Operators' actions on RedLock leases: force release of a name and eviction of one lease,
//! on every node. Done once a majority of the nodes did it (the lease can then no longer
//! hold a majority); what a node that did not answer still holds runs out with its TTL.

use std::collections::HashSet;

use super::Redlock;
use super::vote::{Vote, ask_all, granted, same_error};
use crate::leases::LeaseError;
use crate::locks::{ForcedRelease, HolderView, LeaseId, LockError, LockName, Resource, Revoked};

/// What an action on every node did.
#[derive(Debug)]
pub struct NodesActed {
    /// The holders removed on any node (each once).
    pub forced: ForcedRelease,
    /// The nodes that did it.
    pub nodes_acked: u32,
}

impl Redlock {
    /// Removes every holder of `name` on every node that answers, recorded there as done
    /// `by` for `reason`.
    pub async fn force_release(
        &self,
        name: &LockName,
        by: &str,
        reason: &str,
    ) -> Result<NodesActed, LeaseError> {
        let votes = ask_all(&self.nodes, self.redis_timeout, |n| {
            n.locks
                .force_release(Resource::Lock, name, by, reason, false)
        })
        .await;
        self.acted(name, &votes)
    }

    /// Removes lease `id` of `name` on every node that answers.
    pub async fn evict(
        &self,
        name: &LockName,
        id: LeaseId,
        by: &str,
        reason: &str,
    ) -> Result<NodesActed, LeaseError> {
        let votes = ask_all(&self.nodes, self.redis_timeout, |n| {
            n.locks.evict(Resource::Lock, name, id, by, reason)
        })
        .await;
        match self.acted(name, &votes) {
            // Unknown to every node that answered a majority: no such lease.
            Ok(acted) if acted.nodes_acked == 0 => Err(LockError::UnknownLease.into()),
            answer => answer,
        }
    }

    /// Asks the holder of RedLock lease `id` of `name` to let go within `grace_ms`, on every
    /// node: done once a majority recorded it (their heartbeats then stop at the deadline).
    pub async fn revoke(
        &self,
        name: &LockName,
        id: LeaseId,
        grace_ms: u64,
        by: &str,
        reason: &str,
    ) -> Result<Revoked, LeaseError> {
        let votes = ask_all(&self.nodes, self.redis_timeout, |n| {
            n.locks
                .revoke(Resource::Lock, name, id, grace_ms, by, reason)
        })
        .await;
        let done = granted(&votes);
        if done.len() >= self.quorum() {
            // The earliest deadline a node set (their clocks differ a little).
            let first = done.iter().min_by_key(|r| r.revocation.deadline);
            return first
                .map(|r| (*r).clone())
                .ok_or(LockError::UnknownLease.into());
        }
        if let Some(e) = votes.iter().find_map(Vote::refusal)
            && !matches!(e, LockError::UnknownLease | LockError::LeaseLost(_))
        {
            return Err(same_error(e).into());
        }
        if done.is_empty() {
            return Err(LockError::UnknownLease.into());
        }
        Err(self.no_quorum(done.len()))
    }

    /// The nodes' answers as one: the holders removed anywhere, once a majority answered.
    fn acted(
        &self,
        name: &LockName,
        votes: &[Vote<ForcedRelease>],
    ) -> Result<NodesActed, LeaseError> {
        let done = granted(votes);
        let unknown = votes
            .iter()
            .filter_map(Vote::refusal)
            .filter(|e| matches!(e, LockError::UnknownLease | LockError::LeaseLost(_)))
            .count();
        if done.len() + unknown < self.quorum() {
            if let Some(e) = votes.iter().find_map(Vote::refusal)
                && !matches!(e, LockError::UnknownLease | LockError::LeaseLost(_))
            {
                return Err(same_error(e).into());
            }
            return Err(self.no_quorum(done.len()));
        }
        let mut seen = HashSet::new();
        let removed: Vec<HolderView> = done
            .iter()
            .flat_map(|f| f.removed.iter())
            .filter(|h| seen.insert(h.holder_id.clone()))
            .map(|h| HolderView {
                kind: Some(crate::locks::LeaseKind::Redlock),
                ..h.clone()
            })
            .collect();
        Ok(NodesActed {
            forced: ForcedRelease {
                lock: name.clone(),
                removed,
                delay_lifted: false,
            },
            nodes_acked: u32::try_from(done.len()).unwrap_or(u32::MAX),
        })
    }
}
