//! `/v1/admin`: operator actions, behind the admin token or an admin key: thin adapters over
//! [`crate::operator`], which checks, acts and records each once for the API and the
//! dashboard alike.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::bodies;
use super::extract::{JsonBody, NamePath, Query};
use crate::auth::{AdminRole, Caller};
use crate::locks::LimitChange;
use crate::operator::Aim;
use crate::problem::{Problem, ProblemDetails};
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
    params(("name" = String, Path), ForceReleaseQuery),
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
    let reason = state.reason(&query.reason)?;
    let forced = state
        .operator(&caller, caller.label())
        .force_release(&name, Aim::Lock, &reason)
        .await?;
    Ok(Json(bodies::forced(forced)))
}

#[utoipa::path(
    delete,
    path = "/v1/admin/semaphores/{name}",
    operation_id = "forceReleaseSemaphore",
    tag = "admin",
    params(("name" = String, Path), SemaphoreReleaseQuery),
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
    let reason = state.reason(&query.reason)?;
    let aim = Aim::Semaphore { clear: query.clear };
    let forced = state
        .operator(&caller, caller.label())
        .force_release(&name, aim, &reason)
        .await?;
    Ok(Json(bodies::forced(forced)))
}

#[utoipa::path(
    put,
    path = "/v1/admin/semaphores/{name}/limit",
    operation_id = "setSemaphoreLimit",
    tag = "admin",
    params(("name" = String, Path)),
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
    let LimitChange {
        limit,
        previous,
        available,
    } = state
        .operator(&caller, caller.label())
        .set_limit(&name, body.limit, state.limits.max_permits)
        .await?;
    Ok(Json(LimitChangeBody {
        semaphore: name.to_string(),
        limit,
        previous,
        available,
    }))
}
