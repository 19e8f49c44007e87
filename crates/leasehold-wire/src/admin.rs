//! What admins do to locks and semaphores (force release, a semaphore's limit) and the audit
//! log that records it.

use serde::{Deserialize, Serialize};

use crate::{HolderBody, LeaseId, RevocationBody};

/// What an admin force release removed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForceReleaseBody {
    pub lock: String,
    /// False when nobody held it (and it was in no lock-delay).
    pub released: bool,
    pub removed: Vec<HolderBody>,
    /// Nobody held it and it was in its lock-delay: the delay was lifted, the name is free.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delay_lifted: bool,
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

/// `POST /v1/admin/{locks|semaphores|elections}/{name}/revoke`: ask the holder(s) to let go.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// How long the holder has to release (ms, at most an hour); then the lease is
    /// force-released (with its lock-delay, if it asked for one) and its holder told `lost`
    /// with reason `revoked`.
    #[cfg_attr(feature = "openapi", schema(maximum = 3_600_000))]
    pub grace_ms: u64,
    /// Why: told to the holder, and kept in the history and the audit log. One line: no
    /// control character once trimmed (422 `invalid_body`), at most `--max-reason-chars`
    /// characters (500 by default; 422 `reason_too_long`); the served document gives both.
    #[serde(default)]
    pub reason: String,
    /// Only this lease (default: every lease holding the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<LeaseId>,
}

/// What a revocation asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokedBody {
    pub lock: String,
    pub leases: Vec<RevokedLeaseBody>,
}

/// One lease asked to let go.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokedLeaseBody {
    pub lease_id: LeaseId,
    pub holder: Option<String>,
    pub fencing_token: Option<u64>,
    pub revocation: RevocationBody,
    /// It was asked already: the earlier deadline and reason stand (a revocation is never
    /// put off).
    pub again: bool,
}
