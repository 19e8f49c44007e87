//! `GET /v1/admin/redis`: the Redis behind this instance, as operators need to see it during
//! an incident (mode, master, replicas and their lag, acknowledgements, failovers followed).

use axum::Json;
use axum::extract::State;

use crate::auth::{AdminRole, Caller};
use crate::locks::RedisStatus;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

#[utoipa::path(
    get,
    path = "/v1/admin/redis",
    operation_id = "readRedisStatus",
    tag = "admin",
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "This instance's view of Redis: mode, master, replicas with their lag, replica acknowledgements, and in Sentinel mode the failovers it followed", body = RedisStatus),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled, tenant_not_allowed (the deployment's Redis is for the default tenant's admins)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/admin/redis`: what this instance knows of the Redis behind it. The addresses
/// are the deployment's, so only the default tenant's admins may read them.
pub async fn status(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
) -> Result<Json<RedisStatus>, Problem> {
    if !caller.tenant.is_default() {
        return Err(Problem::new(
            ProblemKind::TenantNotAllowed,
            "the Redis behind the deployment is for the default tenant's admins",
        ));
    }
    Ok(Json(state.locks.backend().status()))
}
