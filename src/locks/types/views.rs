//! What a lease, a lock or a semaphore looks like from outside (never with a token).

use super::{
    FencingToken, HeldAs, LeaseId, LeaseKind, LeaseState, LockName, Metadata, RwMode, Timestamp,
};

/// A lease as anyone may see it (never with its token).
#[derive(Debug, Clone)]
pub struct LeaseView {
    pub lease_id: LeaseId,
    pub lock: LockName,
    pub state: LeaseState,
    pub kind: LeaseKind,
    /// Read/write leases: holds per mode.
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    /// Fair tickets: place in the queue (1 = next).
    pub position: Option<u64>,
    /// Semaphore leases: permits held.
    pub permits: Option<u64>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub fencing_token: FencingToken,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    /// Time left while held.
    pub remaining_ms: Option<u64>,
    /// An admin asked the holder to let go (see [`Revocation`]); kept after the lease ended.
    pub revocation: Option<Revocation>,
    /// While held: how many requests wait for the name now (queued fair tickets included).
    pub waiters: Option<u64>,
}

/// An admin's request that a lease's holder let go by `deadline` (`lua/revoke.lua`): until
/// then the lease stands and heartbeats extend it no further than the deadline; at the
/// deadline it is evicted unless it ended first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Revocation {
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub by: String,
    #[serde(rename = "at_ms")]
    pub requested_at: Timestamp,
    #[serde(rename = "deadline_ms")]
    pub deadline: Timestamp,
}

impl Revocation {
    /// The record `lua/revoke.lua` stored (JSON text); `None` when there is none or it
    /// cannot be read.
    pub fn from_stored(raw: Option<&str>) -> Option<Self> {
        serde_json::from_str(raw?).ok()
    }
}

/// One holder of a lock.
#[derive(Debug, Clone)]
pub struct HolderView {
    /// The raw Redis field (`<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`).
    pub holder_id: String,
    /// `None` when the holder is not a Leasehold lease (a Redisson client on the same key).
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub reentry_count: u64,
    /// Read/write locks: holds per mode.
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub kind: Option<LeaseKind>,
    pub fencing_token: Option<FencingToken>,
    pub acquired_at: Option<Timestamp>,
}

/// A waiter in a fair lock's queue.
#[derive(Debug, Clone)]
pub struct QueuedView {
    pub position: u64,
    pub holder_id: String,
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub queued_at: Option<Timestamp>,
    /// The waiter leaves the queue unless it tries again before this.
    pub deadline: Option<Timestamp>,
}

/// A lock as anyone may see it.
#[derive(Debug, Clone)]
pub struct LockView {
    pub lock: LockName,
    /// What the name is used as now; `None` when free.
    pub kind: Option<HeldAs>,
    /// Read/write locks: the mode held.
    pub mode: Option<RwMode>,
    pub holders: Vec<HolderView>,
    /// Fair locks: the first waiters in order.
    pub queue: Vec<QueuedView>,
    pub queue_length: u64,
    /// The highest fencing token handed out so far (0 if none).
    pub fencing_counter: FencingToken,
    /// Time left on the lock while held (`None` when free or held without a TTL).
    pub remaining_ms: Option<u64>,
    pub expires_at: Option<Timestamp>,
    /// The lock-delay its holders asked for (the longest, for a read/write lock), or the one
    /// the name is in now; `None`: none.
    pub lock_delay_ms: Option<u64>,
    /// Free, but in its lock-delay: no new lease until then.
    pub delayed_until: Option<Timestamp>,
}

/// A semaphore as anyone may see it.
#[derive(Debug, Clone)]
pub struct SemaphoreView {
    pub name: LockName,
    pub limit: u32,
    pub used: u64,
    pub holders: Vec<PermitHolderView>,
    pub fencing_counter: FencingToken,
}

/// One lease holding permits of a semaphore.
#[derive(Debug, Clone)]
pub struct PermitHolderView {
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub permits: u64,
    pub fencing_token: Option<FencingToken>,
    pub acquired_at: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
}

/// A semaphore's limit, changed by an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub limit: u32,
    pub previous: u32,
    /// Permits free now; below zero while more permits are out than the new limit.
    pub available: i64,
}

/// What an admin force release removed.
#[derive(Debug, Clone)]
pub struct ForcedRelease {
    pub lock: LockName,
    pub removed: Vec<HolderView>,
    /// Nobody held it, and its lock-delay was lifted: the name is free now.
    pub delay_lifted: bool,
}

impl HolderView {
    /// As a viewer whose name patterns `allows` sees it (see `Metadata::seen_by`).
    pub fn seen_by(mut self, allows: &dyn Fn(&str) -> bool) -> Self {
        self.metadata = self.metadata.map(|m| m.seen_by(allows));
        self
    }
}

impl LockView {
    /// As a viewer whose name patterns `allows` sees it: its holders' multileases name only
    /// the locks the viewer may see.
    pub fn seen_by(mut self, allows: &dyn Fn(&str) -> bool) -> Self {
        self.holders = self
            .holders
            .into_iter()
            .map(|h| h.seen_by(allows))
            .collect();
        self
    }
}

impl LeaseView {
    /// As a viewer whose name patterns `allows` sees it (see `LockView::seen_by`).
    pub fn seen_by(mut self, allows: &dyn Fn(&str) -> bool) -> Self {
        self.metadata = self.metadata.map(|m| m.seen_by(allows));
        self
    }
}
