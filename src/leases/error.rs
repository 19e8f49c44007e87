//! What can go wrong with a lease wherever it lives: what its store said ([`LockError`]), and
//! what only a lease held by a majority of stores can meet.

use crate::locks::LockError;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Fewer than a majority of the RedLock nodes granted (or extended, or released) it in
    /// time; what a grant got was let go on every node.
    #[error(
        "{acked} of {nodes} RedLock nodes acknowledged it in time; {quorum} are needed \
         (the rest failed or did not answer in time)"
    )]
    NoQuorum {
        acked: usize,
        quorum: usize,
        nodes: usize,
    },
    /// A RedLock lease asked of a server started without `--redlock-nodes`.
    #[error("kind redlock needs RedLock nodes (--redlock-nodes)")]
    RedlockDisabled,
    /// What the lease's store (or the nodes' majority) answered.
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl LeaseError {
    /// The store's answer, if that is what this is.
    pub fn as_lock(&self) -> Option<&LockError> {
        match self {
            Self::Lock(e) => Some(e),
            _ => None,
        }
    }

    /// The lease does not hold its lock (any more): unknown there, or lost.
    pub fn is_gone(&self) -> bool {
        matches!(
            self.as_lock(),
            Some(LockError::UnknownLease | LockError::LeaseLost(_))
        )
    }
}

impl From<redis::RedisError> for LeaseError {
    fn from(e: redis::RedisError) -> Self {
        Self::Lock(e.into())
    }
}
