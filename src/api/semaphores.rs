//! `/v1/semaphores/{name}`: semaphores with expirable permits, behind the same lease API.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Bearer, Idempotency, JsonBody, Path, Query, lease_id, lock_name};
use super::leases::{
    GrantBody, HeartbeatBody, LeaseBody, ReleaseBody, RenewalBody, grant_response, lease_body,
    release_body, renewal_body,
};
use super::problem::{Problem, ProblemDetails, ProblemKind};
use crate::locks::{
    HolderLabel, LeaseId, LockError, LockName, Metadata, PermitHolderView, PermitRequest,
};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermitBody {
    /// How many permits the semaphore has; every party must name the same.
    limit: Option<u32>,
    /// Permits this lease takes (default 1).
    permits: Option<u32>,
    ttl_ms: Option<u64>,
    holder: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// How long to wait server-side for permits, in ms (default 0).
    #[serde(default)]
    wait_ms: u64,
}

#[utoipa::path(
    post,
    path = "/v1/semaphores/{name}/leases",
    tag = "semaphores",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), WaitQuery, ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    request_body(content = PermitBody, description = "`limit` is required", content_type = "application/json"),
    responses(
        (status = 201, description = "A new lease holding `permits` permits (the token is shown only here)", body = GrantBody, headers(("Location" = String, description = "The lease's URL"))),
        (status = 400, description = "invalid_idempotency_key, malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "no_permits (with Retry-After), limit_mismatch, kind_conflict", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name, invalid_ttl, invalid_body (limit missing or out of range)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/semaphores/{name}/leases[?wait_ms=N]`: 201 with a lease holding `permits`
/// permits, 409 `no_permits` when not enough are free after the wait.
pub async fn acquire(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<WaitQuery>,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<PermitBody>,
) -> Result<Response, Problem> {
    let name = lock_name(&name)?;
    let max = state.limits.max_permits;
    let Some(limit) = body.limit.filter(|l| (1..=max).contains(l)) else {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("limit (the semaphore's size, 1 to {max}) is required"),
        ));
    };
    let permits = body.permits.unwrap_or(1);
    if permits == 0 || permits > limit {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("permits must be between 1 and the limit ({limit})"),
        ));
    }
    let ttl = match body.ttl_ms {
        Some(ms) => state.limits.ttl.parse(ms)?,
        None => state.limits.ttl.default_ttl(),
    };
    let request = PermitRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        limit,
        permits,
        idempotency,
    };
    let wait = Duration::from_millis(query.wait_ms).min(state.limits.max_wait);
    let grant = state
        .locks
        .acquire_permits(&name, &request, wait)
        .await
        .map_err(|e| match e {
            LockError::Held(c) => {
                let mut p = Problem::new(
                    ProblemKind::NoPermits,
                    format!("fewer than {permits} of the {limit} permits are free"),
                );
                if let Some(after) = c.retry_after {
                    p = p.retry_after(after);
                }
                p
            }
            e => e.into(),
        })?;
    let location = lease_path(&name, grant.lease_id);
    Ok(grant_response(&location, &name, grant))
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/semaphores/{name}/leases/{id}")
}

#[utoipa::path(
    post,
    path = "/v1/semaphores/{name}/leases/{lease_id}/heartbeat",
    tag = "semaphores",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    request_body(content = Option<HeartbeatBody>, description = "Optional: a new TTL for this and later heartbeats", content_type = "application/json"),
    security(("lease_token" = [])),
    responses(
        (status = 200, description = "Renewed", body = RenewalBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_ttl, invalid_body", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/semaphores/{name}/leases/{lease_id}/heartbeat`: every permit of the lease lives on.
pub async fn heartbeat(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    bearer: Bearer,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<RenewalBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let ttl = body
        .ttl_ms()
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    Ok(Json(renewal_body(
        &name,
        state.locks.renew_permits(&name, id, &token, ttl).await?,
    )))
}

#[utoipa::path(
    delete,
    path = "/v1/semaphores/{name}/leases/{lease_id}",
    tag = "semaphores",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    security(("lease_token" = [])),
    responses(
        (status = 200, description = "The permits came back", body = ReleaseBody),
        (status = 400, description = "invalid_idempotency_key", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/semaphores/{name}/leases/{lease_id}`: the permits come back.
pub async fn release(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    bearer: Bearer,
    Idempotency(idempotency): Idempotency,
) -> Result<Json<ReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let released = state
        .locks
        .release_permits(&name, id, &token, idempotency.as_ref())
        .await?;
    Ok(Json(release_body(&name, released)))
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}/leases/{lease_id}",
    tag = "semaphores",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    responses(
        (status = 200, description = "The lease (never its token)", body = LeaseBody),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect_lease(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<LeaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    Ok(Json(lease_body(
        state.locks.semaphore_lease(&name, id).await?,
    )))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SemaphoreBody {
    semaphore: String,
    limit: u32,
    used: u64,
    available: u64,
    fencing_counter: u64,
    holders: Vec<PermitHolderBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PermitHolderBody {
    #[schema(value_type = Option<String>, format = Uuid)]
    lease_id: Option<LeaseId>,
    holder: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
    permits: u64,
    fencing_token: Option<u64>,
    acquired_at: Option<String>,
    expires_at: Option<String>,
}

impl From<PermitHolderView> for PermitHolderBody {
    fn from(h: PermitHolderView) -> Self {
        Self {
            lease_id: h.lease_id,
            holder: h.holder,
            metadata: h.metadata.map(Metadata::into_value),
            permits: h.permits,
            fencing_token: h.fencing_token.map(|f| f.0),
            acquired_at: h.acquired_at.map(|t| t.rfc3339()),
            expires_at: h.expires_at.map(|t| t.rfc3339()),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}",
    tag = "semaphores",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Semaphore name: 1-200 ASCII letters, digits and . _ - :")),
    responses(
        (status = 200, description = "Limit, permits in use, holders", body = SemaphoreBody),
        (status = 404, description = "lock_not_found: never used; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}`: limit, permits in use (expired ones do not count), holders.
pub async fn inspect(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<SemaphoreBody>, Problem> {
    let name = lock_name(&name)?;
    let Some(view) = state.locks.semaphore(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("semaphore {name:?} has never been used"),
        ));
    };
    Ok(Json(SemaphoreBody {
        semaphore: view.name.to_string(),
        limit: view.limit,
        used: view.used,
        available: u64::from(view.limit).saturating_sub(view.used),
        fencing_counter: view.fencing_counter.0,
        holders: view
            .holders
            .into_iter()
            .map(PermitHolderBody::from)
            .collect(),
    }))
}
