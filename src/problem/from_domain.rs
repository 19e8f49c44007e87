//! What each domain error means to a caller: its problem, detail and extension members.

use std::time::Duration;

use serde_json::Value;

use super::{Problem, ProblemKind};
use crate::locks::{HeldAs, InvalidInput, LeaseState, LockError, Timestamp};

impl From<InvalidInput> for Problem {
    fn from(e: InvalidInput) -> Self {
        let kind = match e {
            InvalidInput::LockName(_) => ProblemKind::InvalidLockName,
            InvalidInput::Ttl { .. } => ProblemKind::InvalidTtl,
            InvalidInput::LockDelay { .. } => ProblemKind::InvalidLockDelay,
            InvalidInput::Holder(_) | InvalidInput::Metadata(_) | InvalidInput::Members(_) => {
                ProblemKind::InvalidBody
            }
            InvalidInput::TokenShape => ProblemKind::TokenMalformed,
            InvalidInput::IdempotencyKey => ProblemKind::InvalidIdempotencyKey,
        };
        Problem::new(kind, e.to_string())
    }
}

/// A refused multilease: `lock_held` (409, `Retry-After` the latest of the holders') when
/// every refusal was a holder's, else the first other refusal's problem; `members` lists each
/// refused lock with its problem's code and members.
fn members_refused(refusals: Vec<crate::locks::error::MemberRefusal>) -> Problem {
    let mut listed = Vec::with_capacity(refusals.len());
    let mut retry_after = None;
    let mut other: Option<Problem> = None;
    let names: Vec<String> = refusals.iter().map(|r| r.member.to_string()).collect();
    for refusal in refusals {
        let held = matches!(refusal.error, LockError::Held(_));
        let after = refusal.error.retry_after();
        retry_after = retry_after.max(after);
        let problem = Problem::from(refusal.error);
        let mut entry = serde_json::Map::new();
        entry.insert("lock".into(), refusal.member.as_str().into());
        entry.insert("code".into(), problem.kind.code().into());
        entry.insert("detail".into(), problem.detail.clone().into());
        for (key, value) in &problem.extra {
            entry.insert(key.clone(), value.clone());
        }
        listed.push(Value::Object(entry));
        if !held && other.is_none() {
            other = Some(problem.with("member", refusal.member.as_str()));
        }
    }
    let problem = match other {
        Some(problem) => problem,
        None => {
            let p = Problem::new(
                ProblemKind::LockHeld,
                format!(
                    "held by others: {}; nothing of the multilease is held",
                    names.join(", ")
                ),
            );
            match retry_after {
                Some(after) => p.retry_after(after),
                None => p,
            }
        }
    };
    problem.with("members", Value::Array(listed))
}

/// What the leases layer says: no majority of the RedLock nodes is 503 `no_quorum` (nothing
/// of it was left on any node), with the counts; RedLock asked of a server without nodes is
/// 422 `redlock_disabled`; the rest is what the lease's store said.
impl From<crate::leases::LeaseError> for Problem {
    fn from(e: crate::leases::LeaseError) -> Self {
        use crate::leases::LeaseError;
        match e {
            LeaseError::NoQuorum {
                acked,
                quorum,
                nodes,
            } => Problem::new(ProblemKind::NoQuorum, e.to_string())
                .with("nodes_acked", acked)
                .with("quorum", quorum)
                .with("nodes", nodes)
                .retry_after(Duration::from_secs(1)),
            LeaseError::RedlockDisabled => Problem::new(
                ProblemKind::RedlockDisabled,
                "kind redlock needs RedLock nodes: start the server with --redlock-nodes \
                 URL,URL,URL (LEASEHOLD_REDLOCK_NODES)",
            ),
            LeaseError::Lock(e) => e.into(),
        }
    }
}

impl From<LockError> for Problem {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Held(_) => held(e),
            LockError::Unavailable(_)
            | LockError::Script(_)
            | LockError::NotReplicated { .. }
            | LockError::TooLate
            | LockError::Busy
            | LockError::ShuttingDown => redis_failed(e),
            LockError::IdempotencyMismatch
            | LockError::NoSuchSemaphore
            | LockError::NotRolledBack
            | LockError::BadReply(_) => other(e),
            _ => refused(e),
        }
    }
}

