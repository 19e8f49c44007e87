//! Semaphores: taking permits, and a semaphore's status.

use serde::{Deserialize, Serialize};

use crate::{LeaseId, WaiterBody};

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
    /// Free-text label naming the holder: 1 to 200 characters, as a lock lease's holder
    /// (letters, marks, digits, punctuation, symbols and spaces; nothing default-ignorable).
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
