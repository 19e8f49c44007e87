//! Taking a RedLock lease: one round on every node at once, granted by a majority within
//! the lease's validity; while it is held, waiting for any node's unlock message.

use std::pin::Pin;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use super::vote::{Vote, ask_all, granted, same_error};
use super::{QuorumAck, RedGrant, Redlock, quorum};
use crate::leases::LeaseError;
use crate::locks::{
    AcquireRequest, Acquired, Contention, Grant, LeaseId, LeaseKind, LeaseToken, LockError,
    LockName, Resource, Ttl,
};

/// The lease a RedLock acquire is for: a new one (`reenter` false) or one more level of the
/// lease `token` proves.
#[derive(Debug, Clone)]
pub struct RedLease {
    pub id: LeaseId,
    pub token: LeaseToken,
    pub reenter: bool,
}

/// What one round ended with: the answer, which nodes answered at all, and the
/// soonest-expiring holder among the nodes that refused because it is held.
struct Round {
    answer: Result<RedGrant, LeaseError>,
    answered: Vec<bool>,
    held: Option<Contention>,
}

impl Redlock {
    /// Acquires `name` on a majority of the nodes for `lease`, waiting up to `wait` while it
    /// is held. `listed(deadline)` is called once, when the request first has to wait: what
    /// it returns (the request's entry in a waiting list) is kept until the request ends.
    pub async fn acquire<L>(
        &self,
        name: &LockName,
        (request, lease): (AcquireRequest, RedLease),
        ttl: Ttl,
        wait: Duration,
        listed: impl FnOnce(Instant) -> L,
    ) -> Result<RedGrant, LeaseError> {
        let deadline = Instant::now() + wait;
        let mut listed = Some(listed);
        let mut _entry: Option<L> = None;
        // Registered before the first attempt, on every node: an unlock between a refusal
        // and the wait still wakes it.
        let registrations: Vec<_> = if wait.is_zero() {
            Vec::new()
        } else {
            self.nodes
                .iter()
                .map(|n| {
                    n.locks
                        .redlock_node()
                        .waiter_registry()
                        .register(&n.locks.redlock_node().wake_key_of(name))
                })
                .collect()
        };
        loop {
            let mut notified: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = registrations
                .iter()
                .map(|r| {
                    let mut n = Box::pin(r.notified());
                    n.as_mut().enable();
                    n
                })
                .collect();
            let keys: Vec<&str> = registrations.iter().map(|r| r.key()).collect();
            let epochs = self.epochs(&keys);
            let round = self.round(name, &request, &lease, ttl).await;
            let may_wait = !registrations.is_empty() && Instant::now() < deadline;
            let retry = match round.answer {
                Ok(grant) => return Ok(grant),
                Err(LeaseError::Lock(LockError::Held(c))) if may_wait => c.retry_after,
                // No majority with some node down, but held where it answered: the holder
                // may let go (or the node come back) within the wait.
                Err(LeaseError::NoQuorum { .. }) if may_wait && round.held.is_some() => {
                    round.held.and_then(|c| c.retry_after)
                }
                Err(e) => return Err(e),
            };
            if let Some(list) = listed.take() {
                _entry = Some(list(deadline));
            }
            // Park on the nodes that answered this round (a node that failed would only
            // hold the wait up arming its subscription).
            let parked = self.park(&keys, epochs, &round.answered, deadline).await;
            let Some(_claims) = parked else {
                continue;
            };
            let now = Instant::now();
            let retry_at = retry.map_or(deadline, |d| {
                (now + d + Duration::from_millis(1)).min(deadline)
            });
            let woken = select_all(notified.iter_mut().map(|n| n.as_mut()));
            tokio::select! {
                _ = woken => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = self.shutdown.cancelled() => return Err(LockError::ShuttingDown.into()),
            }
        }
    }

