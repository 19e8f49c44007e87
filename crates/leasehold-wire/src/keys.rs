//! API keys as the admin API creates, lists, rotates and revokes them.

use serde::{Deserialize, Serialize};

/// A role an API key holds.
// (This doc is the OpenAPI description; `FromStr` parses a role's wire name, as `--role`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::EnumString)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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
    /// Bytes of Redis state its leases, names and histories may keep, estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_state_bytes: Option<u64>,
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
    /// A revocation's answer: the key's live leases it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_leases: Option<u64>,
}

/// `GET /v1/admin/keys/{key_id}/leases`: what a key holds now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyLeasesBody {
    pub key_id: String,
    /// "" for the default tenant: the names are in that tenant's key space.
    pub tenant: String,
    pub leases: Vec<KeyLeaseBody>,
}

/// One live lease (or fair ticket) of a key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyLeaseBody {
    pub lock: String,
    pub lease_id: crate::LeaseId,
    /// Until when it counts against the key's quota, unless renewed.
    pub counts_until: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_roles_parse_from_their_wire_names_only() {
        for role in [KeyRole::Client, KeyRole::Reader, KeyRole::Admin] {
            let json = serde_json::to_value(role).expect("json");
            let name = json.as_str().expect("a string");
            assert_eq!(name.parse::<KeyRole>(), Ok(role));
        }
        assert!("Admin".parse::<KeyRole>().is_err());
        assert!("owner".parse::<KeyRole>().is_err());
    }
}
