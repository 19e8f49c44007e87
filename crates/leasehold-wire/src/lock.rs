//! A lock as anyone may see it: its status (holders, fair queue, waiters on any instance),
//! the listing of live names, and fence checks.

use serde::{Deserialize, Serialize};

use crate::{LeaseId, RwMode};

/// `GET /v1/locks/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockBody {
    pub lock: String,
    pub held: bool,
    /// What the name is used as: reentrant, exclusive, fair, rw, semaphore, or foreign (a
    /// Redisson client's lock, or a key another program made); null when free.
    pub kind: Option<String>,
    /// Read/write locks: read or write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<RwMode>,
    pub holders: Vec<HolderBody>,
    /// Fair locks: the first 100 waiters, in order.
    pub queue: Vec<QueuedBody>,
    pub queue_length: u64,
    /// The highest fencing token handed out so far.
    pub fencing_counter: u64,
    pub remaining_ms: Option<u64>,
    pub expires_at: Option<String>,
    /// When the oldest current hold began (the lock has been held without a gap since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<String>,
    /// How long ago that was, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for_ms: Option<u64>,
    /// Requests waiting for the lock on any instance (fair tickets are in `queue`), oldest
    /// first: the first 100.
    #[serde(default)]
    pub waiting: Vec<WaiterBody>,
    /// How many requests wait (fair tickets aside).
    #[serde(default)]
    pub waiting_count: u64,
    /// The lock-delay (ms) its holder asked for (a read/write lock's: the longest), or the
    /// one the name is in now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// Nobody holds the lock, but its last lease ended without a release (it expired, or an
    /// admin removed it) and asked for a lock-delay: no new lease until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed_until: Option<String>,
}

/// A request waiting server-side for a lock or permits, on some instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaiterBody {
    /// The lease it will be if granted (a reentry: the lease it re-enters).
    pub lease_id: String,
    /// The holder label it asked with.
    pub holder: Option<String>,
    /// What it wants: reentrant, exclusive, read, write or semaphore; null for a reentry.
    pub kind: Option<String>,
    /// Semaphores: the permits it wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// When it began to wait.
    pub waiting_since: String,
    /// The Leasehold instance it waits on (`host:pid`).
    pub instance: String,
}

/// One holder of a lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HolderBody {
    /// `None` for a holder that is not a Leasehold lease (a Redisson client on the same key).
    pub lease_id: Option<LeaseId>,
    /// The Redis hash field: `<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`.
    pub holder_id: String,
    pub holder: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    pub reentry_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub fencing_token: Option<u64>,
    pub acquired_at: Option<String>,
    /// The multilease this holder's lease is a member of, with all its locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multilease: Option<crate::MembershipBody>,
}

/// One waiter in a fair lock's queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuedBody {
    pub position: u64,
    /// The ticket's id, also the id of the lease it turns into; null for a Redisson waiter.
    pub ticket_id: Option<LeaseId>,
    pub holder_id: String,
    pub holder: Option<String>,
    pub waiting_since: Option<String>,
    /// Leaves the queue unless it tries again before this.
    pub deadline: Option<String>,
}

/// `GET /v1/locks[?prefix=..][&cursor=..][&limit=..]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only locks and semaphores whose name starts with this.
    #[serde(default)]
    pub prefix: String,
    /// Where to go on from: a page's `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// About how many names a page holds (1 to 1000, default 100); a page may hold a few
    /// more, or fewer with a `next_cursor` still to follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A page of the live locks and semaphores, sorted by name within the page.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListBody {
    pub locks: Vec<LiveBody>,
    /// Pass as `cursor` for the next page; null after the last page.
    pub next_cursor: Option<String>,
}

/// One live lock (held, or waited for) or semaphore (permits out), in brief.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveBody {
    pub name: String,
    /// reentrant, exclusive, fair, rw, semaphore or foreign.
    pub kind: Option<String>,
    /// Leases holding it (a semaphore: leases holding permits).
    pub holders: u64,
    /// The first holder's label (or its lease id, or a Redisson client's holder id).
    pub holder: Option<String>,
    /// Fair locks: waiters in the queue.
    pub queue_length: u64,
    /// Semaphores: permits in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    /// Semaphores: permits in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Time left on the lock (a semaphore: on the permit that runs out last).
    pub remaining_ms: Option<u64>,
    /// How long the oldest current hold has lasted, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for_ms: Option<u64>,
    /// Requests waiting on any instance besides the fair queue (`queue_length`).
    #[serde(default)]
    pub waiting: u64,
}

/// `POST /v1/locks/{name}/fence/check`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FenceCheckBody {
    /// The fencing token a writer presents (required).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub fencing_token: Option<u64>,
}

/// Whether a fencing token is the current holder's. Stale the moment it is sent: the lease
/// can end right after.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FenceCheckReply {
    pub lock: String,
    pub fencing_token: u64,
    /// True when a lease holding the lock now carries this token.
    pub current: bool,
    /// The highest fencing token handed out so far on this lock.
    pub fencing_counter: u64,
}
