//! The messages of the two event streams: a lease watch's `lost`, and `GET /v1/events`.

use serde::{Deserialize, Serialize};

use crate::LeaseId;

/// The data of a lease watch's last message, `event: lost`: the lease no longer holds its
/// lock. A watch also ends with it after the holder's own release (`reason: released`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LostEvent {
    pub lease_id: LeaseId,
    pub lock: String,
    /// released, expired, force_released, revoked (an admin asked the holder to let go and
    /// the grace ended first) or left; later servers may add others: every reason means the
    /// lease is gone.
    pub reason: String,
    /// When it ended (RFC 3339), when known.
    pub ended_at: Option<String>,
}

/// The data of one `GET /v1/events` message: one lock event as JSON. Its `id:` is
/// `event_id`; fields beyond these depend on the event's type (`reentry_count`,
/// `fencing_token`, `by`, `reason`, `lease_ids`, ...). An `event: resync` message (data
/// `resync`) means events may have been missed: re-read what you show.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockEventMessage {
    /// acquired, reentered, renewed, released, expired, force_released, evicted, queued,
    /// granted, left, limit_changed.
    #[serde(rename = "type")]
    pub kind: String,
    /// The lock (or semaphore) name.
    pub lock: String,
    /// When, by Redis's clock (ms since the Unix epoch).
    pub at_ms: u64,
    /// `<journal entry>.<index>`: resume after it with `Last-Event-ID`.
    pub event_id: Option<String>,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
}

/// The data of a lease watch's messages before `lost` (each names its `event:`; each has an
/// `id:` to resume from with `Last-Event-ID`). Only the fields of its event are present.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WatchSignal {
    pub lease_id: LeaseId,
    pub lock: String,
    /// `expiring`: how much time the lease has left, with no heartbeat since the slack began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    /// `expiring`, `renewed`, `degraded`, `recovered`: the lease holds until then at most
    /// (RFC 3339), as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// `degraded`: since when the serving instance cannot reach Redis (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `contended`: how many requests wait for the name now (0: nobody any more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters: Option<u64>,
    /// `revocation_requested`: why, who asked, and by when the lease must be released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation: Option<RevocationBody>,
}

/// An admin's request that a lease's holder let go (`POST /v1/admin/.../revoke`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevocationBody {
    pub reason: String,
    /// Who asked (the admin's principal).
    pub requested_by: String,
    /// RFC 3339.
    pub requested_at: String,
    /// RFC 3339: release before this; then the lease is force-released (reason `revoked`).
    pub deadline: String,
}
