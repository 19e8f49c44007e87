//! What admins do to locks and semaphores (force release, a semaphore's limit) and the audit
//! log that records it.

use serde::{Deserialize, Serialize};

use crate::HolderBody;

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
