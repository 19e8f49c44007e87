//! Multileases: several locks held as one lease (`/v1/multileases`).

use serde::{Deserialize, Serialize};

use crate::lease::{LeaseId, LeaseState, LockKind};

/// One lock a multilease asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MultiLockBody {
    /// The lock's name (as in `/v1/locks/{name}`).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 200, pattern = "^[A-Za-z0-9._:/-]+$")
    )]
    pub name: String,
    /// reentrant (default), exclusive, fair, read or write (not redlock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<LockKind>,
}

/// `POST /v1/multileases`: the locks to take as one lease, all or nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MultiAcquireBody {
    /// 1 to 16 locks, each named once.
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 16))]
    pub locks: Vec<MultiLockBody>,
    /// Lease TTL in ms, for every member; the server default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Free-text label naming the holder (as for a lease), on every member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub holder: Option<String>,
    /// A small JSON object kept with the multilease and every member: at most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    /// A lock-delay (ms) on every member, as for a lease: should a member's lease end other
    /// than by a release, its lock refuses new leases for that long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
}

/// One member of a granted (or renewed) multilease.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiMemberBody {
    pub lock: String,
    pub kind: String,
    /// The member's own lease on its lock (shown by `/v1/locks/{lock}` as the holder).
    pub lease_id: LeaseId,
    /// This member's fencing token: check it where that lock's resource is written.
    pub fencing_token: u64,
    /// Redis replicas that acknowledged this member's grant; absent when none are required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_acked: Option<u32>,
    /// Present when this member's grant (or renewal) stands on its Redis primary alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<crate::Degraded>,
    /// A heartbeat's answer: an operator asked that this member's lock be let go by its
    /// deadline (as a lease's heartbeat says it); the multilease ends with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation: Option<crate::RevocationBody>,
}

/// A granted multilease (201): every member held.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiGrantBody {
    pub lease_id: LeaseId,
    /// The multilease's bearer token: it proves every member.
    pub token: String,
    /// In the order the request named them.
    pub members: Vec<MultiMemberBody>,
    pub holder: Option<String>,
    pub ttl_ms: u64,
    pub expires_at: String,
    /// The server-side wait this request was allowed, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// A multilease's heartbeat: every member renewed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiRenewalBody {
    pub lease_id: LeaseId,
    pub members: Vec<MultiMemberBody>,
    pub ttl_ms: u64,
    pub expires_at: String,
}

/// `DELETE /v1/multileases/{id}`: every member released.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiReleaseBody {
    pub lease_id: LeaseId,
    pub released: bool,
    /// The locks let go (their waiters are woken).
    pub locks: Vec<String>,
}

/// One member as anyone may see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiMemberView {
    pub lock: String,
    pub kind: String,
    pub lease_id: LeaseId,
}

/// `GET /v1/multileases/{id}`: a multilease as anyone may see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLeaseBody {
    pub lease_id: LeaseId,
    /// held, released, expired or force_released (a member's end is the multilease's).
    pub state: LeaseState,
    pub members: Vec<MultiMemberView>,
    pub holder: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Value>,
    /// The member whose end ended the multilease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_member: Option<String>,
    pub ttl_ms: u64,
    pub remaining_ms: Option<u64>,
    pub acquired_at: String,
    pub expires_at: String,
    pub ended_at: Option<String>,
}

/// A holder (or lease) that is a member of a multilease: which, and its locks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MembershipBody {
    /// The multilease (`/v1/multileases/{lease_id}`).
    pub lease_id: LeaseId,
    /// Every lock it holds, this one among them (those the caller's key may see).
    pub locks: Vec<String>,
    /// Locks it holds whose names the caller's key may not see: counted, not named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden_locks: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
