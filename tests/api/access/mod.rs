//! API keys and tenants: anonymous callers only while that is safe, tenants that never see
//! each other's locks (API, events, dashboard), revocation and rotation seen by every
//! instance, name patterns, tenant admins, and the audit log of admin actions.

mod admin;
mod keys;
mod tenants;

use serde_json::json;

use crate::helpers::TestApp;

/// A key of `tenant` with `roles` (every name).
async fn key(
    app: &TestApp,
    name: &str,
    tenant: &str,
    roles: serde_json::Value,
) -> (String, String) {
    app.create_key(json!({"name": name, "tenant": tenant, "roles": roles}))
        .await
}