/// Someone else holds the lock, or nobody does but its lock-delay runs.
fn held(e: LockError) -> Problem {
    match e {
        LockError::Held(c) if c.delayed_until.is_some() => {
            let until = c.delayed_until.map(Timestamp::rfc3339);
            let mut p = Problem::new(
                ProblemKind::LockDelay,
                format!(
                    "nobody holds the lock, but its last lease ended without a release \
                     (it expired or an admin removed it) and asked for a lock-delay: no \
                     new lease until {}",
                    until.as_deref().unwrap_or("it ends")
                ),
            )
            .with("delayed_until", until);
            if let Some(after) = c.retry_after {
                p = p.retry_after(after);
            }
            p
        }
        LockError::Held(c) => {
            let who = match (&c.holder, &c.lease_id, &c.holder_id) {
                (Some(label), _, _) => format!("held by \"{label}\""),
                (None, Some(id), _) => format!("held by lease {id}"),
                (None, None, Some(field)) => format!("held by a Redisson client ({field})"),
                (None, None, None) => "held".to_owned(),
            };
            let mut p = Problem::new(ProblemKind::LockHeld, format!("the lock is {who}"))
                .with("holder", c.holder.clone())
                .with("lease_id", c.lease_id.map(|id| id.to_string()))
                .with("holder_id", c.holder_id.clone());
            if let Some(&(since, held_for)) = c.held.as_deref() {
                p = p.with("held_since", since.rfc3339()).with(
                    "held_for_ms",
                    u64::try_from(held_for.as_millis()).unwrap_or(u64::MAX),
                );
            }
            if let Some(after) = c.retry_after {
                p = p.retry_after(after);
            }
            p
        }
        _ => unreachable_arm(e),
    }
}

/// The request does not fit the lock or lease as it stands.
fn refused(e: LockError) -> Problem {
    match e {
        LockError::MembersRefused(refusals) => members_refused(refusals),
        LockError::MemberLost { member, state } => Problem::new(
            ProblemKind::LeaseLost,
            format!(
                "the multilease no longer holds lock {member} ({}): it has ended, and \
                     its other locks were given back; acquire a new multilease",
                state.as_str()
            ),
        )
        .with("reason", state.as_str())
        .with("member", member.as_str()),
        LockError::KindConflict { held_as } => {
            let detail = if held_as == HeldAs::Foreign {
                "the name belongs to a Redis key another program made; Leasehold leaves it \
                 alone: use another name (or another --key-prefix)"
                    .to_owned()
            } else {
                let kind = held_as.as_str();
                let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                format!(
                    "the lock is in use as {article} {kind} lock; ask for that kind or another name"
                )
            };
            Problem::new(ProblemKind::KindConflict, detail).with("held_as", held_as.as_str())
        }
        LockError::NotReentrant => Problem::new(
            ProblemKind::NotReentrant,
            "this exclusive lock is not reentrant and your lease already holds it",
        ),
        LockError::UpgradeRefused => Problem::new(
            ProblemKind::UpgradeRefused,
            "upgrades are not supported: your lease holds a read lock, so a write lock would \
             wait for itself; release the read hold and acquire the write lock",
        ),
        LockError::LimitMismatch { limit } => Problem::new(
            ProblemKind::LimitMismatch,
            format!("the semaphore's limit is {limit}; every party must name the same"),
        )
        .with("limit", limit),
        LockError::ModeNotHeld(mode) => Problem::new(
            ProblemKind::ModeNotHeld,
            format!("the lease holds no {mode} lock"),
        )
        .with("mode", mode),
        LockError::TicketPending => Problem::new(
            ProblemKind::TicketPending,
            "the token belongs to a ticket still queued: poll the ticket",
        ),
        LockError::TicketExpired => Problem::new(
            ProblemKind::TicketExpired,
            "the ticket was not polled in time and lost its place; acquire again",
        ),
        LockError::LeaseLost(state) => {
            let why = match state {
                LeaseState::Released => "it was released",
                LeaseState::ForceReleased => "an admin force-released the lock",
                LeaseState::Left => "its waiter left the queue",
                LeaseState::Expired | LeaseState::Held | LeaseState::Queued => "its TTL ran out",
                LeaseState::Unknown => "it ended",
            };
            Problem::new(
                ProblemKind::LeaseLost,
                format!("the lease no longer holds the lock: {why}; acquire a new lease"),
            )
            .with("reason", state.as_str())
        }
        LockError::UnknownLease => Problem::new(
            ProblemKind::LeaseNotFound,
            "no lease with this id on this lock (or it ended long ago)",
        ),
        LockError::TokenMismatch => Problem::new(
            ProblemKind::TokenMismatch,
            "the bearer token does not belong to this lease",
        ),
        LockError::UnknownToken => Problem::new(
            ProblemKind::TokenMismatch,
            "the bearer token belongs to no lease on this lock; omit it to ask for a new lease",
        ),
        _ => unreachable_arm(e),
    }
}

