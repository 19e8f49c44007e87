//! The JSON each script returns, as typed values. Scripts answer in JSON (cjson) because their
//! replies have several shapes; one `status` tag tells them apart.

use serde::{Deserialize, Deserializer};

use super::error::LockError;
use super::model::LeaseState;

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum AcquireReply {
    Acquired(Granted),
    Reentered(Granted),
    Held {
        pttl: i64,
        holder_id: Option<String>,
        lease_id: Option<String>,
        holder: Option<String>,
        arrived_ms: Option<u64>,
    },
    Queued {
        lease_id: String,
        position: u64,
        pttl: i64,
        deadline_ms: u64,
        /// A retried Idempotency-Key's first ticket: its token, sealed under the key.
        sealed: Option<String>,
    },
    UnknownToken,
    TicketToken,
    TicketExpired,
    KindConflict {
        held_as: String,
    },
    NotReentrant,
    UpgradeRefused,
    LimitMismatch {
        limit: u32,
    },
    IdempotencyMismatch,
    #[serde(untagged)]
    Refused(Refusal),
}

#[derive(Debug, Deserialize)]
pub(crate) struct Granted {
    /// Answered before (a re-polled ticket, a retried Idempotency-Key).
    #[serde(default)]
    pub replayed: bool,
    /// A retried Idempotency-Key's first token, sealed under the key.
    pub sealed: Option<String>,
    /// When the lease expires, for a grant answered again (else now + ttl).
    pub expires_ms: Option<u64>,
    pub lease_id: String,
    pub holder: Option<String>,
    pub kind: String,
    pub reentry_count: u64,
    pub fencing_token: u64,
    pub ttl_ms: u64,
    pub now_ms: u64,
    pub created_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum RenewReply {
    Renewed {
        reentry_count: u64,
        ttl_ms: u64,
        now_ms: u64,
        fencing_token: u64,
        slack_ms: i64,
    },
    #[serde(untagged)]
    Refused(Refusal),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum ReleaseReply {
    Released {
        /// The lease's age at release (for the hold-time metric).
        held_ms: Option<u64>,
        kind: Option<String>,
    },
    StillHeld {
        reentry_count: u64,
    },
    /// A rollback found the grant delivered by another request: it stays.
    NotRolledBack,
    IdempotencyMismatch,
    #[serde(untagged)]
    Refused(Refusal),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum LeaveReply {
    Left,
    NotQueued {
        state: Option<LeaseState>,
    },
    #[serde(untagged)]
    Refused(Refusal),
}

/// Why a script refused to touch a lease on behalf of a token.
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Refusal {
    UnknownLease,
    Forbidden,
    LeaseLost {
        state: Option<LeaseState>,
    },
    /// The token is a fair ticket's that has not been granted yet.
    Queued,
    /// The script ran after its deadline and changed nothing.
    TooLate,
    ModeNotHeld {
        mode: String,
    },
}

impl From<Refusal> for LockError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::UnknownLease => LockError::UnknownLease,
            Refusal::Forbidden => LockError::TokenMismatch,
            Refusal::LeaseLost { state } => lost(state),
            Refusal::Queued => LockError::TicketPending,
            Refusal::TooLate => LockError::TooLate,
            Refusal::ModeNotHeld { mode } => LockError::ModeNotHeld(mode),
        }
    }
}

/// A lease that no longer holds its lock; a record still saying "held" means it ran out.
pub(crate) fn lost(state: Option<LeaseState>) -> LockError {
    match state {
        None | Some(LeaseState::Held | LeaseState::Queued) => {
            LockError::LeaseLost(LeaseState::Expired)
        }
        Some(s) => LockError::LeaseLost(s),
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum ForceReleaseReply {
    ForceReleased {
        #[serde(deserialize_with = "list")]
        holders: Vec<HolderEntry>,
    },
    NotHeld,
    KindConflict {
        held_as: String,
    },
    TooLate,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum LimitReply {
    Changed {
        limit: u32,
        previous: u32,
        available: i64,
    },
    NotFound,
    KindConflict {
        held_as: String,
    },
    TooLate,
}

#[derive(Debug, Deserialize)]
pub(crate) struct HolderEntry {
    pub holder_id: String,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    #[serde(default)]
    pub reentry_count: u64,
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub kind: Option<String>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    pub created_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct QueueEntry {
    pub holder_id: String,
    pub deadline_ms: Option<u64>,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    pub queued_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LockSnapshot {
    pub known: bool,
    pub held_as: Option<String>,
    pub mode: Option<String>,
    pub fence: u64,
    pub pttl: i64,
    #[serde(deserialize_with = "list")]
    pub holders: Vec<HolderEntry>,
    #[serde(deserialize_with = "list")]
    pub queue: Vec<QueueEntry>,
    pub queue_length: u64,
    pub now_ms: u64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LeaseSnapshot {
    pub found: bool,
    pub state: Option<LeaseState>,
    pub kind: Option<String>,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    #[serde(default)]
    pub reentry_count: u64,
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub position: Option<u64>,
    #[serde(default)]
    pub pttl: i64,
    #[serde(default)]
    pub now_ms: u64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SemaphoreSnapshot {
    pub known: bool,
    pub limit: Option<u32>,
    pub used: u64,
    pub fence: u64,
    #[serde(deserialize_with = "list")]
    pub holders: Vec<PermitEntry>,
    pub now_ms: u64,
    pub lease: Option<PermitLease>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PermitEntry {
    /// `None` for the permits Redisson clients hold.
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub permits: u64,
    pub fencing_token: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PermitLease {
    pub state: LeaseState,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub permits: Option<u64>,
}

/// Lua's cjson writes an empty table as `{}`; read that as an empty list.
fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrEmpty<T> {
        List(Vec<T>),
        Empty {},
    }
    Ok(match ListOrEmpty::deserialize(d)? {
        ListOrEmpty::List(v) => v,
        ListOrEmpty::Empty {} => Vec::new(),
    })
}

/// Parses a script's JSON reply.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(raw: &str) -> Result<T, LockError> {
    serde_json::from_str(raw).map_err(|e| LockError::BadReply(format!("{e}: {raw}")))
}

/// Empty strings are how scripts store "none".
pub(crate) fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}
