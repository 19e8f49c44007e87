//! What can go wrong in the lock domain, stated as situations; the API maps them to statuses.

use std::time::Duration;

pub use super::types::InvalidInput;
use super::types::{Contention, HeldAs, LeaseState};

/// Why a lock operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("the lock is held by another lease")]
    Held(Contention),
    #[error("the lock is in use as {}", held_as.as_str())]
    KindConflict { held_as: HeldAs },
    #[error("the lock is not reentrant and this lease already holds it")]
    NotReentrant,
    #[error("a read hold cannot be upgraded to a write hold")]
    UpgradeRefused,
    #[error("the semaphore's limit is {limit}")]
    LimitMismatch { limit: u32 },
    #[error("the lease holds no {0} lock")]
    ModeNotHeld(String),
    #[error("the token belongs to a queued ticket")]
    TicketPending,
    #[error("the ticket expired before it was polled")]
    TicketExpired,
    #[error("the lease no longer holds the lock ({})", .0.as_str())]
    LeaseLost(LeaseState),
    #[error("no such lease on this lock")]
    UnknownLease,
    #[error("the token does not belong to this lease")]
    TokenMismatch,
    #[error("the token belongs to no lease on this lock")]
    UnknownToken,
    #[error("Redis is unavailable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Redis refused a script for a reason that is this service's bug or a misconfiguration
    /// (a script error, a wrong type, a missing permission), not Redis being away.
    #[error("a Redis script failed: {0}")]
    Script(#[source] redis::RedisError),
    /// Redis ran the script after its deadline, so it changed nothing.
    #[error("Redis answered too late; nothing was changed")]
    TooLate,
    /// Redis is so far behind that this call did not get its turn to be sent in time.
    #[error("Redis is too busy; nothing was sent")]
    Busy,
    #[error("Redis gave an answer this version does not understand: {0}")]
    BadReply(String),
    #[error("the service is shutting down")]
    ShuttingDown,
    #[error("the Idempotency-Key was used for another request")]
    IdempotencyMismatch,
    #[error("no such semaphore")]
    NoSuchSemaphore,
    /// Fewer replicas acknowledged a grant, reentry or heartbeat than required (`WAIT`): a
    /// grant is rolled back, a heartbeat's lease keeps the deadline it had.
    #[error("{acked} of the {required} replicas required acknowledged the change")]
    NotReplicated { acked: u32, required: u32 },
    /// A rollback found that another request answered with the grant (internal).
    #[error("the grant was delivered by another request")]
    NotRolledBack,
    /// A multilease was refused: nothing of it is held. Each refused member with why.
    #[error("{} of the multilease's locks could not be taken", .0.len())]
    MembersRefused(Vec<MemberRefusal>),
    /// A multilease ended because one of its members' leases ended.
    #[error("the multilease's lease on {member} ended ({})", .state.as_str())]
    MemberLost {
        member: super::types::LockName,
        state: LeaseState,
    },
}

/// One lock of a multilease refused, and why.
#[derive(Debug)]
pub struct MemberRefusal {
    pub member: super::types::LockName,
    pub error: LockError,
}

impl LockError {
    /// Whether the request failed (Redis away or slow, a script error, shutting down) rather
    /// than being refused: the script may or may not have run.
    pub fn unavailable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_)
                | Self::Script(_)
                | Self::TooLate
                | Self::Busy
                | Self::ShuttingDown
                | Self::BadReply(_)
                // The change stands on the master, unanswered: it is given back.
                | Self::NotReplicated { .. }
        )
    }

    /// When a refused acquirer may try again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Held(c) => c.retry_after,
            _ => None,
        }
    }
}

impl From<redis::RedisError> for LockError {
    /// Redis being away, slow, loading or read-only is `Unavailable` (503, try again); an
    /// error no retry can cure is `Script` (500, logged).
    fn from(e: redis::RedisError) -> Self {
        use redis::{ErrorKind, ServerErrorKind};
        // A function that met a key of its slot on the other side of a slot move (a key
        // named by the request, which Redis cannot check before the call runs): the move is
        // in progress, and Redis stopped the call at that command, keeping what it wrote
        // before. Like a call whose answer was lost, its outcome is unknown: a grant it may
        // have made is rolled back (its nonce), and the request may try again.
        if e.to_string()
            .contains("attempted to access a non local key")
        {
            return Self::Unavailable(e);
        }
        match e.kind() {
            ErrorKind::Server(
                ServerErrorKind::ResponseError
                | ServerErrorKind::NoPerm
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::ExecAbort
                | ServerErrorKind::NoScript,
            )
            | ErrorKind::Parse
            | ErrorKind::UnexpectedReturnType => Self::Script(e),
            ErrorKind::Extension if e.code() != Some("BUSY") => Self::Script(e),
            _ => Self::Unavailable(e),
        }
    }
}

/// Whether Redis refused `e` for want of memory (`maxmemory` reached, `noeviction`): alone,
/// or among a pipeline's failures (the quota accounts are written as one), which redis-rs
/// reports together under no code of their own.
pub fn out_of_memory(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("\"OOM\"")
}

#[cfg(test)]
mod oom_tests {
    #[test]
    fn an_oom_refusal_is_out_of_memory_by_its_text_too() {
        let one = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "\"OOM\": command not allowed when used memory > 'maxmemory'.",
        ));
        assert!(super::out_of_memory(&one));
    }
}