/// Redis did not do it: unreachable, full, too slow, not replicated, or this instance stops.
fn redis_failed(e: LockError) -> Problem {
    match e {
        LockError::Unavailable(source) => {
            tracing::warn!(error = %source, "Redis call failed");
            Problem::new(
                ProblemKind::RedisUnavailable,
                "Redis did not answer; try again",
            )
            .retry_after(Duration::from_secs(1))
        }
        // Redis refuses functions that may grow its memory once it is at its maxmemory
        // (noeviction): nothing ran, and room may come back as leases end. What frees or
        // keeps a lease (release, heartbeat, inspection) runs anyway (`allow-oom`).
        LockError::Script(source) if crate::locks::error::out_of_memory(&source) => {
            tracing::warn!(error = %source, "Redis is out of memory");
            Problem::new(
                ProblemKind::RedisFull,
                "Redis is full (its maxmemory is reached), so nothing was changed; releases \
                 and heartbeats still work: try again later",
            )
            .retry_after(Duration::from_secs(5))
        }
        LockError::Script(source) => {
            tracing::error!(error = %source, "a Redis script failed");
            Problem::new(ProblemKind::Internal, "internal error")
        }
        LockError::NotReplicated { acked, required } => {
            tracing::warn!(
                acked,
                required,
                "too few Redis replicas acknowledged a change"
            );
            Problem::new(
                ProblemKind::NotReplicated,
                format!(
                    "{acked} of the {required} Redis replicas required acknowledged it in \
                     time, so it was not granted (a failover could lose it); try again"
                ),
            )
            .with("replicas_acked", acked)
            .with("replicas_required", required)
            .retry_after(Duration::from_secs(1))
        }
        LockError::TooLate => Problem::new(
            ProblemKind::RedisUnavailable,
            "Redis answered too late, so nothing was changed; try again",
        )
        .retry_after(Duration::from_secs(1)),
        LockError::Busy => Problem::new(
            ProblemKind::RedisUnavailable,
            "Redis is too busy to take this request in time, so nothing was changed; try again",
        )
        .retry_after(Duration::from_secs(1)),
        LockError::ShuttingDown => Problem::new(
            ProblemKind::ShuttingDown,
            "this instance is shutting down; retry on another",
        )
        .retry_after(Duration::from_secs(1)),
        _ => unreachable_arm(e),
    }
}

fn other(e: LockError) -> Problem {
    match e {
        LockError::IdempotencyMismatch => Problem::new(
            ProblemKind::IdempotencyKeyReused,
            "this Idempotency-Key came with another request first; use a new key for a new \
             request",
        ),
        LockError::NoSuchSemaphore => Problem::new(
            ProblemKind::LockNotFound,
            "no semaphore of that name is in use",
        ),
        LockError::NotRolledBack => {
            tracing::error!("a rollback refusal reached the API");
            Problem::new(ProblemKind::Internal, "internal error")
        }
        LockError::BadReply(what) => {
            tracing::error!(reply = %what, "unexpected script reply");
            Problem::new(ProblemKind::Internal, "internal error")
        }
        _ => unreachable_arm(e),
    }
}

/// A variant sent to the wrong group above is a bug of this file, not of the caller's
/// request: logged, and answered as an internal error rather than a panic.
fn unreachable_arm(e: LockError) -> Problem {
    tracing::error!(error = %e, "a lock error reached the wrong problem group");
    Problem::new(ProblemKind::Internal, "internal error")
}
