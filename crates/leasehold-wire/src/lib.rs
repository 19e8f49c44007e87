//! The `/v1` wire format of Leasehold: every request and response body, as both the server and
//! the Rust client ([`leasehold-client`](../leasehold_client/index.html), hence the CLI) use
//! them, so the two cannot drift apart. Only serde here; with the `openapi` feature, the
//! OpenAPI schema too (the server's document is made from it). The server maps its domain
//! views into these types.
//!
//! Bodies the server sends are also read by the client: fields a newer server adds are
//! ignored, and enums the client does not know read as `Unknown` where that can happen.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A lease's id as the server issues it: a UUID (version 8, made from the SHA-256 of the lease's
/// token). Not a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
pub struct LeaseId(pub Uuid);

impl std::str::FromStr for LeaseId {
    type Err = uuid::Error;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        raw.parse().map(Self)
    }
}

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The kinds of lock a client may ask for (`kind` of an acquire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    /// Redisson RLock: the same lease may enter again and again (the default).
    Reentrant,
    /// Not reentrant: the holder's own second acquire gets 409 not_reentrant (Curator's
    /// InterProcessSemaphoreMutex).
    Exclusive,
    /// Strict FIFO among live waiters (Redisson RFairLock, Curator InterProcessMutex).
    Fair,
    /// The shared side of a read/write lock (Redisson RReadWriteLock).
    Read,
    /// The exclusive side of a read/write lock.
    Write,
}

/// Who goes first on a read/write lock when a writer waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RwPolicy {
    /// Redisson's: a reader joins readers already holding, even past a waiting writer.
    #[default]
    ReadersFirst,
    /// Curator's: a reader arriving after a waiting writer waits behind it.
    Fifo,
}

/// Which hold of a read/write lease a release gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RwMode {
    Read,
    Write,
}

/// How a lease ended, or that it still holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    Held,
    /// A fair-queue ticket still waiting.
    Queued,
    Released,
    Expired,
    ForceReleased,
    /// A fair-queue ticket whose waiter gave up.
    Left,
    /// A state this client does not know (a newer server); not taken as an end. Never sent.
    #[serde(other)]
    Unknown,
}

impl LeaseState {
    /// Every state a server sends.
    pub const SENT: [Self; 6] = [
        Self::Held,
        Self::Queued,
        Self::Released,
        Self::Expired,
        Self::ForceReleased,
        Self::Left,
    ];

    /// The lease no longer holds its lock (or the ticket its place).
    pub fn has_ended(self) -> bool {
        matches!(
            self,
            Self::Released | Self::Expired | Self::ForceReleased | Self::Left
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Queued => "queued",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::ForceReleased => "force_released",
            Self::Left => "left",
            Self::Unknown => "unknown",
        }
    }
}

// The schema lists what a server sends (not `Unknown`, the client's fallback).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for LeaseState {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("How a lease ended, or that it still holds its lock"))
            .enum_values(Some(Self::SENT.map(Self::as_str)))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for LeaseState {}

/// `POST /v1/locks/{name}/leases`. Every field is optional; an empty body is fine.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// Lease TTL in ms; the server default when absent (on reentry: the lease's TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Free-text label naming the holder, shown to operators and to refused acquirers: 1 to
    /// 200 characters, no control, invisible or direction-changing characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1F\\x7F-\\x9F\u{00AD}\u{061C}\u{180E}\u{200B}-\u{200F}\u{202A}-\u{202E}\u{2060}-\u{2064}\u{2066}-\u{2069}\u{FEFF}]*$"
        )
    )]
    pub holder: Option<String>,
    /// A small JSON object kept with the lease: at most 4096 bytes as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    /// reentrant (default), exclusive, fair, read or write; on reentry, the lease's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<LockKind>,
    /// For read/write locks: readers_first (default, Redisson) or fifo (Curator).
    #[serde(default, skip_serializing_if = "is_default")]
    pub policy: RwPolicy,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The wait of an acquire or a ticket poll.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// How long to wait server-side while the lock is held, in ms (default 0).
    #[serde(default)]
    pub wait_ms: u64,
}

