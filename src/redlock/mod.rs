//! RedLock (`kind: "redlock"`): one lock over N independent Redis masters
//! (`--redlock-nodes`), granted when a majority of them granted it within its validity time,
//! as antirez's algorithm (redis.io "Distributed Locks with Redis", reference implementation
//! redlock-rb) describes.
//!
//! Each node is a whole Leasehold store of its own ([`nodes`]): the same Lua functions write
//! Redisson's RLock layout there (hash `name`, field `<lease-id>:1` → reentry count, PEXPIRE,
//! unlock message on `redisson_lock__channel:{name}`), so Redisson's `RedissonRedLock` on the
//! same nodes excludes us and we it. The lease is one token, hence one lease id and one
//! holder field, on every node.
//!
//! - Acquire: every node is asked at once with a per-node timeout small against the TTL
//!   ([`quorum::node_timeout`]); granted when a majority granted and the validity
//!   ([`quorum::validity`]: TTL − elapsed − drift) is positive. Otherwise every node is told
//!   to let go (also those that failed or timed out: their grant may have happened), and the
//!   answer is [`RedlockError::NoQuorum`] (503), or the lock held (409) when so many nodes
//!   said "held" that no majority was possible.
//! - Waiting wakes on any node's unlock message: each node has its own subscriber and waiter
//!   registry, and a waiter registers on all of them; never a poll (the holder's TTL running
//!   out is the one timer, as for every lock).
//! - Heartbeat: a majority must extend it within the validity, or it is 503 (a majority
//!   says the lease is gone: 410, and the rest are let go).
//! - Fencing is best effort: there is no single counter. A grant's token is the largest of
//!   the granting nodes' counters (docs/book/src/redis/redlock.md says what that promises).
//!
//! This layer sits beside [`crate::locks`] and uses it per node; it knows nothing of HTTP.

pub mod nodes;
pub mod quorum;
pub mod watch;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::locks::wakeups::Parking;
use crate::locks::{
    AcquireRequest, Acquired, Contention, FencingToken, Grant, LeaseId, LeaseState, LeaseToken,
    LeaseView, LockError, LockName, LockSettings, LockView, Locks, Observer, Release, Renewal,
    Resource, Ttl,
};
use crate::redis::Redis;

pub use nodes::{Node, RedlockSettings, RedlockSetupError};
pub use watch::RedWatch;

/// The RedLock nodes, as the API uses them; cheap to clone.
#[derive(Clone)]
pub struct Redlock {
    nodes: Arc<[Node]>,
    redis_timeout: Duration,
    shutdown: CancellationToken,
}

/// Why a RedLock operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RedlockError {
    /// Fewer than a majority of the nodes granted (or extended) it within its validity;
    /// what it got was let go on every node.
    #[error(
        "{acked} of {nodes} RedLock nodes acknowledged it in time; {quorum} are needed \
         (the rest failed or did not answer in time)"
    )]
    NoQuorum {
        acked: usize,
        quorum: usize,
        nodes: usize,
    },
    /// What the nodes' majority answered (held, lease lost, ...).
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// A RedLock grant.
#[derive(Debug)]
pub struct RedGrant {
    /// The lease as the node with the largest fencing counter granted it (its
    /// `fencing_token` is that largest counter).
    pub grant: Grant,
    pub nodes_acked: u32,
    pub validity: Duration,
}

/// A RedLock heartbeat.
#[derive(Debug)]
pub struct RedRenewal {
    pub renewal: Renewal,
    pub nodes_acked: u32,
    pub validity: Duration,
}

/// What one node says of a lock (the dashboard's per-node view).
#[derive(Debug)]
pub struct NodeState {
    pub url: Arc<str>,
    /// `Ok(None)`: free and unknown there; `Err`: the node did not answer.
    pub view: Result<Option<LockView>, String>,
}

/// One node's answer to one round.
enum Vote<T> {
    Yes(T),
    /// Refused because another holds the lock there.
    Held(Contention),
    /// Refused for another reason (lease lost there, a kind conflict, ...).
    No(LockError),
    /// Failed or did not answer in time: it may or may not have acted.
    Failed,
}

