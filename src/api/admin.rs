//! `/v1/admin`: operator actions, behind the admin token or an admin key. Each is recorded
//! with who did it and why in the audit log (and, for force releases, the lock's history).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::bodies;
use super::extract::{JsonBody, NamePath, Query};
use crate::audit::AuditEntry;
use crate::auth::{AdminRole, Caller, Principal};
use crate::limits::ledger::now_ms;
use crate::locks::{ForcedRelease, HeldAs, LimitChange, LockError, Resource};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{ForceReleaseBody, LimitBody, LimitChangeBody};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ForceReleaseQuery {
    /// Why, for the event and the lock's history.
    #[serde(default)]
    reason: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreReleaseQuery {
    /// Why, for the event and the semaphore's history.
    #[serde(default)]
    reason: String,
    /// Remove the semaphore itself as well (its counter and limit): the next acquirer sets a
    /// new limit, and the name can be used as a lock.
    #[serde(default)]
    clear: bool,
}

#[utoipa::path(
    delete,
    path = "/v1/admin/locks/{name}",
    operation_id = "forceReleaseLock",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ForceReleaseQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Every holder removed (`released: false` when nobody held it)", body = ForceReleaseBody),
        (status = 409, description = "kind_conflict: the name is a key another program made (held_as: foreign). A semaphore's name works too: its permits come back (to remove the semaphore itself, DELETE /v1/admin/semaphores/{name}?clear=true)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/locks/{name}[?reason=..]`: removes every holder and wakes waiters; the
/// removed leases' holders get 410 from then on. A semaphore's permits all come back.
pub async fn force_release(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<ForceReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    caller.check_name(&name)?;
    check_reason(&state, &query.reason)?;
    let locks = state.locks_for(&caller);
    let by = caller.label();
    let forced = match locks
        .force_release(Resource::Lock, &name, &by, &query.reason, false)
        .await
    {
        // A semaphore's name: its permits come back, as on the semaphore route.
        Err(LockError::KindConflict {
            held_as: HeldAs::Semaphore,
        }) => {
            locks
                .force_release(Resource::Semaphore, &name, &by, &query.reason, false)
                .await?
        }
        forced => forced?,
    };
    audit_forced(&state, &caller, "force_release", &forced, &query.reason).await;
    Ok(Json(bodies::forced(forced)))
}

/// A reason longer than `--max-reason-chars` is refused (422 `reason_too_long`), and so is one
/// with a control character (a line break would start a forged line in a text log or a
/// history view): 400 `invalid_query`.
pub(super) fn check_reason(state: &AppState, reason: &str) -> Result<(), Problem> {
    if reason.chars().any(char::is_control) {
        return Err(Problem::new(
            ProblemKind::InvalidQuery,
            "a reason may not hold control characters (line breaks, tabs)",
        ));
    }
    let max = state.limits.per_lock.reason_chars;
    if reason.chars().count() > max {
        return Err(Problem::new(
            ProblemKind::ReasonTooLong,
            format!("a reason has at most {max} characters (--max-reason-chars)"),
        ));
    }
    Ok(())
}

/// Records a force release and the leases it removed.
pub(super) async fn audit_forced(
    state: &AppState,
    caller: &Principal,
    action: &str,
    forced: &ForcedRelease,
    reason: &str,
) {
    audit(
        state,
        caller,
        action,
        &forced.lock.to_string(),
        reason,
        crate::audit::removed(forced),
    )
    .await;
}

/// Appends one entry, by `caller`, to the audit log, filed under the caller's tenant.
pub(super) async fn audit(
    state: &AppState,
    caller: &Principal,
    action: &str,
    target: &str,
    reason: &str,
    details: serde_json::Value,
) {
    audit_in(
        state,
        caller,
        &caller.tenant,
        action,
        target,
        reason,
        details,
    )
    .await;
}

/// Appends one entry, by `caller`, to the audit log, filed under `tenant`: what was acted on
/// belongs there (an API key the admin token made for a tenant is that tenant's).
pub(super) async fn audit_in(
    state: &AppState,
    caller: &Principal,
    tenant: &crate::tenant::Tenant,
    action: &str,
    target: &str,
    reason: &str,
    details: serde_json::Value,
) {
    state
        .audit
        .record(&AuditEntry {
            at_ms: now_ms(),
            by: caller.label(),
            action: action.to_owned(),
            tenant: tenant.clone(),
            target: target.to_owned(),
            reason: reason.to_owned(),
            details,
        })
        .await;
}

#[utoipa::path(
    delete,
    path = "/v1/admin/semaphores/{name}",
    operation_id = "forceReleaseSemaphore",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), SemaphoreReleaseQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Every permit returned (and with clear=true, the semaphore removed)", body = ForceReleaseBody),
        (status = 409, description = "kind_conflict: the name is not a semaphore", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/semaphores/{name}[?reason=..][&clear=true]`: every permit comes back;
/// the removed leases' holders get 410 from then on. With `clear`, the semaphore goes too.
pub async fn force_release_semaphore(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<SemaphoreReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    caller.check_name(&name)?;
    check_reason(&state, &query.reason)?;
    let forced = state
        .locks_for(&caller)
        .force_release(
            Resource::Semaphore,
            &name,
            &caller.label(),
            &query.reason,
            query.clear,
        )
        .await?;
    let action = if query.clear {
        "force_release_semaphore_clear"
    } else {
        "force_release_semaphore"
    };
    audit_forced(&state, &caller, action, &forced, &query.reason).await;
    Ok(Json(bodies::forced(forced)))
}

#[utoipa::path(
    put,
    path = "/v1/admin/semaphores/{name}/limit",
    operation_id = "setSemaphoreLimit",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :")),
    request_body(content = LimitBody, content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The new limit; free permits moved by the difference", body = LimitChangeBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lock_not_found: no such semaphore; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "kind_conflict: the name is not a semaphore", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (limit out of range)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `PUT /v1/admin/semaphores/{name}/limit`: gives a semaphore another size. With fewer permits
/// than are out, acquirers wait until enough come back; nobody is evicted.
pub async fn set_semaphore_limit(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<LimitBody>,
) -> Result<Json<LimitChangeBody>, Problem> {
    caller.check_name(&name)?;
    let max = state.limits.max_permits;
    if !(1..=max).contains(&body.limit) {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("limit must be between 1 and {max}"),
        ));
    }
    let LimitChange {
        limit,
        previous,
        available,
    } = state
        .locks_for(&caller)
        .set_semaphore_limit(&name, body.limit, &caller.label())
        .await?;
    audit(
        &state,
        &caller,
        "semaphore_limit",
        name.as_str(),
        "",
        json!({"limit": limit, "previous": previous}),
    )
    .await;
    Ok(Json(LimitChangeBody {
        semaphore: name.to_string(),
        limit,
        previous,
        available,
    }))
}
