//! What a lease is, and what a name is held as. Every question whose answer depends on the kind
//! is a method here, so a new kind is one new variant and the compiler lists each place that
//! must decide; views, metrics and the API ask these types instead of comparing strings.

use serde::Deserialize;

/// The kinds of lease, each with Redisson's semantics and Redis layout.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum LeaseKind {
    /// Redisson RLock: the same lease may enter again and again.
    Reentrant,
    /// Curator InterProcessSemaphoreMutex: a second entry by the holder is refused.
    Exclusive,
    /// Redisson RFairLock / Curator InterProcessMutex: strict FIFO among live waiters.
    Fair,
    /// Redisson RReadWriteLock, shared side.
    Read,
    /// Redisson RReadWriteLock, exclusive side.
    Write,
    /// Redisson RPermitExpirableSemaphore: some permits of a semaphore.
    Semaphore,
    /// Redisson RedissonRedLock: a reentrant lease on each of the RedLock nodes, granted by a
    /// majority of them. Only the leases layer (`crate::leases::redlock`) takes one; each node
    /// holds it as a `Reentrant` lease, and the main Redis never holds one.
    Redlock,
}

/// Which family of routes, scripts and keys a lease belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// `/v1/locks`: every lock kind, on Redisson's lock hash.
    Lock,
    /// `/v1/semaphores`: permits, on Redisson's semaphore counter.
    Semaphore,
}

impl LeaseKind {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }

    pub fn resource(self) -> Resource {
        match self {
            Self::Semaphore => Resource::Semaphore,
            _ => Resource::Lock,
        }
    }

    /// Waits in a FIFO queue of tickets, each woken on its own channel.
    pub fn is_fair(self) -> bool {
        self == Self::Fair
    }

    /// A read/write lock's side: holds per mode, Redisson's rwlock_timeout keys.
    pub fn is_read_write(self) -> bool {
        matches!(self, Self::Read | Self::Write)
    }

    /// Shares the lock with other leases of its kind.
    pub fn is_shared(self) -> bool {
        matches!(self, Self::Read | Self::Semaphore)
    }

    /// Stands in a line while it waits, which it must leave when its request ends: fair
    /// tickets, and writers (so that readers under the fifo policy wait behind them).
    pub fn stands_in_line(self) -> bool {
        matches!(self, Self::Fair | Self::Write)
    }

    /// What a name is held as while a lease of this kind holds it.
    pub fn held_as(self) -> HeldAs {
        match self {
            Self::Reentrant => HeldAs::Reentrant,
            Self::Exclusive => HeldAs::Exclusive,
            Self::Fair => HeldAs::Fair,
            Self::Read | Self::Write => HeldAs::ReadWrite,
            Self::Semaphore => HeldAs::Semaphore,
            Self::Redlock => HeldAs::Redlock,
        }
    }
}

impl From<crate::wire::LockKind> for LeaseKind {
    /// The kinds a client may ask for are the lease kinds but the semaphore's (asked for on
    /// its own routes).
    fn from(kind: crate::wire::LockKind) -> Self {
        use crate::wire::LockKind as K;
        match kind {
            K::Reentrant => Self::Reentrant,
            K::Exclusive => Self::Exclusive,
            K::Fair => Self::Fair,
            K::Read => Self::Read,
            K::Write => Self::Write,
            K::Redlock => Self::Redlock,
        }
    }
}

/// What a name is used as while anyone holds it (or waits for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum HeldAs {
    Reentrant,
    Exclusive,
    Fair,
    #[serde(rename = "rw")]
    #[strum(serialize = "rw")]
    ReadWrite,
    Semaphore,
    /// Held on a majority of the RedLock nodes (never by the main Redis).
    Redlock,
    /// A Redisson client's lock no lease of ours holds, or a key another program made.
    Foreign,
}

impl HeldAs {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn is_semaphore(self) -> bool {
        self == Self::Semaphore
    }

    /// The routes that manage the name as it is held now.
    pub fn resource(self) -> Resource {
        match self {
            Self::Semaphore => Resource::Semaphore,
            _ => Resource::Lock,
        }
    }
}

/// Who goes first on a read/write lock when a writer waits (Redisson's readers first, or
/// Curator's fifo), and which hold of a read/write lease a release gives back: the wire
/// format's enums, one per concept (the API hands them to the domain as they came).
pub use crate::wire::{RwMode, RwPolicy};

/// How a lease ended, or that it still holds its lock: the wire format's enum (one per
/// concept). Its `Unknown` is a client's reading of a state from a newer server; a reply of
/// this build's functions never has it, and the domain takes it as an end it cannot name.
pub use crate::wire::LeaseState;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_their_names_and_know_their_resource() {
        for &kind in LeaseKind::ALL {
            assert_eq!(LeaseKind::parse(kind.as_str()), Some(kind));
            assert_eq!(kind.held_as().resource(), kind.resource());
        }
        assert_eq!(LeaseKind::parse("rw"), None);
        assert_eq!(LeaseKind::Read.held_as().as_str(), "rw");
        // The names the Lua functions and the wire format use.
        assert_eq!(LeaseState::ForceReleased.as_str(), "force_released");
        assert_eq!(RwPolicy::ReadersFirst.as_str(), "readers_first");
        assert_eq!(RwMode::parse("write"), Some(RwMode::Write));
    }
}