impl<T> Vote<T> {
    fn of(answer: Result<Result<T, LockError>, tokio::time::error::Elapsed>) -> Self {
        match answer {
            Ok(Ok(t)) => Self::Yes(t),
            Ok(Err(LockError::Held(c))) => Self::Held(c),
            Ok(Err(e)) if e.unavailable() => Self::Failed,
            Ok(Err(e)) => Self::No(e),
            Err(_) => Self::Failed,
        }
    }
}

/// How long a woken or armed waiter waits at most for a node's unlock subscription to be
/// armed before it relies on the other nodes and its timer.
const ARM_WAIT: Duration = Duration::from_millis(500);

/// How long a read of one node (a lease's state, for inspect and watch) may take: a node
/// that is down must not hold up the answer of the others for the whole Redis timeout
/// (a failed call waits that out, since a write may still land; a read changes nothing).
const READ_TIMEOUT: Duration = Duration::from_millis(250);

impl Redlock {
    /// Connects the nodes and starts their background tasks until `shutdown`; refuses nodes
    /// that are not independent masters (or are `main`, the Redis of everything else).
    pub async fn start(
        settings: &RedlockSettings,
        lock_settings: &LockSettings,
        observer: &Arc<dyn Observer>,
        main: Option<&Redis>,
        shutdown: &CancellationToken,
    ) -> Result<(Self, Vec<tokio::task::JoinHandle<()>>), RedlockSetupError> {
        let (nodes, tasks) = nodes::connect(settings, lock_settings, observer, shutdown)?;
        // (On a refusal the caller stops: its shutdown ends the nodes' tasks.)
        nodes::check_independent(
            &nodes,
            main,
            lock_settings.redis_timeout.max(Duration::from_secs(1)),
        )
        .await?;
        for node in &nodes {
            if let Err(e) = node.locks.load_functions().await {
                tracing::warn!(node = %node.url, error = %e, "could not load the function library on a RedLock node yet");
            }
        }
        Ok((
            Self {
                nodes: nodes.into(),
                redis_timeout: lock_settings.redis_timeout,
                shutdown: shutdown.clone(),
            },
            tasks,
        ))
    }

