//! `/v1/locks/{name}/leases` and `/v1/locks/{name}/tickets`: acquire, heartbeat, release and
//! inspect leases; poll and leave fair tickets. Heartbeat, release and inspect are shared with
//! the semaphore routes (`semaphores`), which differ only in the resource they name.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Response;

use super::bodies::{self, grant_response, refused_after, ticket_response};
use super::contention;
use super::extract::{Bearer, HeldLease, Idempotency, JsonBody, LeasePath, NamePath, Query};
use crate::locks::{AcquireRequest, Acquired, HolderLabel, LeaseId, LockName, Metadata, Resource};
use crate::problem::{Problem, ProblemDetails};
use crate::state::AppState;
use crate::wire::{
    AcquireBody, GrantBody, HeartbeatBody, LeaseBody, LeftBody, ReleaseBody, ReleaseQuery,
    RenewalBody, TicketBody, WaitQuery,
};

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases",
    operation_id = "acquireLock",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), WaitQuery, ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    request_body(content = Option<AcquireBody>, description = "Every field optional; an empty body is fine", content_type = "application/json"),
    security((), ("lease_token" = [])),
    responses(
        (status = 201, description = "A new lease (the token is shown only here)", body = GrantBody, headers(("Location" = String, description = "The lease's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 200, description = "Reentry: one more level of the bearer token's lease", body = GrantBody, headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 202, description = "Fair locks: still queued when the wait ended; poll the Location", body = TicketBody, headers(("Location" = String, description = "The ticket's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 400, description = "invalid_idempotency_key, malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_malformed: not a bearer token (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the bearer token belongs to no lease on this lock", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "lock_held (with Retry-After), kind_conflict, not_reentrant, upgrade_refused, ticket_pending; with the wait allowed (wait_ms)", body = ProblemDetails, content_type = "application/problem+json", headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 410, description = "lease_lost: the bearer token's lease has ended; ticket_expired", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name, invalid_ttl, invalid_body", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/leases[?wait_ms=N]`: 201 with a new lease, 200 on reentry (with the
/// lease's token as bearer), 409 when held by another after the wait.
pub async fn acquire(
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<WaitQuery>,
    bearer: Bearer,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, Problem> {
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
        kind: body.kind.map(bodies::kind),
        policy: bodies::policy(body.policy),
        idempotency,
    };
    let (kind, policy) = (request.kind, request.policy);
    let wait = state.limits.wait(query.wait_ms);
    let ttl = ttl.unwrap_or_else(|| state.limits.ttl.default_ttl());
    let acquired = match state.locks.acquire(&name, request, ttl, wait).await {
        Ok(acquired) => acquired,
        Err(e) => {
            let problem = contention::explain(&state.locks, &name, kind, policy, e).await;
            return Err(problem.waited(wait));
        }
    };
    Ok(acquired_response(
        &name,
        acquired,
        state.limits.ticket_timeout_ms,
        wait,
    ))
}

/// 201/200 for a grant, 202 for a fair-queue ticket; both say the wait they were allowed.
fn acquired_response(
    name: &LockName,
    acquired: Acquired,
    ticket_ms: u64,
    wait: Duration,
) -> Response {
    match acquired {
        Acquired::Granted(grant) => {
            grant_response(&lease_path(name, grant.lease_id), name, grant, Some(wait))
        }
        Acquired::Queued(ticket) => ticket_response(name, ticket, ticket_ms, wait),
    }
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/locks/{name}/leases/{id}")
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    operation_id = "pollTicket",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("ticket_id" = String, Path, format = Uuid, description = "The ticket's id (also its lease's)"), WaitQuery),
    security(("lease_token" = [])),
    responses(
        (status = 201, description = "The ticket's turn: the fair lock's lease (again, if it was granted before)", body = GrantBody, headers(("Location" = String, description = "The lease's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 202, description = "Still queued", body = TicketBody, headers(("Location" = String, description = "The ticket's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 400, description = "invalid_query: a query parameter does not parse", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "lock_held, kind_conflict, ticket_pending; with the wait allowed (wait_ms)", body = ProblemDetails, content_type = "application/problem+json", headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 410, description = "ticket_expired: not polled in time; lease_lost", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/tickets/{ticket_id}[?wait_ms=N]` (the ticket's token as bearer): the
/// fair lock's lease (201) once it is this ticket's turn, else 202 with its place.
pub async fn poll_ticket(
    State(state): State<AppState>,
    ticket: HeldLease,
    Query(query): Query<WaitQuery>,
) -> Result<Response, Problem> {
    let wait = state.limits.wait(query.wait_ms);
    let acquired = state
        .locks
        .poll_ticket(&ticket.name, ticket.id, ticket.token, wait)
        .await
        .map_err(|e| refused_after(e, wait))?;
    Ok(acquired_response(
        &ticket.name,
        acquired,
        state.limits.ticket_timeout_ms,
        wait,
    ))
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    operation_id = "leaveQueue",
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
    )
)]
/// `DELETE /v1/locks/{name}/tickets/{ticket_id}`: give up the place in the queue.
pub async fn leave_queue(
    State(state): State<AppState>,
    ticket: HeldLease,
) -> Result<Json<LeftBody>, Problem> {
    state
        .locks
        .leave(&ticket.name, ticket.id, &ticket.token)
        .await?;
    Ok(Json(LeftBody {
        ticket_id: bodies::lease_id(ticket.id),
        lock: ticket.name.to_string(),
        left: true,
    }))
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases/{lease_id}/heartbeat",
    operation_id = "heartbeatLockLease",
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
    )
)]
/// `POST /v1/locks/{name}/leases/{lease_id}/heartbeat`: 200 with the new expiry, 410 when the
/// lease has already lost its lock.
pub async fn heartbeat(
    State(state): State<AppState>,
    lease: HeldLease,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<RenewalBody>, Problem> {
    renew(&state, Resource::Lock, lease, body).await
}

/// A heartbeat on either resource.
pub(super) async fn renew(
    state: &AppState,
    resource: Resource,
    lease: HeldLease,
    body: HeartbeatBody,
) -> Result<Json<RenewalBody>, Problem> {
    let ttl = body
        .ttl_ms
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    let renewal = state
        .locks
        .renew(resource, &lease.name, lease.id, &lease.token, ttl)
        .await?;
    Ok(Json(bodies::renewal(&lease.name, renewal)))
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/leases/{lease_id}",
    operation_id = "releaseLockLease",
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
    )
)]
/// `DELETE /v1/locks/{name}/leases/{lease_id}[?all=true]`: 200 with the levels left, 410 when
/// the lease had already lost its lock.
pub async fn release(
    State(state): State<AppState>,
    lease: HeldLease,
    Query(query): Query<ReleaseQuery>,
    Idempotency(idempotency): Idempotency,
) -> Result<Json<ReleaseBody>, Problem> {
    let released = state
        .locks
        .release(
            Resource::Lock,
            &lease.name,
            lease.id,
            &lease.token,
            query.all,
            query.mode.map(bodies::rw_mode),
            idempotency.as_ref(),
        )
        .await?;
    Ok(Json(bodies::release(&lease.name, released)))
}

#[utoipa::path(
    get,
    path = "/v1/locks/{name}/leases/{lease_id}",
    operation_id = "inspectLockLease",
    tag = "leases",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :"), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    responses(
        (status = 200, description = "The lease (never its token)", body = LeaseBody),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect(
    State(state): State<AppState>,
    lease: LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    inspect_lease(&state, Resource::Lock, lease).await
}

/// A lease as anyone may see it, on either resource.
pub(super) async fn inspect_lease(
    state: &AppState,
    resource: Resource,
    lease: LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    let view = state.locks.lease(resource, &lease.name, lease.id).await?;
    Ok(Json(bodies::lease(view)))
}
