//! `/v1/locks/{name}/leases`: acquire, heartbeat, release and inspect leases.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Bearer, Idempotency, JsonBody, Path, Query, lease_id, lock_name};
use super::problem::{Problem, ProblemDetails};
use crate::locks::{
    AcquireRequest, Acquired, Grant, HolderLabel, LeaseId, LeaseView, LockKind, LockName, Metadata,
    Release, Renewal, RwMode, RwPolicy, Ticket,
};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// Lease TTL in ms; the server default when absent.
    ttl_ms: Option<u64>,
    /// Free-text label naming the holder, shown to operators and to refused acquirers.
    holder: Option<String>,
    /// A small JSON object kept with the lease.
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
    /// reentrant (default), exclusive, fair, read or write; on reentry, the lease's own.
    kind: Option<LockKind>,
    /// For read/write locks: readers_first (default, Redisson) or fifo (Curator).
    #[serde(default)]
    policy: RwPolicy,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AcquireQuery {
    /// How long to wait server-side while the lock is held, in ms (default 0).
    #[serde(default)]
    wait_ms: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GrantBody {
    #[schema(value_type = String, format = Uuid)]
    lease_id: LeaseId,
    /// The lease's bearer token: only in the 201 of a new lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    lock: String,
    kind: String,
    holder: Option<String>,
    fencing_token: u64,
    reentry_count: u64,
    /// Semaphore leases: the permits held.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u64>,
    ttl_ms: u64,
    expires_at: String,
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), AcquireQuery, ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    request_body(content = Option<AcquireBody>, description = "Every field optional; an empty body is fine", content_type = "application/json"),
    security((), ("lease_token" = [])),
    responses(
        (status = 201, description = "A new lease (the token is shown only here)", body = GrantBody, headers(("Location" = String, description = "The lease's URL"))),
        (status = 200, description = "Reentry: one more level of the bearer token's lease", body = GrantBody),
        (status = 202, description = "Fair locks: still queued when the wait ended; poll the Location", body = TicketBody, headers(("Location" = String, description = "The ticket's URL"))),
        (status = 400, description = "invalid_idempotency_key, malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_malformed: not a bearer token (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the bearer token belongs to no lease on this lock", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "lock_held (with Retry-After), kind_conflict, not_reentrant, upgrade_refused, ticket_pending", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: the bearer token's lease has ended; ticket_expired", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name, invalid_ttl, invalid_body", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/leases[?wait_ms=N]`: 201 with a new lease, 200 on reentry (with the
/// lease's token as bearer), 409 when held by another after the wait.
pub async fn acquire(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<AcquireQuery>,
    bearer: Bearer,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, Problem> {
    let name = lock_name(&name)?;
    let token = bearer.lease_token()?;
    let ttl = body
        .ttl_ms
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    let request = AcquireRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        token,
        kind: body.kind,
        policy: body.policy,
        idempotency,
    };
    let wait = Duration::from_millis(query.wait_ms).min(state.limits.max_wait);
    let ttl = ttl.unwrap_or_else(|| state.limits.ttl.default_ttl());
    let acquired = state.locks.acquire(&name, request, ttl, wait).await?;
    Ok(acquired_response(
        &name,
        acquired,
        state.limits.ticket_timeout_ms,
    ))
}

/// 201/200 for a grant, 202 for a fair-queue ticket.
pub(super) fn acquired_response(name: &LockName, acquired: Acquired, ticket_ms: u64) -> Response {
    match acquired {
        Acquired::Granted(grant) => grant_response(&lease_path(name, grant.lease_id), name, grant),
        Acquired::Queued(ticket) => ticket_response(name, ticket, ticket_ms),
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TicketBody {
    #[schema(value_type = String, format = Uuid)]
    ticket_id: LeaseId,
    /// Proves the ticket and, once granted, the lease: only when the ticket is issued.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    lock: String,
    /// 1 = next in line.
    position: u64,
    /// Poll (POST the Location, with the token) before this or lose the place.
    poll_by: String,
    poll_timeout_ms: u64,
}

fn ticket_response(name: &LockName, ticket: Ticket, ticket_ms: u64) -> Response {
    let location = format!("/v1/locks/{name}/tickets/{}", ticket.lease_id);
    let body = TicketBody {
        ticket_id: ticket.lease_id,
        token: ticket.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        position: ticket.position,
        poll_by: ticket.poll_by.rfc3339(),
        poll_timeout_ms: ticket_ms,
    };
    let mut response = (StatusCode::ACCEPTED, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    response
}

/// 201 with `Location` for a new lease, 200 for one more level of an existing one.
pub(super) fn grant_response(location: &str, name: &LockName, grant: Grant) -> Response {
    let status = if grant.new_lease {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let replayed = grant.replayed;
    let body = GrantBody {
        lease_id: grant.lease_id,
        token: grant.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        permits: (grant.kind == "semaphore").then_some(grant.reentry_count),
        kind: grant.kind,
        holder: grant.holder,
        fencing_token: grant.fencing_token.0,
        reentry_count: grant.reentry_count,
        ttl_ms: grant.ttl_ms,
        expires_at: grant.expires_at.rfc3339(),
    };
    let mut response = (status, Json(body)).into_response();
    if let Ok(location) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if replayed {
        // The answer given before (a re-polled ticket, a retried Idempotency-Key).
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PollQuery {
    /// How long to wait server-side for the turn, in ms (default 0).
    #[serde(default)]
    wait_ms: u64,
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("ticket_id" = String, Path, format = Uuid, description = "The ticket's id (also its lease's)"), PollQuery),
    security(("lease_token" = [])),
    responses(
        (status = 201, description = "The ticket's turn: the fair lock's lease", body = GrantBody, headers(("Location" = String, description = "The lease's URL"))),
        (status = 202, description = "Still queued", body = TicketBody, headers(("Location" = String, description = "The ticket's URL"))),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "lock_held, kind_conflict, ticket_pending", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "ticket_expired: not polled in time; lease_lost", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/tickets/{ticket_id}[?wait_ms=N]` (the ticket's token as bearer): the
/// fair lock's lease (201) once it is this ticket's turn, else 202 with its place.
pub async fn poll_ticket(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Query(query): Query<PollQuery>,
    bearer: Bearer,
) -> Result<Response, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let wait = Duration::from_millis(query.wait_ms).min(state.limits.max_wait);
    let acquired = state.locks.poll_ticket(&name, id, token, wait).await?;
    Ok(acquired_response(
        &name,
        acquired,
        state.limits.ticket_timeout_ms,
    ))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LeftBody {
    #[schema(value_type = String, format = Uuid)]
    ticket_id: LeaseId,
    lock: String,
    left: bool,
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("ticket_id" = String, Path, format = Uuid, description = "The ticket's id (also its lease's)")),
    security(("lease_token" = [])),
    responses(
        (status = 200, description = "Left the queue", body = LeftBody),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: the ticket was already granted, expired or left", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/locks/{name}/tickets/{ticket_id}`: give up the place in the queue.
pub async fn leave_queue(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    bearer: Bearer,
) -> Result<Json<LeftBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    state.locks.leave(&name, id, &token).await?;
    Ok(Json(LeftBody {
        ticket_id: id,
        lock: name.to_string(),
        left: true,
    }))
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/locks/{name}/leases/{id}")
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// A new TTL in ms, kept for later heartbeats; the lease's own TTL when absent.
    ttl_ms: Option<u64>,
}

impl HeartbeatBody {
    pub(super) fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RenewalBody {
    #[schema(value_type = String, format = Uuid)]
    lease_id: LeaseId,
    lock: String,
    fencing_token: u64,
    reentry_count: u64,
    ttl_ms: u64,
    expires_at: String,
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases/{lease_id}/heartbeat",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    request_body(content = Option<HeartbeatBody>, description = "Optional: a new TTL for this and later heartbeats", content_type = "application/json"),
    security(("lease_token" = [])),
    responses(
        (status = 200, description = "Renewed", body = RenewalBody),
        (status = 400, description = "malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending: the token is a queued ticket's", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released, left)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_ttl, invalid_body", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/leases/{lease_id}/heartbeat`: 200 with the new expiry, 410 when the
/// lease has already lost its lock.
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
        .ttl_ms
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    let renewal = state.locks.renew(&name, id, &token, ttl).await?;
    Ok(Json(renewal_body(&name, renewal)))
}

pub(super) fn renewal_body(name: &LockName, renewal: Renewal) -> RenewalBody {
    let Renewal {
        lease_id,
        reentry_count,
        fencing_token,
        ttl_ms,
        expires_at,
        ..
    } = renewal;
    RenewalBody {
        lease_id,
        lock: name.to_string(),
        fencing_token: fencing_token.0,
        reentry_count,
        ttl_ms,
        expires_at: expires_at.rfc3339(),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReleaseQuery {
    /// Release every reentry level at once.
    #[serde(default)]
    all: bool,
    /// Read/write leases: the hold to release (default: write if held, else read).
    #[param(inline)]
    mode: Option<RwMode>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseBody {
    #[schema(value_type = String, format = Uuid)]
    lease_id: LeaseId,
    lock: String,
    /// True when the lock was let go (no levels left).
    released: bool,
    reentry_count: u64,
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/leases/{lease_id}",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), ReleaseQuery, ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    security(("lease_token" = [])),
    responses(
        (status = 200, description = "Released one level (or all); `released` when the lock is free", body = ReleaseBody),
        (status = 400, description = "invalid_idempotency_key, invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "mode_not_held, ticket_pending", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released, left)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/locks/{name}/leases/{lease_id}[?all=true]`: 200 with the levels left, 410 when
/// the lease had already lost its lock.
pub async fn release(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Query(query): Query<ReleaseQuery>,
    bearer: Bearer,
    Idempotency(idempotency): Idempotency,
) -> Result<Json<ReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let released = state
        .locks
        .release(
            &name,
            id,
            &token,
            query.all,
            query.mode,
            idempotency.as_ref(),
        )
        .await?;
    Ok(Json(release_body(&name, released)))
}

pub(super) fn release_body(name: &LockName, release: Release) -> ReleaseBody {
    let Release {
        lease_id,
        reentry_count,
        released,
    } = release;
    ReleaseBody {
        lease_id,
        lock: name.to_string(),
        released,
        reentry_count,
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseBody {
    #[schema(value_type = String, format = Uuid)]
    lease_id: LeaseId,
    lock: String,
    /// held, queued, released, expired, force_released or left.
    #[schema(value_type = String)]
    state: &'static str,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_count: Option<u64>,
    /// Fair tickets: place in the queue (1 = next).
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<u64>,
    /// Semaphore leases: permits held.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u64>,
    holder: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
    fencing_token: u64,
    reentry_count: u64,
    ttl_ms: u64,
    remaining_ms: Option<u64>,
    acquired_at: String,
    expires_at: String,
    ended_at: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/locks/{name}/leases/{lease_id}",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    responses(
        (status = 200, description = "The lease (never its token)", body = LeaseBody),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<LeaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    Ok(Json(lease_body(state.locks.lease(&name, id).await?)))
}

pub(super) fn lease_body(view: LeaseView) -> LeaseBody {
    LeaseBody {
        lease_id: view.lease_id,
        lock: view.lock.to_string(),
        state: view.state.as_str(),
        kind: view.kind,
        read_count: view.read_count,
        write_count: view.write_count,
        position: view.position,
        permits: view.permits,
        holder: view.holder,
        metadata: view.metadata.map(Metadata::into_value),
        fencing_token: view.fencing_token.0,
        reentry_count: view.reentry_count,
        ttl_ms: view.ttl_ms,
        remaining_ms: view.remaining_ms,
        acquired_at: view.acquired_at.rfc3339(),
        expires_at: view.expires_at.rfc3339(),
        ended_at: view.ended_at.map(|t| t.rfc3339()),
    }
}
