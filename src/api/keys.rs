//! `/v1/admin/keys` and `/v1/admin/audit`: API keys (created, listed, rotated, revoked) and
//! the audit log. The admin token manages every tenant's keys; an admin key, its own tenant's.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::extract::{JsonBody, Path, Query};
use crate::audit::AuditEntry;
use crate::auth::keys::{KeyQuotas, KeyRecord, KeySecret, NewKey};
use crate::auth::{AdminRole, Caller, KeyError, NamePatterns, Principal, Role, Who};
use crate::locks::{Timestamp, wall_ms};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::tenant::Tenant;
use crate::wire::{
    AuditBody, AuditEntryBody, KeyBody, KeyCreateBody, KeyListBody, KeyQuotasBody, KeyRole,
    KeyRotateBody, KeySecretBody,
};

/// How long a rotated-out secret keeps working when the request names no grace.
const DEFAULT_GRACE: Duration = Duration::from_secs(3600);
/// The longest grace a rotation may give.
const MAX_GRACE: Duration = Duration::from_secs(30 * 24 * 3600);

#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    operation_id = "createKey",
    tag = "admin",
    request_body(content = KeyCreateBody, content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 201, description = "The new key and its secret (shown only here)", body = KeySecretBody, headers(("Location" = String, description = "The key's URL"))),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled; tenant_not_allowed: an admin key makes keys of its own tenant only", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "key_name_taken: a key of that name exists in the tenant", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_body: a bad name, tenant, pattern or quota", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/admin/keys`: a new API key; its secret is in this answer only.
pub async fn create(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<KeyCreateBody>,
) -> Result<Response, Problem> {
    let tenant = if body.tenant.is_empty() {
        caller.tenant.clone()
    } else {
        Tenant::parse(&body.tenant).map_err(|e| invalid(e.to_string()))?
    };
    if !may_manage(&caller, &tenant) {
        return Err(Problem::new(
            ProblemKind::TenantNotAllowed,
            format!(
                "this admin key manages tenant {}'s keys only",
                caller.tenant
            ),
        ));
    }
    let patterns = if body.patterns.is_empty() {
        NamePatterns::all()
    } else {
        NamePatterns::parse(&body.patterns).map_err(|e| invalid(e.to_string()))?
    };
    let roles = if body.roles.is_empty() {
        vec![Role::Client]
    } else {
        body.roles.iter().copied().map(role).collect()
    };
    let q = body.quotas;
    // A key that may wait for nothing is fine; one that may hold nothing is a mistake.
    if q.max_leases == Some(0)
        || q.max_permits == Some(0)
        || q.max_names == Some(0)
        || q.max_state_bytes == Some(0)
    {
        return Err(invalid(
            "max_leases, max_names, max_state_bytes and max_permits must be at least 1".into(),
        ));
    }
    if let Some(ttl) = q.max_ttl_ms {
        state.limits.ttl.parse(ttl)?;
    }
    within_ceilings(&state, &caller, &q)?;
    let new = NewKey {
        name: body.name,
        tenant,
        roles,
        patterns,
        quotas: KeyQuotas {
            leases: q.max_leases,
            waiters: q.max_waiters,
            names: q.max_names,
            state_bytes: q.max_state_bytes,
            max_ttl_ms: q.max_ttl_ms,
            max_permits: q.max_permits,
        },
    };
    // The operator's token makes keys in any number; an admin key, within its tenant's cap.
    let cap = if caller.who == Who::AdminToken {
        u64::MAX
    } else {
        state.access.tenant_caps.keys
    };
    let (record, secret) = state
        .access
        .keys
        .create_within(new, &caller.label(), cap)
        .await
        .map_err(key_problem)?;
    audit_in(
        &state,
        &caller,
        &record.tenant,
        "key_created",
        &record.name,
        "",
        json!({"id": record.id, "tenant": record.tenant, "roles": record.roles, "patterns": record.patterns}),
    )
    .await;
    let location = format!("/v1/admin/keys/{}", record.id);
    let mut response = (StatusCode::CREATED, Json(secret_body(&record, &secret))).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    operation_id = "listKeys",
    tag = "admin",
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Every key the caller manages, never their secrets", body = KeyListBody),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/admin/keys`: the keys (of the caller's tenant, for an admin key).
pub async fn list(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
) -> Result<Json<KeyListBody>, Problem> {
    let scope = managed_tenant(&caller);
    let keys = state
        .access
        .keys
        .list(scope.as_ref())
        .await
        .map_err(key_problem)?;
    Ok(Json(KeyListBody {
        keys: keys.iter().map(key_body).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/v1/admin/keys/{key_id}/rotate",
    operation_id = "rotateKey",
    tag = "admin",
    params(("key_id" = String, Path, description = "The key's id")),
    request_body(content = Option<KeyRotateBody>, description = "Optional: how long the old secret keeps working", content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The key's new secret (shown only here); the old one works until `rotating_until`", body = KeySecretBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "key_not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_body: a grace longer than 30 days", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/admin/keys/{key_id}/rotate`: a new secret; both work during the grace.
pub async fn rotate(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<KeyRotateBody>,
) -> Result<Json<KeySecretBody>, Problem> {
    visible_key(&state, &caller, &id).await?;
    let grace = body.grace_ms.map_or(DEFAULT_GRACE, Duration::from_millis);
    if grace > MAX_GRACE {
        return Err(invalid("grace_ms is at most 30 days".into()));
    }
    let (record, secret) = state
        .access
        .keys
        .rotate(&id, grace)
        .await
        .map_err(key_problem)?;
    audit_in(
        &state,
        &caller,
        &record.tenant,
        "key_rotated",
        &record.name,
        "",
        json!({"id": record.id, "grace_ms": u64::try_from(grace.as_millis()).unwrap_or(u64::MAX)}),
    )
    .await;
    Ok(Json(secret_body(&record, &secret)))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// How many entries, newest first (1-1000, default 100).
    #[serde(default)]
    limit: Option<usize>,
}

#[utoipa::path(
    get,
    path = "/v1/admin/audit",
    operation_id = "readAuditLog",
    tag = "admin",
    params(AuditQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The newest admin actions (of the caller's tenant, for an admin key)", body = AuditBody),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/admin/audit[?limit=N]`: who did what, newest first.
pub async fn audit_log(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditBody>, Problem> {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let entries = state
        .audit
        .recent(managed_tenant(&caller).as_ref(), limit)
        .await
        .map_err(|e| Problem::from(crate::locks::LockError::from(e)))?;
    Ok(Json(AuditBody {
        entries: entries
            .into_iter()
            .map(|e| AuditEntryBody {
                at: Timestamp(e.at_ms).rfc3339(),
                by: e.by,
                action: e.action,
                tenant: e.tenant.as_str().to_owned(),
                target: e.target,
                reason: e.reason,
                details: e.details,
            })
            .collect(),
    }))
}

/// The admin token manages every tenant; an admin key, its own.
fn may_manage(caller: &Principal, tenant: &Tenant) -> bool {
    matches!(caller.who, Who::AdminToken) || &caller.tenant == tenant
}

/// Whose keys and audit entries the caller sees: all (`None`) or its tenant's.
fn managed_tenant(caller: &Principal) -> Option<Tenant> {
    (!matches!(caller.who, Who::AdminToken)).then(|| caller.tenant.clone())
}

/// The key `id`, if the caller may manage it; another tenant's key is as good as absent.
pub(super) async fn visible_key(
    state: &AppState,
    caller: &Principal,
    id: &str,
) -> Result<KeyRecord, Problem> {
    match state.access.keys.read(id).await.map_err(key_problem)? {
        Some(record) if may_manage(caller, &record.tenant) => Ok(record),
        _ => Err(key_problem(KeyError::NotFound)),
    }
}

fn role(r: KeyRole) -> Role {
    match r {
        KeyRole::Client => Role::Client,
        KeyRole::Reader => Role::Reader,
        KeyRole::Admin => Role::Admin,
    }
}

fn key_role(r: Role) -> KeyRole {
    match r {
        Role::Client => KeyRole::Client,
        Role::Reader => KeyRole::Reader,
        Role::Admin => KeyRole::Admin,
    }
}

pub(super) fn key_body(record: &KeyRecord) -> KeyBody {
    KeyBody {
        id: record.id.clone(),
        name: record.name.clone(),
        tenant: record.tenant.as_str().to_owned(),
        roles: record.roles.iter().copied().map(key_role).collect(),
        patterns: record.patterns.clone(),
        quotas: KeyQuotasBody {
            max_leases: record.quotas.leases,
            max_waiters: record.quotas.waiters,
            max_names: record.quotas.names,
            max_state_bytes: record.quotas.state_bytes,
            max_ttl_ms: record.quotas.max_ttl_ms,
            max_permits: record.quotas.max_permits,
        },
        created_at: Timestamp(record.created_at_ms).rfc3339(),
        created_by: record.created_by.clone(),
        rotating_until: record
            .rotating_until_ms(wall_ms())
            .map(|at| Timestamp(at).rfc3339()),
        ended_leases: None,
    }
}

fn secret_body(record: &KeyRecord, secret: &KeySecret) -> KeySecretBody {
    KeySecretBody {
        key: key_body(record),
        secret: secret.expose().to_owned(),
    }
}

fn invalid(detail: String) -> Problem {
    Problem::new(ProblemKind::InvalidBody, detail)
}

/// An admin key grants within the operator's ceilings: no quota above the server's default
/// for keys (or its bound, for TTLs and permits), so that minting keys cannot lift a limit.
/// The operator's token may grant more.
fn within_ceilings(state: &AppState, caller: &Principal, q: &KeyQuotasBody) -> Result<(), Problem> {
    if caller.who == Who::AdminToken {
        return Ok(());
    }
    let d = &state.access.limits;
    let ceilings = [
        ("max_leases", q.max_leases, d.leases),
        ("max_waiters", q.max_waiters, d.waiters),
        ("max_names", q.max_names, d.names),
        ("max_state_bytes", q.max_state_bytes, d.state_bytes),
        ("max_ttl_ms", q.max_ttl_ms, state.limits.ttl.max_ms),
        (
            "max_permits",
            q.max_permits.map(u64::from),
            u64::from(state.limits.max_permits),
        ),
    ];
    for (what, asked, ceiling) in ceilings {
        if let Some(asked) = asked
            && asked > ceiling
        {
            return Err(Problem::new(
                ProblemKind::QuotaAboveCeiling,
                format!(
                    "{what} {asked} is above {ceiling}, what the operator lets an admin key grant \
                     (the server's default for keys); the admin token may grant more"
                ),
            )
            .with("quota", what)
            .with("ceiling", ceiling));
        }
    }
    Ok(())
}

pub(super) fn key_problem(e: KeyError) -> Problem {
    match e {
        KeyError::NameTaken(_) => Problem::new(ProblemKind::KeyNameTaken, e.to_string()),
        KeyError::NotFound => Problem::new(ProblemKind::KeyNotFound, "no API key with this id"),
        KeyError::InvalidName | KeyError::NoRole => invalid(e.to_string()),
        KeyError::TenantFull { .. } => Problem::new(ProblemKind::TooManyKeys, e.to_string()),
        KeyError::Redis(source) => crate::locks::LockError::from(source).into(),
        KeyError::Corrupt(source) => {
            tracing::error!(error = %source, "an API key record in Redis is unreadable");
            Problem::new(ProblemKind::Internal, "internal error")
        }
    }
}

/// Appends one entry, by `caller`, to the audit log, filed under `tenant`: what was acted on
/// belongs there (an API key the admin token made for a tenant is that tenant's).
pub(super) async fn audit_in(
    state: &AppState,
    caller: &Principal,
    tenant: &Tenant,
    action: &str,
    target: &str,
    reason: &str,
    details: serde_json::Value,
) {
    state
        .audit
        .record(&AuditEntry {
            at_ms: wall_ms(),
            by: caller.label(),
            action: action.to_owned(),
            tenant: tenant.clone(),
            target: target.to_owned(),
            reason: reason.to_owned(),
            details,
        })
        .await;
}
