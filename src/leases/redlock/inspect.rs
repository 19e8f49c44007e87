//! A name as the RedLock nodes hold it: per node (the dashboard's rows), and as one lock (the
//! holders a majority of nodes show).

use std::collections::HashMap;

use futures_util::future::join_all;

use super::Redlock;
use super::vote::{Vote, ask_all, granted};
use crate::locks::{FencingToken, HeldAs, HolderView, LeaseId, LockError, LockName, LockView};

/// What one node says of a lock (the dashboard's per-node view).
#[derive(Debug)]
pub struct NodeState {
    pub url: std::sync::Arc<str>,
    /// `Ok(None)`: free and unknown there; `Err`: the node did not answer.
    pub view: Result<Option<LockView>, String>,
}

impl Redlock {
    /// What each node says of `name` (the dashboard's per-node view).
    pub async fn lock_states(&self, name: &LockName) -> Vec<NodeState> {
        join_all(self.nodes.iter().map(|n| async move {
            let view = match tokio::time::timeout(self.redis_timeout, n.locks.lock(name)).await {
                Ok(Ok(view)) => Ok(view),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer in time".to_owned()),
            };
            NodeState {
                url: n.url.clone(),
                view,
            }
        }))
        .await
    }

    /// `name` as RedLock holds it: the leases a majority of the nodes show holding it (each as
    /// the node with its largest fencing token shows it), or `None` when no lease holds a
    /// majority; `Busy` when too few nodes answered to tell.
    pub async fn lock(&self, name: &LockName) -> Result<Option<LockView>, LockError> {
        let votes = ask_all(&self.nodes, self.read_timeout(), |n| n.locks.lock(name)).await;
        let answered = votes.iter().filter(|v| !matches!(v, Vote::Failed)).count();
        let views: Vec<&LockView> = granted(&votes).into_iter().flatten().collect();
        let holders = self.majority_holders(&views);
        if holders.is_empty() {
            return if answered >= self.quorum() {
                Ok(None)
            } else {
                Err(LockError::Busy)
            };
        }
        // Held until fewer than a majority would hold it: the quorum-th latest expiry.
        let mut expiries: Vec<_> = views.iter().filter_map(|v| v.expires_at).collect();
        expiries.sort_unstable_by(|a, b| b.cmp(a));
        let expires_at = expiries.get(self.quorum() - 1).copied();
        let remaining_ms = views
            .iter()
            .filter(|v| v.expires_at == expires_at)
            .find_map(|v| v.remaining_ms);
        Ok(Some(LockView {
            lock: name.clone(),
            kind: Some(HeldAs::Redlock),
            mode: None,
            holders,
            queue: Vec::new(),
            queue_length: 0,
            fencing_counter: FencingToken(
                views
                    .iter()
                    .map(|v| v.fencing_counter.0)
                    .max()
                    .unwrap_or_default(),
            ),
            remaining_ms,
            expires_at,
            lock_delay_ms: None,
            delayed_until: None,
        }))
    }

    /// The holders (by lease) a majority of `views` show, each with its largest fencing token.
    fn majority_holders(&self, views: &[&LockView]) -> Vec<HolderView> {
        let mut seen: HashMap<LeaseId, (usize, &HolderView)> = HashMap::new();
        for holder in views.iter().flat_map(|v| &v.holders) {
            let Some(id) = holder.lease_id else { continue };
            let entry = seen.entry(id).or_insert((0, holder));
            entry.0 += 1;
            if holder.fencing_token > entry.1.fencing_token {
                entry.1 = holder;
            }
        }
        let mut holders: Vec<HolderView> = seen
            .into_values()
            .filter(|(count, _)| *count >= self.quorum())
            .map(|(_, holder)| HolderView {
                kind: Some(crate::locks::LeaseKind::Redlock),
                ..holder.clone()
            })
            .collect();
        holders.sort_by_key(|h| h.acquired_at);
        holders
    }
}
