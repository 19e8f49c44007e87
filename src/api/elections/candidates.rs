//! A candidate's routes: campaign, poll, heartbeat, resign, watch.

use axum::Json;
use axum::extract::State;
use axum::response::Response;

use super::{in_line_estimate, standing_response};
use crate::api::admission::{self, Admission, Ask};
use crate::api::bodies;
use crate::api::charges::Size;
use crate::api::extract::{HeldLease, Idempotency, JsonBody, NamePath, Query};
use crate::api::leases::{default_ttl, max_lock_delay_ms, requested_ttl};
use crate::auth::{Caller, ClientRole};
use crate::leases::election::{Candidacy, ElectionName, Leader, Standing};
use crate::locks::{HolderLabel, IdempotencyKey, LockDelay};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{
    CampaignBody, CandidateBody, HeartbeatQuery, ProclaimBody, ResignedBody, WaitQuery,
};
use std::time::Duration;

/// 422 `invalid_body` for a value over [`Candidacy::VALUE_MAX`] bytes.
fn check_value(value: &str) -> Result<(), Problem> {
    if value.len() <= Candidacy::VALUE_MAX {
        return Ok(());
    }
    Err(Problem::new(
        ProblemKind::InvalidBody,
        format!(
            "value is text of at most {} bytes; this one has {}",
            Candidacy::VALUE_MAX,
            value.len()
        ),
    ))
}

/// The candidacy a campaign's body asks for.
fn candidacy(
    state: &AppState,
    caller: &Caller<ClientRole>,
    body: CampaignBody,
    idempotency: Option<IdempotencyKey>,
) -> Result<Candidacy, Problem> {
    check_value(&body.value)?;
    let ttl = match requested_ttl(state, caller, body.ttl_ms)? {
        Some(ttl) => ttl,
        None => default_ttl(state, caller)?,
    };
    Ok(Candidacy {
        value: body.value,
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        lock_delay: body
            .lock_delay_ms
            .map(|ms| LockDelay::parse(ms, max_lock_delay_ms(state, caller)))
            .transpose()?
            .flatten(),
        idempotency: idempotency.map(|k| k.bound_to(&caller.idempotency_scope())),
    })
}

