//! `/v1/semaphores/{name}`: semaphores with expirable permits, behind the same lease API as
//! locks (heartbeat, release and inspect share the lock routes' code).

use super::charges::Size;
use axum::Json;
use axum::extract::State;
use axum::response::Response;

use super::admission::{Admission, Ask};
use super::bodies::{self, grant_response};
use super::extract::{HeldLease, Idempotency, JsonBody, LeasePath, NamePath, Query};
use super::leases::{
    default_ttl, inspect_lease as inspect_any, released_response, renew, requested_ttl,
};
use crate::auth::{Caller, ClientRole, ReaderRole};
use crate::locks::{
    HolderLabel, IdempotencyKey, LeaseId, LockError, LockName, Metadata, PermitRequest, Resource,
};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{
    GrantBody, HeartbeatBody, LeaseBody, PermitBody, ReleaseBody, RenewalBody, SemaphoreBody,
    WaitQuery,
};

#[utoipa::path(
    post,
    path = "/v1/semaphores/{name}/leases",
    operation_id = "acquireSemaphore",
    tag = "semaphores",
    params(("name" = String, Path), WaitQuery, ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    request_body(content = PermitBody, description = "`limit` is required", content_type = "application/json"),
    security((), ("api_key" = ["client"])),
    responses(
        (status = 201, description = "A new lease holding `permits` permits (the token is shown only here)", body = GrantBody, headers(("Location" = String, description = "The lease's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 400, description = "invalid_idempotency_key, malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "no_permits (with Retry-After), limit_mismatch, kind_conflict; with the wait allowed (wait_ms)", body = ProblemDetails, content_type = "application/problem+json", headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 410, description = "lease_lost: a retry with an Idempotency-Key whose lease has ended since the first answer", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name, invalid_ttl, invalid_body (limit missing or out of range)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/semaphores/{name}/leases[?wait_ms=N]`: 201 with a lease holding `permits`
/// permits, 409 `no_permits` when not enough are free after the wait.
// (Not in the doc comment, the operation's OpenAPI description.) Not an `async fn`, for the
// reason `leases::acquire` gives: a parked request's future keeps only what the wait and the
// answer need.
pub fn acquire(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<WaitQuery>,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<PermitBody>,
) -> impl Future<Output = Result<Response, Problem>> + Send {
    let asked = permit_request(&state, &caller, &name, idempotency, body);
    let wait = state.limits.wait(query.wait_ms);
    async move {
        let request = asked?;
        let (permits, limit) = (request.permits, request.limit);
        let locks = state.locks_for(&caller);
        let ask = Ask {
            name: &name,
            new_lease: true,
            joins_queue: false,
            wait,
            ttl: request.ttl.as_duration(),
            size: Size {
                holder: request.holder.as_ref().map_or(0, |h| h.as_str().len()),
                metadata: request
                    .metadata
                    .as_ref()
                    .map_or(0, crate::locks::Metadata::json_len),
                permits: u64::from(request.permits),
            },
        };
        let kept = request
            .idempotency
            .as_ref()
            .map(|key| locks.answer_kept(&name, key));
        let admission = Admission::acquire_or_replay(&state, &caller, &locks, ask, kept).await?;
        let grant = super::admission::unless_revoked(
            state.access.revocations.watch(&caller),
            locks.acquire_permits(&name, &request, wait),
        )
        .await?;
        match &grant {
            Ok(grant) => admission.granted(grant.lease_id, grant.expires_at).await,
            Err(_) => admission.done().await,
        }
        let grant = grant
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
            })
            .map_err(|p| p.waited(wait))?;
        let location = lease_path(&name, grant.lease_id);
        Ok(grant_response(&location, &name, grant, Some(wait), None))
    }
}

/// The permit request's body checked and made a domain value.
fn permit_request(
    state: &AppState,
    caller: &Caller<ClientRole>,
    name: &LockName,
    idempotency: Option<IdempotencyKey>,
    body: PermitBody,
) -> Result<PermitRequest, Problem> {
    caller.check_name(name)?;
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
    if let Some(own) = caller.quotas.max_permits
        && permits > own
    {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("this API key's leases may hold at most {own} permits"),
        ));
    }
    let ttl = match requested_ttl(state, caller, body.ttl_ms)? {
        Some(ttl) => ttl,
        None => default_ttl(state, caller)?,
    };
    Ok(PermitRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        limit,
        permits,
        idempotency: idempotency.map(|k| k.bound_to(&caller.idempotency_scope())),
    })
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/semaphores/{name}/leases/{id}")
}

#[utoipa::path(
    post,
    path = "/v1/semaphores/{name}/leases/{lease_id}/heartbeat",
    operation_id = "heartbeatSemaphoreLease",
    tag = "semaphores",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    request_body(content = Option<HeartbeatBody>, description = "Optional: a new TTL for this and later heartbeats", content_type = "application/json"),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
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
    )
)]
/// `POST /v1/semaphores/{name}/leases/{lease_id}/heartbeat`: every permit of the lease lives on.
pub async fn heartbeat(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<RenewalBody>, Problem> {
    renew(&state, &caller, Resource::Semaphore, lease, body).await
}

#[utoipa::path(
    delete,
    path = "/v1/semaphores/{name}/leases/{lease_id}",
    operation_id = "releaseSemaphoreLease",
    tag = "semaphores",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "The permits came back", body = ReleaseBody),
        (status = 400, description = "invalid_idempotency_key", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/semaphores/{name}/leases/{lease_id}`: the permits come back.
pub async fn release(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
    Idempotency(idempotency): Idempotency,
) -> Result<Response, Problem> {
    caller.check_name(&lease.name)?;
    let released = state
        .leases_for(&caller)
        .release(
            Resource::Semaphore,
            &lease.name,
            lease.id,
            &lease.token,
            true,
            None,
            idempotency
                .map(|k| k.bound_to(&caller.idempotency_scope()))
                .as_ref(),
        )
        .await;
    released_response(&state, &caller, &lease, released).await
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}/leases/{lease_id}",
    operation_id = "inspectSemaphoreLease",
    tag = "semaphores",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "The lease (never its token)", body = LeaseBody),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect_lease(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    lease: LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    inspect_any(&state, &caller, Resource::Semaphore, lease).await
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}",
    operation_id = "inspectSemaphore",
    tag = "semaphores",
    params(("name" = String, Path)),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Limit, permits in use, holders", body = SemaphoreBody),
        (status = 404, description = "lock_not_found: never used; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}`: limit, permits in use (expired ones do not count), holders.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<Json<SemaphoreBody>, Problem> {
    caller.check_name(&name)?;
    let Some(view) = state.locks_for(&caller).semaphore(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("semaphore {name} has never been used"),
        ));
    };
    let (waiting, waiting_count) = state.locks_for(&caller).waiters_of(&name).await?;
    let mut body = bodies::semaphore(view);
    body.waiting = waiting.into_iter().map(bodies::waiter).collect();
    body.waiting_count = waiting_count;
    Ok(Json(body))
}
