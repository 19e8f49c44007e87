//! What the main Redis is told of RedLock leases, which live on the RedLock nodes: the index
//! of which names hold one and when each runs out (`lua/redlock.lua`, for listing, a name's
//! inspection and the expiry sweeper), and their events, on the key space's events channel
//! and journal like every lease's (`/v1/events`, its backlog, the dashboard). Each node
//! records the lease in its own history too, as it records any lease.
//!
//! The index is best effort beside the grant: the nodes' majority is what holds the lease, so
//! a grant the main Redis could not index still stands (it is then neither listed nor swept;
//! its holder is not told, and the log says so).

use crate::locks::{
    EventKind, Grant, LeaseId, LeaseState, LockEvent, LockName, Locks, Release, Renewal,
};

use super::QuorumAck;

/// The main Redis's side of the RedLock leases of one key space.
pub struct Ledger<'a> {
    pub main: &'a Locks,
}

impl Ledger<'_> {
    /// A grant: indexed (a new lease) and told.
    pub async fn granted(&self, name: &LockName, grant: &Grant, ack: QuorumAck) {
        if grant.new_lease {
            let indexed = self
                .main
                .records()
                // (Due by the main Redis's clock: TTL from now, a little after the nodes'.)
                .index_redlock(name, grant.lease_id, 0, grant.ttl_ms)
                .await;
            if let Err(e) = indexed {
                tracing::warn!(lock = %name, lease = %grant.lease_id, error = %e, "a RedLock lease was granted but not indexed on the main Redis: it is neither listed nor swept");
            }
        }
        let kind = if grant.new_lease {
            EventKind::Acquired
        } else {
            EventKind::Reentered
        };
        self.main.records().publish_event(
            &LockEvent::new(kind, name, self.now_ms())
                .lease(grant.lease_id, grant.holder.as_deref())
                .with("kind", "redlock")
                .with("reentry_count", grant.reentry_count)
                .with("fencing_token", grant.fencing_token.0)
                .with("ttl_ms", grant.ttl_ms)
                .with("nodes_acked", ack.nodes_acked),
        );
    }

    /// A heartbeat: told.
    pub fn renewed(&self, name: &LockName, renewal: &Renewal, ack: QuorumAck) {
        self.main.records().publish_event(
            &LockEvent::new(EventKind::Renewed, name, self.now_ms())
                .lease(renewal.lease_id, renewal.holder.as_deref())
                .with("kind", "redlock")
                .with("reentry_count", renewal.reentry_count)
                .with("ttl_ms", renewal.ttl_ms)
                .with("nodes_acked", ack.nodes_acked),
        );
    }

    /// A release by its holder: told; its last level takes it out of the index.
    pub async fn released(&self, name: &LockName, release: &Release) {
        if release.released {
            let _ = self
                .main
                .records()
                .unindex_redlock(name, release.lease_id)
                .await;
        }
        self.main.records().publish_event(
            &LockEvent::new(EventKind::Released, name, self.now_ms())
                .lease(release.lease_id, None)
                .with("kind", "redlock")
                .with("reentry_count", release.reentry_count)
                .with("reason", "released"),
        );
    }

    /// A lease that ended without its holder's release (`state`: expired, force released):
    /// taken out of the index, and told once, by whichever call took it out; `by`: the
    /// operator, for a force release. `true` when this call told it.
    pub async fn ended(
        &self,
        name: &LockName,
        id: LeaseId,
        state: LeaseState,
        at_ms: u64,
        by: Option<(&str, &str)>,
    ) -> bool {
        match self.main.records().unindex_redlock(name, id).await {
            Ok(true) => {}
            Ok(false) if by.is_some() => {}
            Ok(false) => return false,
            Err(e) => {
                tracing::debug!(lock = %name, lease = %id, error = %e, "could not take a RedLock lease out of the index");
                if by.is_none() {
                    return false;
                }
            }
        }
        let kind = match state {
            LeaseState::ForceReleased => EventKind::ForceReleased,
            _ => EventKind::Expired,
        };
        let mut event = LockEvent::new(kind, name, at_ms)
            .lease(id, None)
            .with("kind", "redlock");
        if let Some((operator, reason)) = by {
            event = event.with("by", operator).with("reason", reason);
        }
        self.main.records().publish_event(&event);
        true
    }

    fn now_ms(&self) -> u64 {
        crate::locks::wall_ms()
    }
}
