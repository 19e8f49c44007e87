//! `/v1/locks/{name}/leases` and `/v1/locks/{name}/tickets`: acquire, heartbeat, release and
//! inspect leases; poll and leave fair tickets. Heartbeat, release and inspect are shared with
//! the semaphore routes (`semaphores`), which differ only in the resource they name.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse as _, Response};

use super::admission::{self};
use super::bodies::{self};
use super::extract::{HeldLease, Idempotency, JsonBody, LeasePath, Query};
use crate::auth::{Caller, ClientRole, LOOKUP_COST, Principal, ReaderRole};
use crate::leases::{LeaseError, Renewed};
use crate::locks::{LeaseId, LockError, LockName, Resource, Ttl};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{HeartbeatBody, LeaseBody, ReleaseBody, ReleaseQuery, RenewalBody};

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases/{lease_id}/heartbeat",
    operation_id = "heartbeatLockLease",
    tag = "leases",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    request_body(content = Option<HeartbeatBody>, description = "Optional: a new TTL for this and later heartbeats", content_type = "application/json"),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
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
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<RenewalBody>, Problem> {
    renew(&state, &caller, Resource::Lock, lease, body).await
}

/// A heartbeat on either resource; the caller's quota entry for the lease follows it.
pub(super) async fn renew(
    state: &AppState,
    caller: &Principal,
    resource: Resource,
    lease: HeldLease,
    body: HeartbeatBody,
) -> Result<Json<RenewalBody>, Problem> {
    caller.check_name(&lease.name)?;
    let ttl = requested_ttl(state, caller, body.ttl_ms)?;
    let leases = state.leases_for(caller);
    state
        .access
        .charge(caller, leases.cost_of(resource, lease.id))?;
    let renewed = leases
        .renew(resource, &lease.name, lease.id, &lease.token, ttl)
        .await;
    match &renewed {
        Ok(Renewed { renewal: r, .. }) => {
            admission::renewed(
                state,
                caller,
                &lease.name,
                r.lease_id,
                r.holder.as_deref(),
                r.expires_at,
            )
            .await;
        }
        Err(e) => follow_loss(state, caller, &lease.name, lease.id, e).await,
    }
    match renewed {
        Ok(renewed) => Ok(Json(bodies::renewal(&lease.name, renewed))),
        Err(e) => Err(super::watch::lost_as_revoked(&leases, &lease.name, lease.id, e).await),
    }
}

/// A lease the domain says is gone stops counting against the caller's quota.
pub(super) async fn follow_loss(
    state: &AppState,
    caller: &Principal,
    name: &LockName,
    id: LeaseId,
    error: &(impl AsLockError + ?Sized),
) {
    if matches!(
        error.as_lock_error(),
        Some(LockError::LeaseLost(_) | LockError::UnknownLease | LockError::TicketExpired)
    ) {
        state.access.consume(caller, LOOKUP_COST);
        admission::ended(state, caller, name, id).await;
    }
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/leases/{lease_id}",
    operation_id = "releaseLockLease",
    tag = "leases",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), ReleaseQuery, ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Released one level (or all); `released` when the lease holds nothing any more (other leases, such as other readers, may still hold the lock)", body = ReleaseBody),
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
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
    Query(query): Query<ReleaseQuery>,
    Idempotency(idempotency): Idempotency,
) -> Result<Response, Problem> {
    caller.check_name(&lease.name)?;
    let leases = state.leases_for(&caller);
    state
        .access
        .charge(&caller, leases.cost_of(Resource::Lock, lease.id))?;
    let released = leases
        .release(
            Resource::Lock,
            &lease.name,
            lease.id,
            &lease.token,
            query.all,
            query.mode,
            idempotency
                .map(|k| k.bound_to(&caller.idempotency_scope()))
                .as_ref(),
        )
        .await;
    released_response(&state, &caller, &lease, released).await
}

/// A release's answer; a lease let go (or found gone) stops counting against the caller.
pub(super) async fn released_response(
    state: &AppState,
    caller: &Principal,
    lease: &HeldLease,
    released: Result<crate::locks::Release, LeaseError>,
) -> Result<Response, Problem> {
    match &released {
        Ok(r) if r.released => admission::ended(state, caller, &lease.name, lease.id).await,
        Ok(_) => {}
        Err(e) => follow_loss(state, caller, &lease.name, lease.id, e).await,
    }
    let released = released?;
    let replayed = released.replayed;
    let mut response = Json(bodies::release(&lease.name, released)).into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/v1/locks/{name}/leases/{lease_id}",
    operation_id = "inspectLockLease",
    tag = "leases",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "The lease (never its token)", body = LeaseBody),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    lease: LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    inspect_lease(&state, &caller, Resource::Lock, lease).await
}

/// A lease as any reader may see it, on either resource.
pub(super) async fn inspect_lease(
    state: &AppState,
    caller: &Principal,
    resource: Resource,
    lease: LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    caller.check_name(&lease.name)?;
    let leases = state.leases_for(caller);
    state
        .access
        .charge(caller, leases.cost_of(resource, lease.id))?;
    let view = leases.lease(resource, &lease.name, lease.id).await;
    if view.is_err() {
        state.access.consume(caller, LOOKUP_COST);
    }
    let view = view?.seen_by(&|lock| caller.patterns.allows(lock));
    Ok(Json(bodies::lease(view)))
}

/// The TTL a request names, within the server's bounds and the caller's key's.
pub(super) fn requested_ttl(
    state: &AppState,
    caller: &Principal,
    ttl_ms: Option<u64>,
) -> Result<Option<Ttl>, Problem> {
    let Some(ms) = ttl_ms else {
        return Ok(None);
    };
    let ttl = state.limits.ttl.parse(ms)?;
    match caller.quotas.max_ttl_ms {
        Some(max) if ms > max => Err(Problem::new(
            ProblemKind::InvalidTtl,
            format!("this API key's leases may last at most {max} ms"),
        )),
        _ => Ok(Some(ttl)),
    }
}

/// The server's default TTL, cut to the caller's key's bound.
pub(super) fn default_ttl(state: &AppState, caller: &Principal) -> Result<Ttl, Problem> {
    let policy = state.limits.ttl;
    match caller.quotas.max_ttl_ms {
        Some(max) if max < policy.default_ms => Ok(policy.parse(max.max(policy.min_ms))?),
        _ => Ok(policy.default_ttl()),
    }
}

/// The longest lock-delay `caller` may ask for: the server's `--max-lock-delay-ms`, and no
/// longer than its key's `max_ttl_ms` (a delay holds a name as long as a lease would).
pub(super) fn max_lock_delay_ms(state: &AppState, caller: &Principal) -> u64 {
    let server = state.limits.max_lock_delay_ms;
    caller
        .quotas
        .max_ttl_ms
        .map_or(server, |ttl| server.min(ttl))
}

/// An error that may be what a lease's store said (whose losses [`follow_loss`] follows).
pub(super) trait AsLockError {
    fn as_lock_error(&self) -> Option<&LockError>;
}

impl AsLockError for LockError {
    fn as_lock_error(&self) -> Option<&LockError> {
        Some(self)
    }
}

impl AsLockError for LeaseError {
    fn as_lock_error(&self) -> Option<&LockError> {
        self.as_lock()
    }
}
