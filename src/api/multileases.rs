//! `/v1/multileases`: several locks taken as one lease, all or nothing (see
//! `leases::multi`). Each member counts as one lease against the caller's quotas and
//! waits as one waiter of its lock; the multilease's token proves every member.

use super::charges::Size;
use std::convert::Infallible;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse as _, Response};
use futures_util::Stream;

use super::admission::{self, Admission, Ask};
use super::bodies::{self, WAIT_HEADER};
use super::extract::{Bearer, Idempotency, JsonBody, Path, Query};
use super::leases::{default_ttl, requested_ttl};
use super::watch::WatchPlace;
use crate::auth::{Caller, ClientRole, LOOKUP_COST, Principal, ReaderRole};
use crate::leases::HeldMultilease;
use crate::locks::{
    HolderLabel, LeaseId, LeaseKind, LeaseToken, LockError, LockName, Metadata, MultiMember,
    MultiRequest, MultiView,
};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{
    HeartbeatBody, LostEvent, MultiAcquireBody, MultiGrantBody, MultiLeaseBody, MultiMemberBody,
    MultiMemberView, MultiReleaseBody, MultiRenewalBody, WaitQuery,
};

/// The `{lease_id}` of a multilease route; what is not a lease id names no multilease (404).
pub struct MultiPath(LeaseId);

impl<S: Send + Sync> FromRequestParts<S> for MultiPath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw): Path<String> = Path::from_request_parts(parts, state).await?;
        LeaseId::parse(&raw).map(Self).ok_or_else(|| {
            Problem::new(
                ProblemKind::LeaseNotFound,
                format!("{raw} is not a multilease id (ids are UUIDs)"),
            )
        })
    }
}

/// A multilease route called by its holder: the id and the token sent as bearer.
pub struct HeldMulti {
    id: LeaseId,
    token: LeaseToken,
}

impl<S: Send + Sync> FromRequestParts<S> for HeldMulti {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let MultiPath(id) = MultiPath::from_request_parts(parts, state).await?;
        let token = Bearer::from_request_parts(parts, state)
            .await?
            .lease_token()?
            .ok_or_else(|| {
                Problem::new(
                    ProblemKind::TokenMissing,
                    "send the multilease's token as Authorization: Bearer <token>",
                )
            })?;
        Ok(Self { id, token })
    }
}

/// The multilease `held` names, still held, within the caller's key's name patterns.
async fn held_multilease(
    state: &AppState,
    caller: &Principal,
    held: HeldMulti,
) -> Result<HeldMultilease, Problem> {
    let multilease = match state
        .leases_for(caller)
        .held_multilease(held.id, held.token)
        .await
    {
        Ok(multilease) => multilease,
        Err(e) => {
            lookup_failed(state, caller, &e);
            return Err(e.into());
        }
    };
    for name in multilease.locks() {
        caller.check_name(name)?;
    }
    Ok(multilease)
}

fn path(id: LeaseId) -> String {
    format!("/v1/multileases/{id}")
}

