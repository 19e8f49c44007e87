//! The messages of the two event streams: a lease watch's `lost`, and `GET /v1/events`.

use serde::{Deserialize, Serialize};

use crate::LeaseId;

/// The data of a lease watch's one `event: lost` message (the stream's only message besides
/// keep-alive comments, every 15 s): the lease no longer holds its lock. A watch also ends
/// with it after the holder's own release (`reason: released`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LostEvent {
    pub lease_id: LeaseId,
    pub lock: String,
    /// released, expired, force_released or left (later servers may add others, like
    /// evicted: every reason means the lease is gone).
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
