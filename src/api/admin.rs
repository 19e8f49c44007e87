//! `/v1/admin`: operator actions, behind the admin token.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::bodies;
use super::extract::{JsonBody, NamePath, Query};
use crate::auth::Admin;
use crate::locks::{HeldAs, LimitChange, LockError, Resource};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{ForceReleaseBody, LimitBody, LimitChangeBody};

/// Who the history names for admin actions through the API.
const BY: &str = "admin-api";

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
    security(("admin_token" = [])),
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
    _: Admin,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<ForceReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let forced = match state
        .locks
        .force_release(Resource::Lock, &name, BY, &query.reason, false)
        .await
    {
        // A semaphore's name: its permits come back, as on the semaphore route.
        Err(LockError::KindConflict {
            held_as: HeldAs::Semaphore,
        }) => {
            state
                .locks
                .force_release(Resource::Semaphore, &name, BY, &query.reason, false)
                .await?
        }
        forced => forced?,
    };
    tracing::info!(lock = %name, removed = forced.removed.len(), reason = %query.reason, "force release");
    Ok(Json(bodies::forced(forced)))
}

#[utoipa::path(
    delete,
    path = "/v1/admin/semaphores/{name}",
    operation_id = "forceReleaseSemaphore",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), SemaphoreReleaseQuery),
    security(("admin_token" = [])),
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
    _: Admin,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<SemaphoreReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let forced = state
        .locks
        .force_release(Resource::Semaphore, &name, BY, &query.reason, query.clear)
        .await?;
    tracing::info!(semaphore = %name, removed = forced.removed.len(), reason = %query.reason, clear = query.clear, "force release");
    Ok(Json(bodies::forced(forced)))
}

#[utoipa::path(
    put,
    path = "/v1/admin/semaphores/{name}/limit",
    operation_id = "setSemaphoreLimit",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :")),
    request_body(content = LimitBody, content_type = "application/json"),
    security(("admin_token" = [])),
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
    _: Admin,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<LimitBody>,
) -> Result<Json<LimitChangeBody>, Problem> {
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
        .locks
        .set_semaphore_limit(&name, body.limit, BY)
        .await?;
    tracing::info!(semaphore = %name, limit, previous, "semaphore limit changed");
    Ok(Json(LimitChangeBody {
        semaphore: name.to_string(),
        limit,
        previous,
        available,
    }))
}
