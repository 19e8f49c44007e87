//! Leases: their id, the kinds of lock they take and the states they end in, and the bodies
//! of taking one (a grant, or a fair lock's ticket), renewing, releasing and inspecting it.

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
    /// RedLock: a reentrant lock taken on a majority of the independent Redis masters the
    /// server was started with (`--redlock-nodes`); 422 redlock_disabled without them.
    Redlock,
}

/// Who goes first on a read/write lock when a writer waits.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RwPolicy {
    /// Redisson's: a reader joins readers already holding, even past a waiting writer.
    #[default]
    ReadersFirst,
    /// Curator's: a reader arriving after a waiting writer waits behind it.
    Fifo,
}

/// Which hold of a read/write lease a release gives back.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RwMode {
    Read,
    Write,
}

// The names of the two read/write enums, as serde writes them: the server's lock domain uses
// these enums too (one enum per concept), and hands the names to its Lua functions.
impl RwPolicy {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl RwMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }
}

/// Why a grant or heartbeat stands on its Redis primary alone (with replicas, a failover
/// could lose it: see the Redis modes' table of what a failover costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Degraded {
    /// The lock's shard has no replica a failover could promote (`--min-replica-acks auto`):
    /// no failover can lose the grant, but a crash of the primary without persistence can.
    NoReplica,
    /// A heartbeat too few replicas acknowledged in time: extended on the primary, where
    /// the lease stands; a failover now keeps it only until the `expires_at` of the last
    /// answer without this mark.
    NotReplicated,
    /// A reason this client does not know (a newer server). Never sent.
    #[serde(other)]
    Unknown,
}

/// How a lease ended, or that it still holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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

    /// Its name on the wire (`force_released`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        self.into()
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
    /// 200 characters: letters, marks, digits, punctuation, symbols and spaces (Unicode L,
    /// M, N, P, S, Zs), nothing default-ignorable (zero-width, variation, tag characters);
    /// the pattern lists the characters it can, the server checks the categories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1F\\x7F-\\x9F\u{00AD}\u{061C}\u{180E}\u{200B}-\u{200F}\u{202A}-\u{202E}\u{2060}-\u{2064}\u{2066}-\u{2069}\u{FEFF}\u{2028}\u{2029}\u{034F}\u{115F}\u{1160}\u{3164}\u{FFA0}\u{FE00}-\u{FE0F}]*$"
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
    /// Lock-delay in ms (Chubby's, Consul's; default 0, at most the server's
    /// `--max-lock-delay-ms`, 60 s by default): should this lease end other than by a release
    /// (its TTL runs out, an admin force-releases or evicts it), the name refuses new leases
    /// for that long (409 `lock_delay`), so a paused holder that wakes up and writes finds
    /// nobody else writing yet. A release frees the name at once. A reentry keeps the lease's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
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
    /// Redis replicas that acknowledged the grant before it was answered (`WAIT`); absent
    /// when the server requires none (`--min-replica-acks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_acked: Option<u32>,
    /// Present when the grant stands on its Redis primary alone (see `Degraded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<Degraded>,
    /// RedLock grants: the nodes that granted it (a majority of `--redlock-nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_acked: Option<u32>,
    /// RedLock grants: how long the lease is safe to rely on, in ms: the TTL less the time
    /// the grant took and the clock drift allowance (0.01 x TTL + 2 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
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
    /// Who holds the lock now (its label; absent while the lock is free or unlabelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// How long the lease holding the lock now has held it, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for_ms: Option<u64>,
    /// How long until the ticket's turn, in ms, estimated from the lock's recent hold times:
    /// what the current hold has left plus a typical hold for each ticket ahead (absent with
    /// fewer than 3 holds to go by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_wait_ms: Option<u64>,
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
    /// Redis replicas that acknowledged the extension before it was answered; absent when
    /// the server requires none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_acked: Option<u32>,
    /// Present when the extension stands on the Redis primary alone (see `Degraded`): a
    /// heartbeat is answered even when too few replicas acknowledged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<Degraded>,
    /// RedLock leases: the nodes that extended it (a majority of `--redlock-nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_acked: Option<u32>,
    /// RedLock leases: how long the extension is safe to rely on, in ms (see `GrantBody`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
    /// An admin asked the holder to let go: release before `deadline`. The lease was
    /// extended no further than it (`ttl_ms` says how far); then it is force-released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation: Option<crate::RevocationBody>,
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
    /// The multilease this lease is a member of, with all its locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multilease: Option<crate::MembershipBody>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_states_are_named_as_serde_writes_them() {
        let names = LeaseState::SENT
            .into_iter()
            .chain([LeaseState::Unknown])
            .map(|state| {
                let json = serde_json::to_value(state).expect("json");
                assert_eq!(json, state.as_str(), "{state:?}");
                state.as_str()
            })
            .collect::<Vec<_>>();
        assert_eq!(
            names,
            [
                "held",
                "queued",
                "released",
                "expired",
                "force_released",
                "left",
                "unknown"
            ]
        );
    }
}
