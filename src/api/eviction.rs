//! `/v1/admin/.../leases/{lease_id}`: targeted eviction, behind the admin token or an admin
//! key. One lease goes (a dead reader among several, one holder's permits); the other holders
//! stay. Recorded in the lock's history and the audit log (action `evict`).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::bodies;
use super::extract::{LeasePath, Query};
use crate::auth::{AdminRole, Caller};
use crate::locks::Resource;
use crate::problem::{Problem, ProblemDetails};
use crate::state::AppState;
use crate::wire::ForceReleaseBody;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EvictQuery {
    /// Why, for the event and the history.
    #[serde(default)]
    reason: String,
}

#[utoipa::path(
    delete,
    path = "/v1/admin/locks/{name}/leases/{lease_id}",
    operation_id = "evictLockLease",
    tag = "admin",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease to remove"), EvictQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The lease removed (every level it held); other holders keep theirs. Recorded like a force release (`scope: lease`)", body = ForceReleaseBody),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: the lease does not hold this lock; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name; reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/locks/{name}/leases/{lease_id}[?reason=..]`: removes one lease.
pub async fn evict_lock_lease(
    caller: Caller<AdminRole>,
    state: State<AppState>,
    path: LeasePath,
    query: Query<EvictQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    evict(caller, state, Resource::Lock, path, query).await
}

#[utoipa::path(
    delete,
    path = "/v1/admin/semaphores/{name}/leases/{lease_id}",
    operation_id = "evictSemaphoreLease",
    tag = "admin",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease to remove"), EvictQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The lease removed; its permits come back, other holders keep theirs. Recorded like a force release (`scope: lease`)", body = ForceReleaseBody),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: the lease holds no permits of this semaphore; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name; reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/semaphores/{name}/leases/{lease_id}[?reason=..]`: returns one lease's
/// permits.
pub async fn evict_semaphore_lease(
    caller: Caller<AdminRole>,
    state: State<AppState>,
    path: LeasePath,
    query: Query<EvictQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    evict(caller, state, Resource::Semaphore, path, query).await
}

async fn evict(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    resource: Resource,
    LeasePath { name, id }: LeasePath,
    Query(query): Query<EvictQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let reason = state.reason(&query.reason)?;
    let evicted = state
        .operator(&caller, caller.label())
        .evict(Some(resource), &name, id, &reason)
        .await?;
    Ok(Json(bodies::forced(evicted)))
}
