//! `POST /v1/admin/{locks|semaphores|elections}/{name}/revoke`: cooperative revocation, behind
//! the admin token or an admin key. The holder is asked to release within a grace (its watch
//! gets `revocation_requested` with the reason and the deadline; its heartbeats extend the
//! lease no further than the deadline); a release in time is an ordinary release; at the
//! deadline the lease is force-released and its holder told `lost` (reason `revoked`). Each
//! step is in the lock's history and the audit log.

use axum::Json;
use axum::extract::State;

use super::bodies;
use super::extract::{JsonBody, NamePath};
use crate::auth::{AdminRole, Caller};
use crate::leases::election::ElectionName;
use crate::locks::{LockName, Resource};
use crate::operator::RevokedLease;
use crate::problem::{Problem, ProblemDetails};
use crate::state::AppState;
use crate::wire::{RevokeBody, RevokedBody, RevokedLeaseBody};

#[utoipa::path(
    post,
    path = "/v1/admin/locks/{name}/revoke",
    operation_id = "revokeLock",
    tag = "admin",
    params(("name" = String, Path)),
    request_body(content = RevokeBody, content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Every holder (or the lease named) asked to release by its deadline; a lease asked already keeps its earlier deadline (`again: true`)", body = RevokedBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lock_not_found: nobody holds it; lease_not_found: the lease named does not hold it; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (grace_ms over an hour, a reason with a control character, a field of the wrong type), reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/admin/locks/{name}/revoke`.
pub async fn revoke_lock(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<RevokedBody>, Problem> {
    revoke(&caller, &state, Resource::Lock, &name, body).await
}

#[utoipa::path(
    post,
    path = "/v1/admin/semaphores/{name}/revoke",
    operation_id = "revokeSemaphore",
    tag = "admin",
    params(("name" = String, Path)),
    request_body(content = RevokeBody, content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Every lease holding permits (or the lease named) asked to release by its deadline", body = RevokedBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lock_not_found: no lease holds its permits; lease_not_found: the lease named holds none; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (grace_ms over an hour, a reason with a control character, a field of the wrong type), reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/admin/semaphores/{name}/revoke`.
pub async fn revoke_semaphore(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<RevokedBody>, Problem> {
    revoke(&caller, &state, Resource::Semaphore, &name, body).await
}

#[utoipa::path(
    post,
    path = "/v1/admin/elections/{name}/revoke",
    operation_id = "revokeLeader",
    tag = "admin",
    params(("name" = String, Path)),
    request_body(content = RevokeBody, content_type = "application/json"),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The leader asked to resign by its deadline (its watch tells it); then its term is ended and the next candidate leads (`lock` is the election's lock, `election/<name>`)", body = RevokedBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required (with WWW-Authenticate: Bearer), token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled: the server has no admin token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lock_not_found: nobody leads; lease_not_found: the candidate named does not lead; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (grace_ms over an hour, a reason with a control character, a field of the wrong type), reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/admin/elections/{name}/revoke`: asks the leader to resign.
pub async fn revoke_leader(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<RevokedBody>, Problem> {
    caller.check_name(&name)?;
    let lock = ElectionName::new(name).lock();
    revoke(&caller, &state, Resource::Lock, &lock, body).await
}

async fn revoke(
    caller: &Caller<AdminRole>,
    state: &AppState,
    resource: Resource,
    name: &LockName,
    body: RevokeBody,
) -> Result<Json<RevokedBody>, Problem> {
    let reason = state.body_reason(&body.reason)?;
    let only = body
        .lease_id
        .and_then(|id| crate::locks::LeaseId::parse(&id.to_string()));
    let asked = state
        .operator(caller, caller.label())
        .revoke(
            resource,
            name,
            only,
            body.grace_ms,
            &reason,
            &state.revocations,
        )
        .await?;
    Ok(Json(RevokedBody {
        lock: name.to_string(),
        leases: asked.iter().map(lease_body).collect(),
    }))
}

fn lease_body(asked: &RevokedLease) -> RevokedLeaseBody {
    RevokedLeaseBody {
        lease_id: bodies::lease_id(asked.lease_id),
        holder: asked.revoked.holder.clone(),
        fencing_token: asked.revoked.fencing_token,
        revocation: bodies::revocation_body(&asked.revoked.revocation),
        again: asked.revoked.again,
    }
}