#[utoipa::path(
    post,
    path = "/v1/multileases",
    operation_id = "acquireMultilease",
    tag = "multileases",
    params(WaitQuery, ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer (the same multilease and token) instead of acting twice")),
    request_body(content = MultiAcquireBody, description = "The locks to take as one lease", content_type = "application/json"),
    security((), ("api_key" = ["client"])),
    responses(
        (status = 201, description = "Every lock held, as one lease (the token is shown only here and in replays)", body = MultiGrantBody, headers(("Location" = String, description = "The multilease's URL"), ("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 400, description = "invalid_idempotency_key, malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "lock_held (with Retry-After) when the wait ended with locks held by others (or in their lock-delay: code lock_delay in `members`), kind_conflict; `members` names each refused lock; nothing of the request is held", body = ProblemDetails, content_type = "application/problem+json", headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 410, description = "lease_lost: (a retry with an Idempotency-Key) the multilease of the first answer has ended", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused; invalid_lock_name, invalid_ttl, invalid_lock_delay, invalid_body (no locks, more than 16, one named twice, a redlock, metadata)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/multileases[?wait_ms=N]`: takes every lock named, all or nothing, waiting up to
/// `wait_ms` in all; 201 with one lease id and token, 409 naming the locks held by others.
pub async fn acquire(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    Query(query): Query<WaitQuery>,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<MultiAcquireBody>,
) -> Result<Response, Problem> {
    let wait = state.limits.wait(query.wait_ms);
    let request = multi_request(&state, &caller, idempotency, body)?;
    // One acquire per member (each try): as many requests' worth.
    state.access.charge(
        &caller,
        u32::try_from(request.members().len()).unwrap_or(u32::MAX),
    )?;
    let leases = state.leases_for(&caller);
    let mut admissions = Vec::with_capacity(request.members().len());
    let size = Size {
        holder: request.holder.as_ref().map_or(0, |h| h.as_str().len()),
        metadata: request
            .metadata
            .as_ref()
            .map_or(0, crate::locks::Metadata::json_len),
        permits: 0,
    };
    for member in request.members() {
        let ask = Ask {
            name: &member.name,
            new_lease: true,
            joins_queue: member.kind == LeaseKind::Fair,
            wait,
            ttl: request.ttl.as_duration(),
            size,
        };
        let kept = request
            .idempotency
            .as_ref()
            .map(|key| leases.claim_kept(key));
        admissions
            .push(Admission::acquire_or_replay(&state, &caller, leases.locks(), ask, kept).await?);
    }
    let watched = state.access.revocations.watch(&caller);
    let acquired = admission::unless_revoked(watched, leases.acquire_multi(request, wait)).await?;
    let grant = match acquired {
        Ok(grant) => grant,
        Err(e) => {
            for admission in admissions {
                admission.done().await;
            }
            return Err(Problem::from(e).waited(wait));
        }
    };
    for (admission, member) in admissions.into_iter().zip(&grant.members) {
        admission.granted(member.lease_id, grant.expires_at).await;
    }
    let replayed = grant.replayed;
    let body = MultiGrantBody {
        lease_id: bodies::lease_id(grant.lease_id),
        token: grant.token.expose().to_owned(),
        members: grant.members.into_iter().map(member_body).collect(),
        holder: grant.holder,
        ttl_ms: grant.ttl_ms,
        expires_at: grant.expires_at.rfc3339(),
        wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&path(grant.lease_id)) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(
        WAIT_HEADER,
        HeaderValue::from(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
    );
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The request's body checked and made a domain request.
fn multi_request(
    state: &AppState,
    caller: &Principal,
    idempotency: Option<crate::locks::IdempotencyKey>,
    body: MultiAcquireBody,
) -> Result<MultiRequest, Problem> {
    let mut members = Vec::with_capacity(body.locks.len());
    for lock in body.locks {
        let name = LockName::parse(&lock.name)?;
        caller.check_name(&name)?;
        if lock.kind == Some(crate::wire::LockKind::Redlock) {
            // A RedLock lives on the RedLock nodes, a multilease's members on the main Redis.
            return Err(Problem::new(
                ProblemKind::InvalidBody,
                format!("{name}: a RedLock cannot be part of a multilease"),
            ));
        }
        members.push(MultiMember {
            name,
            kind: lock.kind.map_or(LeaseKind::Reentrant, LeaseKind::from),
        });
    }
    let ttl = match requested_ttl(state, caller, body.ttl_ms)? {
        Some(ttl) => ttl,
        None => default_ttl(state, caller)?,
    };
    let mut request = MultiRequest::new(
        members,
        ttl,
        body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        body.metadata.map(Metadata::parse).transpose()?,
        idempotency.map(|k| k.bound_to(&caller.idempotency_scope())),
    )?;
    request.lock_delay = match body.lock_delay_ms {
        Some(ms) => {
            crate::locks::LockDelay::parse(ms, super::leases::max_lock_delay_ms(state, caller))?
        }
        None => None,
    };
    Ok(request)
}

fn member_body(m: crate::locks::MemberGrant) -> MultiMemberBody {
    MultiMemberBody {
        lock: m.name.to_string(),
        kind: m.kind.as_str().to_owned(),
        lease_id: bodies::lease_id(m.lease_id),
        fencing_token: m.fencing_token.0,
        replicas_acked: m.replicas_acked,
        degraded: m.degraded.map(super::bodies::degraded),
        revocation: m.revocation.as_ref().map(super::bodies::revocation_body),
    }
}

#[utoipa::path(
    post,
    path = "/v1/multileases/{lease_id}/heartbeat",
    operation_id = "heartbeatMultilease",
    tag = "multileases",
    params(("lease_id" = String, Path, format = Uuid, description = "The multilease's id")),
    request_body(content = Option<HeartbeatBody>, description = "Optional: a new TTL for every member, for this and later heartbeats", content_type = "application/json"),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Every member renewed", body = MultiRenewalBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this multilease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such multilease (or it ended long ago)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: a member's lease ended (`member`, `reason`: expired, force_released), so the multilease has; its other locks were given back", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_ttl", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/multileases/{lease_id}/heartbeat`: renews every member.
pub async fn heartbeat(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldMulti,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<MultiRenewalBody>, Problem> {
    let ttl = requested_ttl(&state, &caller, body.ttl_ms)?;
    let multilease = held_multilease(&state, &caller, held).await?;
    // One renewal per member: as many requests' worth.
    state.access.charge(&caller, member_count(&multilease))?;
    let renewed = state
        .leases_for(&caller)
        .renew_multi(&multilease, ttl)
        .await;
    let renewal = match renewed {
        Ok(renewal) => renewal,
        Err(e) => {
            lookup_failed(&state, &caller, &e);
            return Err(e.into());
        }
    };
    for member in &renewal.members {
        let (id, until) = (member.lease_id, renewal.expires_at);
        admission::renewed(&state, &caller, &member.name, id, None, until).await;
    }
    Ok(Json(MultiRenewalBody {
        lease_id: bodies::lease_id(renewal.lease_id),
        members: renewal.members.into_iter().map(member_body).collect(),
        ttl_ms: renewal.ttl_ms,
        expires_at: renewal.expires_at.rfc3339(),
    }))
}

/// A multilease that is unknown or gone costs the caller a lookup, as a lease's does.
fn lookup_failed(state: &AppState, caller: &Principal, error: &LockError) {
    if matches!(
        error,
        LockError::UnknownLease | LockError::LeaseLost(_) | LockError::MemberLost { .. }
    ) {
        state.access.consume(caller, LOOKUP_COST);
    }
}

#[utoipa::path(
    delete,
    path = "/v1/multileases/{lease_id}",
    operation_id = "releaseMultilease",
    tag = "multileases",
    params(("lease_id" = String, Path, format = Uuid, description = "The multilease's id")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Every member released (every reentry level); their waiters are woken", body = MultiReleaseBody),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this multilease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such multilease (or it ended long ago)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: it had ended already, or a member's lease had (`member`, `reason`); the other members were released all the same", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/multileases/{lease_id}`: releases every member.
pub async fn release(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldMulti,
) -> Result<Json<MultiReleaseBody>, Problem> {
    let id = held.id;
    let multilease = held_multilease(&state, &caller, held).await?;
    state.access.charge(&caller, member_count(&multilease))?;
    let released = state.leases_for(&caller).release_multi(&multilease).await;
    // Each member's quota entry ends with it.
    if released.is_ok() || matches!(released, Err(LockError::MemberLost { .. })) {
        for (name, member) in multilease.members() {
            admission::ended(&state, &caller, name, member).await;
        }
    }
    if let Err(e) = released {
        lookup_failed(&state, &caller, &e);
        return Err(e.into());
    }
    Ok(Json(MultiReleaseBody {
        lease_id: bodies::lease_id(id),
        released: true,
        locks: multilease.locks().map(ToString::to_string).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/v1/multileases/{lease_id}",
    operation_id = "inspectMultilease",
    tag = "multileases",
    params(("lease_id" = String, Path, format = Uuid, description = "The multilease's id")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "The multilease (never its token): its members, and whether it still holds them all", body = MultiLeaseBody),
        (status = 403, description = "name_not_allowed: a member is outside the key's name patterns", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such multilease (or it ended long ago)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/multileases/{lease_id}`: the multilease's members and state; never its token.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    MultiPath(id): MultiPath,
) -> Result<Json<MultiLeaseBody>, Problem> {
    let view = state.leases_for(&caller).multilease(id).await;
    let view = match view {
        Ok(view) => view,
        Err(e) => {
            lookup_failed(&state, &caller, &e);
            return Err(e.into());
        }
    };
    for member in &view.members {
        caller.check_name(&member.name)?;
    }
    Ok(Json(multilease_body(view)))
}

fn multilease_body(view: MultiView) -> MultiLeaseBody {
    MultiLeaseBody {
        lease_id: bodies::lease_id(view.lease_id),
        state: view.state,
        members: view
            .members
            .into_iter()
            .map(|m| MultiMemberView {
                lock: m.name.to_string(),
                kind: m.kind.as_str().to_owned(),
                lease_id: bodies::lease_id(m.lease_id),
            })
            .collect(),
        holder: view.holder,
        metadata: view.metadata.map(Metadata::into_value),
        lost_member: view.lost_member,
        ttl_ms: view.ttl_ms,
        remaining_ms: view.remaining_ms,
        acquired_at: view.acquired_at.rfc3339(),
        expires_at: view.expires_at.rfc3339(),
        ended_at: view.ended_at.map(|t| t.rfc3339()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/multileases/{lease_id}/watch",
    operation_id = "watchMultilease",
    tag = "multileases",
    params(("lease_id" = String, Path, format = Uuid, description = "The multilease's id"), super::watch::WatchQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume: the count goes on after this id, and what still stands is told first")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events, each with an `id:`: while every member holds, each member's `expiring`, `renewed`, `degraded`, `recovered`, `contended` and `revocation_requested` (data: a WatchSignal whose `lock` is the member); then one `event: lost` whose data is a LostEvent (JSON; `lock` is the member whose end ended the multilease), and the end; keep-alive comments every 15 s", body = LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this multilease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such multilease (or it ended long ago)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: it ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: expiring_slack_ms is 0 or not a number", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/multileases/{lease_id}/watch` (the multilease's token as bearer): one `lost`
/// event when its first member's lease ends.
pub async fn watch(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    super::extract::Query(query): super::extract::Query<super::watch::WatchQuery>,
    headers: axum::http::HeaderMap,
    held: HeldMulti,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, Problem> {
    let options = super::watch::WatchOptions::new(&query, &headers)?;
    let id = held.id;
    let multilease = held_multilease(&state, &caller, held).await?;
    let place = WatchPlace::take(&state, &caller)?;
    let telling = state
        .leases_for(&caller)
        .watch_multi(&multilease, options.slack)
        .await?;
    Ok(super::watch::signal_stream(
        &state,
        &caller,
        place,
        telling,
        super::watch::Told::new(id, String::new(), options.after),
    ))
}

/// A multilease's members, as requests' worth of work.
fn member_count(multilease: &HeldMultilease) -> u32 {
    u32::try_from(multilease.locks().count()).unwrap_or(u32::MAX)
}