#[utoipa::path(
    post,
    path = "/v1/elections/{name}/candidates",
    operation_id = "campaign",
    tag = "elections",
    params(("name" = String, Path, description = "The election's name (the syntax of a lock's)"), WaitQuery, ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retried campaign with the same key gets the first answer (the same candidate) instead of standing a second one")),
    request_body(content = CampaignBody, content_type = "application/json"),
    security((), ("api_key" = ["client"])),
    responses(
        (status = 201, description = "This candidate leads: its term (a fencing token) and token", body = CandidateBody, headers(("Location" = String, description = "The candidate's URL"))),
        (status = 202, description = "Someone else leads after the wait, or nobody does yet (the last term ran out with a lock-delay): the candidate keeps its place in line while it heartbeats", body = CandidateBody, headers(("Location" = String, description = "The candidate's URL"))),
        (status = 400, description = "malformed_json, invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: a retry with an Idempotency-Key whose first answer's candidate is out by now", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (value over 4096 bytes), invalid_ttl, invalid_holder, invalid_lock_delay, idempotency_key_reused", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/elections/{name}/candidates[?wait_ms=N]`: stands a candidate; 201 when it leads,
/// 202 with its place in line.
pub async fn campaign(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<WaitQuery>,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<CampaignBody>,
) -> Result<Response, Problem> {
    caller.check_name(&name)?;
    let name = ElectionName::new(name);
    let wait = state.limits.wait(query.wait_ms);
    let candidacy = candidacy(&state, &caller, body, idempotency)?;
    let value = candidacy.value.clone();
    let lock = name.lock();
    let leases = state.leases_for(&caller);
    let ask = Ask {
        name: &lock,
        new_lease: true,
        joins_queue: true,
        wait,
        ttl: candidacy.ttl.as_duration(),
        size: Size {
            holder: candidacy.holder.as_ref().map_or(0, |h| h.as_str().len()),
            metadata: value.len() + 16,
            permits: 0,
        },
    };
    let kept = candidacy
        .idempotency
        .as_ref()
        .map(|key| leases.answer_kept(&lock, None, key));
    let admission = Box::pin(Admission::acquire_or_replay(
        &state,
        &caller,
        leases.locks(),
        ask,
        kept,
    ))
    .await?;
    let watched = state.access.revocations.watch(&caller);
    let campaign = leases.campaign(&name, candidacy, wait);
    let standing = admission::unless_revoked(watched, campaign).await?;
    match &standing {
        Ok(Standing::Leads {
            candidate_id,
            expires_at,
            ..
        }) => admission.granted(*candidate_id, *expires_at).await,
        Ok(Standing::InLine {
            candidate_id,
            keep_by,
            ..
        }) => admission.granted(*candidate_id, *keep_by).await,
        Err(_) => admission.done().await,
    }
    let standing = standing.map_err(|e| Problem::from(e).waited(wait))?;
    let leader = match &standing {
        Standing::InLine { .. } => leases.election(&name).await?.leader,
        Standing::Leads { .. } => None,
    };
    let estimate = in_line_estimate(leases.locks(), &name, &standing, leader.as_ref()).await;
    Ok(standing_response(
        &name,
        standing,
        Some(value),
        (leader, estimate),
        Some(wait),
    ))
}

/// The value and leader to show with a standing that was not just made.
async fn shown(
    state: &AppState,
    caller: &Caller<ClientRole>,
    name: &ElectionName,
    standing: &Standing,
) -> Result<(Option<String>, (Option<Leader>, Option<Duration>)), Problem> {
    let leases = state.leases_for(caller);
    let leader = leases.election(name).await?.leader;
    let estimate = in_line_estimate(leases.locks(), name, standing, leader.as_ref()).await;
    Ok(match standing {
        Standing::Leads { candidate_id, .. } => (
            leader
                .filter(|l| l.candidate_id == Some(*candidate_id))
                .and_then(|l| l.value),
            (None, None),
        ),
        Standing::InLine { .. } => (None, (leader, estimate)),
    })
}

#[utoipa::path(
    get,
    path = "/v1/elections/{name}/candidates/{candidate_id}",
    operation_id = "pollCandidate",
    tag = "elections",
    params(("name" = String, Path), ("candidate_id" = String, Path, format = Uuid), WaitQuery),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "The candidate leads: its term", body = CandidateBody),
        (status = 202, description = "Still in line", body = CandidateBody),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such candidate; not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost, ticket_expired: the candidate is out (its term ended, or it lost its place)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/elections/{name}/candidates/{id}[?wait_ms=N]` (bearer token): 200 with its term
/// once it leads, 202 while in line, 410 once it is out.
pub async fn poll(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldLease,
    Query(query): Query<WaitQuery>,
) -> Result<Response, Problem> {
    caller.check_name(&held.name)?;
    let name = ElectionName::new(held.name);
    let wait = state.limits.wait(query.wait_ms);
    let leases = state.leases_for(&caller);
    let watched = state.access.revocations.watch(&caller);
    let polled = leases.poll_candidate(&name, held.id, held.token, wait);
    let standing = admission::unless_revoked(watched, polled).await??;
    let standing = match standing {
        Standing::Leads { .. } => mark_again(standing),
        in_line => in_line,
    };
    let (value, leader) = shown(&state, &caller, &name, &standing).await?;
    Ok(standing_response(
        &name,
        standing,
        value,
        leader,
        Some(wait),
    ))
}

/// A standing asked for again (no token in it): answered 200, not 201.
fn mark_again(standing: Standing) -> Standing {
    match standing {
        Standing::Leads {
            candidate_id,
            term,
            ttl_ms,
            expires_at,
            ..
        } => Standing::Leads {
            candidate_id,
            token: None,
            term,
            ttl_ms,
            expires_at,
            again: true,
        },
        in_line => in_line,
    }
}

#[utoipa::path(
    post,
    path = "/v1/elections/{name}/candidates/{candidate_id}/heartbeat",
    operation_id = "heartbeatCandidate",
    tag = "elections",
    params(("name" = String, Path), ("candidate_id" = String, Path, format = Uuid), HeartbeatQuery),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "The leader's term goes on for its TTL (or the candidate just came to lead, when no `term` was sent)", body = CandidateBody),
        (status = 202, description = "The candidate's place in line is kept", body = CandidateBody),
        (status = 401, description = "token_missing, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found; not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost, ticket_expired: the candidate is out (or, with `term`, that term is over); never renewed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/elections/{name}/candidates/{id}/heartbeat[?term=N]` (bearer token): keeps a
/// leader's term or a waiting candidate's place.
pub async fn heartbeat(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldLease,
    Query(query): Query<HeartbeatQuery>,
) -> Result<Response, Problem> {
    caller.check_name(&held.name)?;
    let name = ElectionName::new(held.name);
    let leases = state.leases_for(&caller);
    let standing = leases
        .heartbeat_candidate(&name, held.id, held.token, query.term)
        .await?;
    let standing = mark_again(standing);
    let (value, leader) = shown(&state, &caller, &name, &standing).await?;
    Ok(standing_response(&name, standing, value, leader, None))
}

#[utoipa::path(
    delete,
    path = "/v1/elections/{name}/candidates/{candidate_id}",
    operation_id = "resign",
    tag = "elections",
    params(("name" = String, Path), ("candidate_id" = String, Path, format = Uuid)),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Resigned (the next candidate leads at once) or left the line", body = ResignedBody),
        (status = 401, description = "token_missing, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found; not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: the candidate was out already", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/elections/{name}/candidates/{id}` (bearer token): resigns, or leaves the line.
pub async fn resign(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldLease,
) -> Result<Json<ResignedBody>, Problem> {
    caller.check_name(&held.name)?;
    let name = ElectionName::new(held.name);
    let leases = state.leases_for(&caller);
    let resigned = leases.resign(&name, held.id, &held.token).await;
    let lock = name.lock();
    match &resigned {
        Ok(()) => admission::ended(&state, &caller, &lock, held.id).await,
        Err(e) => crate::api::leases::follow_loss(&state, &caller, &lock, held.id, e).await,
    }
    resigned?;
    Ok(Json(ResignedBody {
        candidate_id: bodies::lease_id(held.id),
        election: name.to_string(),
        resigned: true,
    }))
}

#[utoipa::path(
    get,
    path = "/v1/elections/{name}/candidates/{candidate_id}/watch",
    operation_id = "watchCandidate",
    tag = "elections",
    params(("name" = String, Path), ("candidate_id" = String, Path, format = Uuid), crate::api::watch::WatchQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume: the count goes on after this id, and what still stands is told first")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events, each with an `id:`, as a lock lease's watch: while the candidate leads, `expiring`, `renewed`, `degraded`, `recovered`, `contended` (candidates in line) and `revocation_requested` (data: a WatchSignal); then one `event: lost` (a LostEvent: its term ended, with the reason; `lock` is the election's lock, `election/<name>`), and the end", body = crate::wire::LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found; not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending: the candidate is still in line", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: its term ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: expiring_slack_ms is 0 or not a number", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/elections/{name}/candidates/{id}/watch` (bearer token): a leader learns the
/// moment its term ends.
pub async fn watch(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    crate::api::extract::Query(query): crate::api::extract::Query<crate::api::watch::WatchQuery>,
    headers: axum::http::HeaderMap,
    held: HeldLease,
) -> Result<
    axum::response::sse::Sse<
        impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    Problem,
> {
    caller.check_name(&held.name)?;
    let lease = HeldLease {
        name: ElectionName::new(held.name).lock(),
        id: held.id,
        token: held.token,
    };
    let options = crate::api::watch::WatchOptions::new(&query, &headers)?;
    crate::api::watch::watch_named(state, &caller, crate::locks::Resource::Lock, lease, options)
        .await
}

#[utoipa::path(
    put,
    path = "/v1/elections/{name}/candidates/{candidate_id}/value",
    operation_id = "proclaim",
    tag = "elections",
    params(("name" = String, Path), ("candidate_id" = String, Path, format = Uuid)),
    request_body(content = ProclaimBody, content_type = "application/json"),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "The leader's new value, in the same term; observers get an `event: leader` with it", body = CandidateBody),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "token_missing, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found; not_found", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending: the candidate does not lead (it waits in line)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost: its term ended", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (value over 4096 bytes)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `PUT /v1/elections/{name}/candidates/{id}/value` (bearer token): the leader publishes a new
/// value in its term; 409 for a candidate that does not lead.
pub async fn proclaim(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    held: HeldLease,
    JsonBody(body): JsonBody<ProclaimBody>,
) -> Result<Json<CandidateBody>, Problem> {
    caller.check_name(&held.name)?;
    check_value(&body.value)?;
    let name = ElectionName::new(held.name);
    let leases = state.leases_for(&caller);
    let proclaimed = leases
        .proclaim(&name, held.id, &held.token, &body.value)
        .await?;
    Ok(Json(CandidateBody {
        candidate_id: bodies::lease_id(held.id),
        token: None,
        election: name.to_string(),
        term: Some(proclaimed.fencing_token.0),
        value: Some(body.value),
        ttl_ms: None,
        expires_at: Some(proclaimed.expires_at.rfc3339()),
        position: None,
        keep_by: None,
        leader: None,
        wait_ms: None,
        estimated_wait_ms: None,
    }))
}
