//! `/v1/locks/{name}`: who holds a lock.

use axum::Json;
use axum::extract::State;

use super::bodies;
use super::extract::NamePath;
use crate::auth::{Caller, ReaderRole};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::LockBody;

#[utoipa::path(
    get,
    path = "/v1/locks/{name}",
    tag = "locks",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Holders, fair queue, fencing counter", body = LockBody),
        (status = 404, description = "lock_not_found: free and never taken; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}`: holders, time left and fencing counter; 404 when free and unknown.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<Json<LockBody>, Problem> {
    caller.check_name(&name)?;
    let Some(view) = state.locks_for(&caller).lock(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("lock {name:?} is free and has never been taken"),
        ));
    };
    Ok(Json(bodies::lock(view)))
}
