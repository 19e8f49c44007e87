//! How long a name has been held: since the oldest of its current holds began. A heartbeat
//! moves the expiry, never this, so a lock renewed for hours shows hours here (what an
//! operator asks of a stuck job), while its TTL left stays short.

use crate::locks::{LiveEntry, LockView, SemaphoreView, Timestamp};

impl LockView {
    /// When the oldest current Leasehold hold began; `None` when free or held only by
    /// Redisson clients (they record no start).
    pub fn held_since(&self) -> Option<Timestamp> {
        self.holders.iter().filter_map(|h| h.acquired_at).min()
    }
}

impl SemaphoreView {
    /// When the oldest lease holding permits began.
    pub fn held_since(&self) -> Option<Timestamp> {
        self.holders.iter().filter_map(|h| h.acquired_at).min()
    }
}

impl LiveEntry {
    pub fn held_since(&self) -> Option<Timestamp> {
        match self {
            Self::Lock(lock) => lock.held_since(),
            Self::Semaphore(sem) => sem.held_since(),
        }
    }
}

/// How long ago `since` was at `now_ms`.
pub fn held_for(since: Option<Timestamp>, now_ms: u64) -> Option<u64> {
    since.map(|s| now_ms.saturating_sub(s.0))
}
