//! RedLock expiries recorded when they happen. A RedLock lease that runs out changes nothing
//! on the main Redis, and each node notices only its own copy; this task, on every instance,
//! reads the main Redis's due list (`lua/redlock.lua`: the indexed leases whose TTL has
//! passed) every [`SWEEP_EVERY`] and asks the nodes about each:
//! - still held by a majority (heartbeats extend the nodes, not the index): due again when
//!   the nodes say it runs out;
//! - held by fewer than a majority, unknown to a majority, or ended as expired: it expired.
//!   It is taken out of the index and its `expired` event told, once (the index's removal is
//!   atomic: whichever instance takes it out tells it), and each node sweeps the name, so its
//!   own history records its copy's expiry;
//! - released or force released: that call told it; only the index entry goes;
//! - the nodes do not answer: asked again a little later.
//!
//! The task stops on shutdown.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::task::JoinHandle;

use super::Redlock;
use super::ledger::Ledger;
use crate::locks::ops::records::DueRedlock;
use crate::locks::{LeaseState, LockError, Locks};

/// How often the due list is read.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long a lease the nodes could not tell about waits before it is asked again.
const ASK_AGAIN: Duration = Duration::from_secs(5);

impl Redlock {
    /// Starts the sweeper on the deployment's main handle (every key space's leases are in
    /// its due list), until shutdown.
    pub fn spawn_sweeper(&self, main: Locks) -> JoinHandle<()> {
        let redlock = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => redlock.sweep(&main).await,
                    () = redlock.shutdown.cancelled() => return,
                }
            }
        })
    }

    /// One read of the due list and what the nodes say of each lease on it.
    async fn sweep(&self, main: &Locks) {
        let due = match main.records().due_redlocks().await {
            Ok((due, _)) => due,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the RedLock leases due");
                return;
            }
        };
        join_all(due.into_iter().map(|lease| self.settle(lease))).await;
    }

    /// What became of one due lease (see the module docs).
    async fn settle(&self, due: DueRedlock) {
        let space = due.locks.records().key_space();
        let nodes = self.map_locks(|l| l.in_space(space.clone()));
        let ledger = Ledger { main: &due.locks };
        let ask_again = |ms: u64| due.locks.records().index_redlock(&due.name, due.id, 0, ms);
        match nodes.lease(&due.name, due.id).await {
            Ok((view, holding))
                if view.state == LeaseState::Held && holding as usize >= self.quorum() =>
            {
                let left = view.remaining_ms.unwrap_or(0).max(1);
                let _ = ask_again(left).await;
            }
            Ok((view, _))
                if matches!(view.state, LeaseState::Released | LeaseState::ForceReleased) =>
            {
                let _ = due.locks.records().unindex_redlock(&due.name, due.id).await;
            }
            Ok((view, _)) => {
                let at = view.ended_at.unwrap_or(view.expires_at).0;
                nodes.expired(&ledger, &due, at).await;
            }
            Err(LockError::UnknownLease) => {
                nodes.expired(&ledger, &due, crate::locks::wall_ms()).await;
            }
            Err(_) => {
                let _ = ask_again(millis(ASK_AGAIN)).await;
            }
        }
    }

    /// Records `due`'s expiry (once), and has each node record its copy's.
    async fn expired(&self, ledger: &Ledger<'_>, due: &DueRedlock, at_ms: u64) {
        if ledger
            .ended(&due.name, due.id, LeaseState::Expired, at_ms, None)
            .await
        {
            due.locks.records().observer().lease_expired(due.id);
            join_all(self.nodes.iter().map(|n| n.locks.sweep(&due.name))).await;
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
