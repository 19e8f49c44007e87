//! One round of asking every node, and what each answered.

use std::time::Duration;

use futures_util::future::join_all;

use super::Node;
use crate::locks::{Contention, LockError};

/// One node's answer to one round.
pub(super) enum Vote<T> {
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

    pub fn yes(&self) -> Option<&T> {
        match self {
            Self::Yes(t) => Some(t),
            _ => None,
        }
    }

    pub fn refusal(&self) -> Option<&LockError> {
        match self {
            Self::No(e) => Some(e),
            _ => None,
        }
    }
}

/// Asks every node at once, each within `timeout`.
pub(super) async fn ask_all<'a, T, F, Fut>(
    nodes: &'a [Node],
    timeout: Duration,
    ask: F,
) -> Vec<Vote<T>>
where
    F: Fn(&'a Node) -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    join_all(nodes.iter().map(|n| {
        let asked = ask(n);
        async move { Vote::of(tokio::time::timeout(timeout, asked).await) }
    }))
    .await
}

/// The answers that said yes.
pub(super) fn granted<T>(votes: &[Vote<T>]) -> Vec<&T> {
    votes.iter().filter_map(Vote::yes).collect()
}

/// A refusal as a node gave it, for the caller (`LockError` is not `Clone`: its Redis
/// errors are not).
pub(super) fn same_error(e: &LockError) -> LockError {
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