    /// One round of acquire on every node.
    async fn round(
        &self,
        name: &LockName,
        request: &AcquireRequest,
        lease: &RedLease,
        ttl: Ttl,
    ) -> Round {
        let per_node = quorum::node_timeout(ttl.as_millis(), self.redis_timeout);
        let started = Instant::now();
        let votes: Vec<Vote<Grant>> = ask_all(&self.nodes, per_node, |n| {
            let attempt = n.locks.redlock_node().acquire_as(
                name,
                request.clone(),
                lease.id,
                lease.token.clone(),
                ttl,
                lease.reenter,
            );
            async move {
                match attempt.await? {
                    Acquired::Granted(grant) => Ok(grant),
                    Acquired::Queued(_) => Err(LockError::BadReply(
                        "a reentrant lock queued a ticket".into(),
                    )),
                }
            }
        })
        .await;
        let answered = votes.iter().map(|v| !matches!(v, Vote::Failed)).collect();
        if let Some(grant) = self.tally(&votes, lease, started.elapsed()) {
            return Round {
                answer: Ok(grant),
                answered,
                held: None,
            };
        }
        self.let_go(name, lease, &votes).await;
        let (answer, held) = self.refusal(&votes);
        Round {
            answer: Err(answer),
            answered,
            held,
        }
    }

    /// The grant, when a majority granted within the validity.
    fn tally(
        &self,
        votes: &[Vote<Grant>],
        lease: &RedLease,
        elapsed: Duration,
    ) -> Option<RedGrant> {
        let granted = granted(votes);
        let acked = granted.len();
        let validity = granted
            .iter()
            .map(|g| g.ttl_ms)
            .min()
            .and_then(|ttl_ms| quorum::validity(ttl_ms, elapsed))?;
        if acked < self.quorum() {
            return None;
        }
        let best = granted.iter().max_by_key(|g| g.fencing_token.0)?;
        let mut grant = (*best).clone();
        grant.token = (!lease.reenter).then(|| lease.token.clone());
        grant.new_lease = !lease.reenter;
        grant.kind = LeaseKind::Redlock;
        grant.replicas_acked = None;
        grant.degraded = None;
        Some(RedGrant {
            grant,
            ack: QuorumAck {
                nodes_acked: u32::try_from(acked).unwrap_or(u32::MAX),
                validity,
            },
        })
    }

    /// No majority in time: let go everywhere. A new lease goes on every node (those that
    /// failed too: the call may have run there); a reentry gives back the level it added
    /// where it added one.
    async fn let_go(&self, name: &LockName, lease: &RedLease, votes: &[Vote<Grant>]) {
        join_all(self.nodes.iter().zip(votes.iter()).map(|(n, v)| {
            let give_back = !lease.reenter || matches!(v, Vote::Yes(_));
            async move {
                if give_back {
                    let release = n.locks.release(
                        Resource::Lock,
                        name,
                        lease.id,
                        &lease.token,
                        !lease.reenter,
                        None,
                        None,
                    );
                    let _ = tokio::time::timeout(self.redis_timeout, release).await;
                }
            }
        }))
        .await;
    }

    /// Why a round was refused, and the soonest-expiring holder among the nodes that said
    /// "held".
    fn refusal(&self, votes: &[Vote<Grant>]) -> (LeaseError, Option<Contention>) {
        let acked = granted(votes).len();
        let held: Vec<&Contention> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Held(c) => Some(c),
                _ => None,
            })
            .collect();
        let n = self.nodes.len();
        let soonest = held
            .iter()
            .filter(|c| c.retry_after.is_some())
            .min_by_key(|c| c.retry_after)
            .or(held.first())
            .map(|c| (*c).clone());
        let refusals = votes.iter().filter_map(Vote::refusal).count();
        let answer = if held.len() > n - self.quorum() {
            // Held on so many nodes that no majority was possible: 409.
            soonest
                .clone()
                .map_or_else(|| self.no_quorum(acked), |c| LockError::Held(c).into())
        } else if let Some(e) = votes.iter().find_map(Vote::refusal)
            && refusals > n - self.quorum()
        {
            LeaseError::Lock(same_error(e))
        } else {
            self.no_quorum(acked)
        };
        (answer, soonest)
    }
}