    /// The same nodes with each node's lock domain mapped (into a tenant's key space).
    pub fn map_locks(&self, f: impl Fn(&Locks) -> Locks) -> Self {
        Self {
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    locks: f(&n.locks),
                    ..n.clone()
                })
                .collect(),
            redis_timeout: self.redis_timeout,
            shutdown: self.shutdown.clone(),
        }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A majority of the nodes.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    fn no_quorum(&self, acked: usize) -> RedlockError {
        RedlockError::NoQuorum {
            acked,
            quorum: self.quorum(),
            nodes: self.nodes.len(),
        }
    }

    /// Acquires `name` on a majority of the nodes for a new lease of `ttl` (or re-enters the
    /// lease `reentry` proves, on the nodes that hold it), waiting up to `wait` while it is
    /// held.
    pub async fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
        reentry: Option<LeaseToken>,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<RedGrant, RedlockError> {
        let reenter = reentry.is_some();
        let token = reentry.unwrap_or_else(LeaseToken::generate);
        let deadline = Instant::now() + wait;
        // Registered before the first attempt, on every node: an unlock between a refusal
        // and the wait still wakes it.
        let registrations: Vec<_> = if wait.is_zero() {
            Vec::new()
        } else {
            self.nodes
                .iter()
                .map(|n| {
                    n.locks
                        .waiter_registry()
                        .register(&n.locks.wake_key_of(name))
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
            let epochs: Vec<_> = registrations
                .iter()
                .zip(self.nodes.iter())
                .map(|(r, n)| n.locks.waiter_registry().epoch(r.key()))
                .collect();
            let (answer, answered, held) = self
                .acquire_once(name, &request, &token, ttl, reenter)
                .await;
            let may_wait = !registrations.is_empty() && Instant::now() < deadline;
            let retry = match answer {
                Ok(grant) => return Ok(grant),
                Err(RedlockError::Lock(LockError::Held(c))) if may_wait => c.retry_after,
                // No majority with some node down, but held where it answered: the holder
                // may let go (or the node come back) within the wait.
                Err(RedlockError::NoQuorum { .. }) if may_wait && held.is_some() => {
                    held.and_then(|c| c.retry_after)
                }
                Err(e) => return Err(e),
            };
            // Park on the nodes that answered this round (a node that failed would only
            // hold the wait up arming its subscription).
            let parks = join_all(registrations.iter().zip(self.nodes.iter()).enumerate().map(
                |(i, (r, n))| {
                    let until = deadline.min(Instant::now() + ARM_WAIT);
                    let epoch = epochs[i];
                    let answered = answered[i];
                    async move {
                        if !answered {
                            return Parking::Unheard;
                        }
                        n.locks.waiter_registry().park(r.key(), epoch, until).await
                    }
                },
            ))
            .await;
            if parks.iter().any(|p| matches!(p, Parking::Armed)) {
                continue;
            }
            let _claims = parks;
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

    /// One round of acquire on every node; the answer, which nodes answered at all, and the
    /// soonest-expiring holder among the nodes that refused because it is held.
    async fn acquire_once(
        &self,
        name: &LockName,
        request: &AcquireRequest,
        token: &LeaseToken,
        ttl: Ttl,
        reenter: bool,
    ) -> (
        Result<RedGrant, RedlockError>,
        Vec<bool>,
        Option<Contention>,
    ) {
        let ttl_ms = ttl.as_millis();
        let per_node = quorum::node_timeout(ttl_ms, self.redis_timeout);
        let started = Instant::now();
        let votes: Vec<Vote<Grant>> = join_all(self.nodes.iter().map(|n| {
            let attempt = n
                .locks
                .acquire_as(name, request.clone(), token.clone(), ttl, reenter);
            async move {
                let answer = tokio::time::timeout(per_node, attempt).await;
                Vote::of(answer.map(|a| {
                    a.and_then(|acquired| match acquired {
                        Acquired::Granted(grant) => Ok(grant),
                        Acquired::Queued(_) => Err(LockError::BadReply(
                            "a reentrant lock queued a ticket".into(),
                        )),
                    })
                }))
            }
        }))
        .await;
        let elapsed = started.elapsed();
        let answered = votes.iter().map(|v| !matches!(v, Vote::Failed)).collect();
        let granted: Vec<&Grant> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Yes(g) => Some(g),
                _ => None,
            })
            .collect();
        let acked = granted.len();
        let validity = granted
            .iter()
            .map(|g| g.ttl_ms)
            .min()
            .and_then(|ttl_ms| quorum::validity(ttl_ms, elapsed));
        if acked >= self.quorum()
            && let Some(validity) = validity
            && let Some(best) = granted.iter().max_by_key(|g| g.fencing_token.0)
        {
            let mut grant = (*best).clone();
            grant.token = (!reenter).then(|| token.clone());
            grant.new_lease = !reenter;
            return (
                Ok(RedGrant {
                    grant,
                    nodes_acked: u32::try_from(acked).unwrap_or(u32::MAX),
                    validity,
                }),
                answered,
                None,
            );
        }
        // No majority in time: let go everywhere. A new lease goes on every node (those that
        // failed too: the call may have run there); a reentry gives back the level it added
        // where it added one.
        let id = token.lease_id();
        join_all(self.nodes.iter().zip(votes.iter()).map(|(n, v)| {
            let give_back = !reenter || matches!(v, Vote::Yes(_));
            async move {
                if give_back {
                    let release =
                        n.locks
                            .release(Resource::Lock, name, id, token, !reenter, None, None);
                    let _ = tokio::time::timeout(self.redis_timeout, release).await;
                }
            }
        }))
        .await;
        let held: Vec<&Contention> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Held(c) => Some(c),
                _ => None,
            })
            .collect();
        let refused = votes.iter().find_map(|v| match v {
            Vote::No(e) => Some(e),
            _ => None,
        });
        let n = self.nodes.len();
        // The soonest expiry among the holders that refused.
        let soonest = held
            .iter()
            .filter(|c| c.retry_after.is_some())
            .min_by_key(|c| c.retry_after)
            .or(held.first())
            .map(|c| (*c).clone());
        let answer = if held.len() > n - self.quorum() {
            // Held on so many nodes that no majority was possible: 409.
            soonest
                .clone()
                .map_or_else(|| self.no_quorum(acked), |c| LockError::Held(c).into())
        } else if let Some(e) = refused
            && votes.iter().filter(|v| matches!(v, Vote::No(_))).count() > n - self.quorum()
        {
            RedlockError::Lock(same_error(e))
        } else {
            self.no_quorum(acked)
        };
        (Err(answer), answered, soonest)
    }

    /// Extends the lease on every node; a majority must within the validity.
    pub async fn renew(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<RedRenewal, RedlockError> {
        let ttl_ms = ttl.map_or(u64::MAX, Ttl::as_millis);
        let per_node = quorum::node_timeout(ttl_ms, self.redis_timeout);
        let started = Instant::now();
        let votes: Vec<Vote<Renewal>> = join_all(self.nodes.iter().map(|n| async move {
            Vote::of(
                tokio::time::timeout(
                    per_node,
                    n.locks.renew(Resource::Lock, name, id, token, ttl),
                )
                .await,
            )
        }))
        .await;
        let elapsed = started.elapsed();
        let renewed: Vec<&Renewal> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Yes(r) => Some(r),
                _ => None,
            })
            .collect();
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
            return Ok(RedRenewal {
                renewal: (*best).clone(),
                nodes_acked: u32::try_from(acked).unwrap_or(u32::MAX),
                validity,
            });
        }
        let gone: Vec<&LockError> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::No(e @ (LockError::LeaseLost(_) | LockError::UnknownLease)) => Some(e),
                _ => None,
            })
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
        if let Some(e) = votes.iter().find_map(|v| match v {
            Vote::No(e) => Some(e),
            _ => None,
        }) && acked == 0
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
    ) -> Result<Release, RedlockError> {
        let votes: Vec<Vote<Release>> = join_all(self.nodes.iter().map(|n| async move {
            Vote::of(
                tokio::time::timeout(
                    self.redis_timeout,
                    n.locks
                        .release(Resource::Lock, name, id, token, all, None, None),
                )
                .await,
            )
        }))
        .await;
        let released = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Yes(r) => Some(r),
                _ => None,
            })
            .max_by_key(|r| r.reentry_count);
        if let Some(r) = released {
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

    /// The lease as the nodes that know it see it: held where it holds (the latest expiry
    /// and the largest fencing token of those), else as it ended.
    pub async fn lease(&self, name: &LockName, id: LeaseId) -> Result<(LeaseView, u32), LockError> {
        let views: Vec<Result<LeaseView, LockError>> =
            join_all(self.nodes.iter().map(|n| async move {
                match tokio::time::timeout(
                    READ_TIMEOUT.min(self.redis_timeout),
                    n.locks.lease(Resource::Lock, name, id),
                )
                .await
                {
                    Ok(view) => view,
                    Err(_) => Err(LockError::Busy),
                }
            }))
            .await;
        let held: Vec<&LeaseView> = views
            .iter()
            .filter_map(|v| v.as_ref().ok())
            .filter(|v| v.state == LeaseState::Held)
            .collect();
        let holding = u32::try_from(held.len()).unwrap_or(u32::MAX);
        if let Some(latest) = held.iter().max_by_key(|v| v.expires_at) {
            let mut view = (*latest).clone();
            view.fencing_token = FencingToken(
                held.iter()
                    .map(|v| v.fencing_token.0)
                    .max()
                    .unwrap_or_default(),
            );
            return Ok((view, holding));
        }
        if let Some(view) = views.iter().find_map(|v| v.as_ref().ok()) {
            return Ok((view.clone(), 0));
        }
        match views.into_iter().find_map(Result::err) {
            Some(e) if e.unavailable() => Err(e),
            _ => Err(LockError::UnknownLease),
        }
    }

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
}

/// A refusal as a node gave it, for the caller (`LockError` is not `Clone`: its Redis
/// errors are not).
fn same_error(e: &LockError) -> LockError {
    match e {
        LockError::Held(c) => LockError::Held(c.clone()),
        LockError::KindConflict { held_as } => LockError::KindConflict { held_as: *held_as },
        LockError::NotReentrant => LockError::NotReentrant,
        LockError::LeaseLost(state) => LockError::LeaseLost(*state),
        LockError::UnknownLease => LockError::UnknownLease,
        LockError::TokenMismatch => LockError::TokenMismatch,
        LockError::UnknownToken => LockError::UnknownToken,
        LockError::TicketPending => LockError::TicketPending,
        LockError::IdempotencyMismatch => LockError::IdempotencyMismatch,
        other => LockError::BadReply(other.to_string()),
    }
}
