//! `/v1/admin`: operator actions, behind the admin token.

use axum::Json;
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Bearer, Path, Query, lock_name};
use super::locks::HolderBody;
use super::problem::{Problem, ProblemDetails, ProblemKind};
use crate::locks::ForcedRelease;
use crate::state::{AdminAuth, AppState};

/// Proof that the request carries the admin token.
#[derive(Debug)]
pub struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    AppState: FromRef<S>,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        if matches!(state.admin, AdminAuth::Disabled) {
            return Err(Problem::new(
                ProblemKind::AdminDisabled,
                "start the server with --admin-token (LEASEHOLD_ADMIN_TOKEN) to use admin routes",
            ));
        }
        match Bearer::from_request_parts(parts, &()).await?.0 {
            None => Err(Problem::new(
                ProblemKind::AdminTokenRequired,
                "send the admin token as Authorization: Bearer <token>",
            )),
            Some(token) if state.admin.accepts(&token) => Ok(Admin),
            Some(_) => Err(Problem::new(
                ProblemKind::AdminTokenInvalid,
                "wrong admin token",
            )),
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ForceReleaseQuery {
    /// Why, for the event and the lock's history.
    #[serde(default)]
    reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ForceReleaseBody {
    lock: String,
    /// False when nobody held the lock.
    released: bool,
    removed: Vec<HolderBody>,
}

#[utoipa::path(
    delete,
    path = "/v1/admin/locks/{name}",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ForceReleaseQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Every holder removed (`released: false` when nobody held it)", body = ForceReleaseBody),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/locks/{name}[?reason=..]`: removes every holder and wakes waiters; the
/// removed leases' holders get 410 from then on.
pub async fn force_release(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ForceReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let forced = state
        .locks
        .force_release(&name, "admin-api", &query.reason)
        .await?;
    tracing::info!(lock = %name, removed = forced.removed.len(), reason = %query.reason, "force release");
    Ok(Json(forced_body(forced)))
}

#[utoipa::path(
    delete,
    path = "/v1/admin/semaphores/{name}",
    tag = "admin",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), ForceReleaseQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Every permit returned", body = ForceReleaseBody),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/semaphores/{name}[?reason=..]`: every permit comes back; the removed
/// leases' holders get 410 from then on.
pub async fn force_release_semaphore(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ForceReleaseQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let forced = state
        .locks
        .force_release_semaphore(&name, "admin-api", &query.reason)
        .await?;
    tracing::info!(semaphore = %name, removed = forced.removed.len(), reason = %query.reason, "force release");
    Ok(Json(forced_body(forced)))
}

/// What a force release removed, for both locks and semaphores.
fn forced_body(forced: ForcedRelease) -> ForceReleaseBody {
    ForceReleaseBody {
        lock: forced.lock.to_string(),
        released: !forced.removed.is_empty(),
        removed: forced.removed.into_iter().map(HolderBody::from).collect(),
    }
}