/// `POST /v1/semaphores/{name}/leases`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PermitBody {
    /// How many permits the semaphore has; every party must name the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Permits this lease takes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Lease TTL in ms; the server default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Free-text label naming the holder: 1 to 200 characters, no control, invisible or
    /// direction-changing characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1F\\x7F-\\x9F\u{00AD}\u{061C}\u{180E}\u{200B}-\u{200F}\u{202A}-\u{202E}\u{2060}-\u{2064}\u{2066}-\u{2069}\u{FEFF}]*$"
        )
    )]
    pub holder: Option<String>,
    /// A small JSON object kept with the lease: at most 4096 bytes as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
}

/// A heartbeat's optional body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// A new TTL in ms, kept for later heartbeats; the lease's own TTL when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// `DELETE /v1/locks/{name}/leases/{lease_id}`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ReleaseQuery {
    /// Release every reentry level at once (of both modes, for a read/write lease).
    #[serde(default)]
    pub all: bool,
    /// Read/write leases: the hold to release (default: write if held, else read).
    #[cfg_attr(feature = "openapi", param(inline))]
    pub mode: Option<RwMode>,
}

/// A grant: a new lease (201) or one more level of one (200).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantBody {
    pub lease_id: LeaseId,
    /// The lease's bearer token: only in the 201 of a new lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub lock: String,
    /// reentrant, exclusive, fair, read, write or semaphore.
    pub kind: String,
    pub holder: Option<String>,
    pub fencing_token: u64,
    pub reentry_count: u64,
    /// Semaphore leases: the permits held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    pub ttl_ms: u64,
    pub expires_at: String,
    /// Acquire answers: the server-side wait this request was allowed, in ms: the `wait_ms`
    /// asked for, cut to the server's `--max-wait-ms` (also in the `Leasehold-Wait-Ms`
    /// header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// A fair lock's ticket (202): a place in its queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TicketBody {
    pub ticket_id: LeaseId,
    /// Proves the ticket and, once granted, the lease: only when the ticket is issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub lock: String,
    /// 1 = next in line.
    pub position: u64,
    /// Poll (POST the Location, with the token) before this or lose the place.
    pub poll_by: String,
    pub poll_timeout_ms: u64,
    /// The server-side wait this request was allowed, in ms (`wait_ms` cut to the server's
    /// `--max-wait-ms`; also in the `Leasehold-Wait-Ms` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `DELETE` on a ticket: it left the queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeftBody {
    pub ticket_id: LeaseId,
    pub lock: String,
    pub left: bool,
}

/// A successful heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewalBody {
    pub lease_id: LeaseId,
    pub lock: String,
    pub fencing_token: u64,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub expires_at: String,
}

/// A release: `released` is true when this lease holds nothing any more (no level left; the
/// lock may still be held by other leases, as another reader of a read/write lock).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseBody {
    pub lease_id: LeaseId,
    pub lock: String,
    pub released: bool,
    pub reentry_count: u64,
}

/// A lease as anyone may see it (never its token).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseBody {
    pub lease_id: LeaseId,
    pub lock: String,
    pub state: LeaseState,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_count: Option<u64>,
    /// Fair tickets: place in the queue (1 = next).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Semaphore leases: permits held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    pub holder: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    pub fencing_token: u64,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub remaining_ms: Option<u64>,
    pub acquired_at: String,
    pub expires_at: String,
    pub ended_at: Option<String>,
}

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

/// `GET /v1/semaphores/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreBody {
    pub semaphore: String,
    pub limit: u32,
    pub used: u64,
    pub available: u64,
    pub fencing_counter: u64,
    pub holders: Vec<PermitHolderBody>,
    /// Requests waiting for permits on any instance, oldest first: the first 100.
    #[serde(default)]
    pub waiting: Vec<WaiterBody>,
    /// How many requests wait.
    #[serde(default)]
    pub waiting_count: u64,
}

/// A lease holding permits (or, with no `lease_id`, the permits Redisson clients hold).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermitHolderBody {
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    pub permits: u64,
    pub fencing_token: Option<u64>,
    pub acquired_at: Option<String>,
    pub expires_at: Option<String>,
}

/// What an admin force release removed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForceReleaseBody {
    pub lock: String,
    /// False when nobody held it.
    pub released: bool,
    pub removed: Vec<HolderBody>,
}

/// `PUT /v1/admin/semaphores/{name}/limit`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LimitBody {
    /// The semaphore's new size.
    pub limit: u32,
}

/// A semaphore's limit, changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LimitChangeBody {
    pub semaphore: String,
    pub limit: u32,
    pub previous: u32,
    /// Permits free now; below zero while more are out than the new limit.
    pub available: i64,
}

/// A role an API key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyRole {
    /// Take, renew and release leases; poll and leave fair tickets.
    Client,
    /// Inspect locks, semaphores and leases; the event stream, the dashboard, /metrics.
    Reader,
    /// Force releases, semaphore limits, API keys, the audit log.
    Admin,
}

/// A key's own bounds; absent fields take the server's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyQuotasBody {
    /// Live leases (and fair tickets) at once, across every instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_leases: Option<u64>,
    /// Requests waiting server-side at once, across every instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_waiters: Option<u64>,
    /// Distinct lock and semaphore names given Redis state (each counts until its lease
    /// ended and its history, about an hour later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_names: Option<u64>,
    /// Longest TTL a lease may ask for, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ttl_ms: Option<u64>,
    /// Most permits one semaphore lease may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_permits: Option<u32>,
}

/// `POST /v1/admin/keys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyCreateBody {
    /// Unique within its tenant; audit entries and histories name the key by it: 1 to 100
    /// printable ASCII characters (spaces around it are dropped).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 100, pattern = "^[ -~]*[!-~][ -~]*$")
    )]
    pub name: String,
    /// The key space the key acts in; "" (the default) for the default tenant: up to 64
    /// ASCII letters, digits and . _ - :
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = "^[A-Za-z0-9._:-]*$")
    )]
    pub tenant: String,
    /// What the key may do; `["client"]` when absent.
    #[serde(default)]
    pub roles: Vec<KeyRole>,
    /// Names the key may use (globs, `*` for any run of characters); `["*"]` when absent. At
    /// most 100.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<NamePattern>, max_items = 100))]
    pub patterns: Vec<String>,
    #[serde(default)]
    pub quotas: KeyQuotasBody,
}

/// A lock or semaphore name, or a glob of them (`*` for any run of characters).
// (The document's name for a pattern's shape; patterns travel as plain strings.)
#[derive()]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._:*-]{1,200}$"))]
pub struct NamePattern(pub String);

/// An API key, never with its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyBody {
    pub id: String,
    pub name: String,
    /// "" for the default tenant.
    pub tenant: String,
    pub roles: Vec<KeyRole>,
    pub patterns: Vec<String>,
    pub quotas: KeyQuotasBody,
    pub created_at: String,
    /// Who created it (a key's name, or `admin token`).
    pub created_by: String,
    /// While a rotation's grace runs: when the previous secret stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotating_until: Option<String>,
}

/// A new key or a rotated one: the secret is shown here only.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeySecretBody {
    pub key: KeyBody,
    /// Send it in the `Leasehold-Key` header. Shown only in this answer.
    pub secret: String,
}

/// `GET /v1/admin/keys`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyListBody {
    pub keys: Vec<KeyBody>,
}

/// `POST /v1/admin/keys/{id}/rotate`; an empty body is fine.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyRotateBody {
    /// How long the current secret keeps working beside the new one, in ms (default one
    /// hour; 0: it stops now; at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 2_592_000_000_u64))]
    pub grace_ms: Option<u64>,
}

/// One admin action.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntryBody {
    pub at: String,
    /// An API key's name, `admin token`, or `dashboard admin`.
    pub by: String,
    /// `force_release`, `force_release_semaphore`, `semaphore_limit`, `key_created`,
    /// `key_rotated`, `key_revoked`.
    pub action: String,
    /// "" for the default tenant.
    pub tenant: String,
    /// The lock, semaphore or key acted on.
    pub target: String,
    pub reason: String,
    /// What it removed or changed.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub details: serde_json::Value,
}

/// `GET /v1/admin/audit`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditBody {
    /// Newest first.
    pub entries: Vec<AuditEntryBody>,
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
