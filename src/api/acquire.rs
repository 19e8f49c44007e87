//! `POST /v1/locks/{name}/leases` (acquire, or re-enter with the bearer token) and the fair
//! queue's tickets: `GET` (poll) and `DELETE` (leave) `/v1/locks/{name}/tickets/{id}`.

use super::admission::{self, Admission, Ask};
use super::bodies::{self, grant_response, refused_after, ticket_response};
use super::charges::Size;
use super::contention;
use super::extract::{Bearer, HeldLease, Idempotency, JsonBody, NamePath, Query};
use super::leases::{default_ttl, follow_loss, requested_ttl};
use crate::auth::{Caller, ClientRole};
use crate::leases::{Granted, LeaseError, Leases, QuorumAck};
use crate::locks::{
    AcquireRequest, Acquired, Grant, HolderLabel, IdempotencyKey, LeaseId, LeaseKind, LeaseToken,
    LockDelay, LockName, Metadata, Resource, RwMode, RwPolicy, Ttl,
};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{AcquireBody, GrantBody, LeftBody, TicketBody, WaitQuery};
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use futures_util::future::{self, Either};
use std::time::Duration;

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/leases",
    operation_id = "acquireLock",
    tag = "leases",
    params(("name" = String, Path), WaitQuery, ("Idempotency-Key" = Option<String>, Header, pattern = "^[ -~]{1,255}$", description = "1-255 printable ASCII characters (a UUID is best): a retry with the same key and request gets the first answer instead of acting twice")),
    request_body(content = Option<AcquireBody>, description = "Every field optional; an empty body is fine", content_type = "application/json"),
    security((), ("api_key" = ["client"]), ("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
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
        (status = 409, description = "lock_held (with Retry-After), lock_delay (nobody holds the lock, but its last lease ended without a release and asked for a lock-delay: delayed_until, with Retry-After), kind_conflict, not_reentrant, upgrade_refused, ticket_pending; with the wait allowed (wait_ms)", body = ProblemDetails, content_type = "application/problem+json", headers(("Leasehold-Wait-Ms" = u64, description = "The server-side wait this request was allowed, in ms (wait_ms cut to --max-wait-ms)"))),
        (status = 410, description = "lease_lost: the bearer token's lease has ended, or (a retry with an Idempotency-Key) the lease of the first answer has; ticket_expired", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused: the key came with another request first; invalid_lock_name, invalid_ttl, invalid_lock_delay (above --max-lock-delay-ms), invalid_body", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/leases[?wait_ms=N]`: 201 with a new lease, 200 on reentry (with the
/// lease's token as bearer), 409 when held by another after the wait.
// (Not in the doc comment, which is the operation's OpenAPI description.) Not an `async fn`,
// and shaped for the parked waiter, whose request future lives for its whole wait and is
// allocated at the size of its largest step:
// - the lock's waiting future is made (and boxed) before the rest, and owns the request: an
//   async fn or block keeps what it captures for its whole run, also once moved on;
// - the steps before and after the wait are boxed, so only the wait sets the size;
// - the caller is let go once admitted.
#[allow(clippy::too_many_arguments)] // One extractor per part of the request.
pub fn acquire(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<WaitQuery>,
    bearer: Bearer,
    Idempotency(idempotency): Idempotency,
    JsonBody(body): JsonBody<AcquireBody>,
) -> impl Future<Output = Result<Response, Problem>> + Send {
    let wait = state.limits.wait(query.wait_ms);
    let (request, token, ttl) =
        match acquire_request(&state, &caller, &name, &bearer, idempotency, body) {
            Ok(asked) => asked,
            Err(problem) => return Either::Left(future::ready(Err(problem))),
        };
    let (kind, policy) = (request.kind, request.policy);
    let lease_ttl = ttl.as_duration();
    let size = Size {
        holder: request.holder.as_ref().map_or(0, |h| h.as_str().len()),
        metadata: request
            .metadata
            .as_ref()
            .map_or(0, crate::locks::Metadata::json_len),
        permits: 0,
    };
    // Boxed: the waiting future keeps it for the whole wait, and most requests have none.
    let retry_key = request.idempotency.clone().map(Box::new);
    let leases = state.leases_for(&caller);
    // A RedLock acquire is a call on every node, each charged as a request.
    if let Err(problem) = state.access.charge(&caller, leases.cost_of_kind(kind)) {
        return Either::Left(future::ready(Err(problem)));
    }
    // The wait runs from here: admission is part of it.
    let acquiring = Box::pin(leases.acquire(&name, request, token.clone(), ttl, wait));
    Either::Right(async move {
        let ask = Ask {
            name: &name,
            new_lease: token.is_none(),
            joins_queue: token.is_none() && kind == Some(LeaseKind::Fair),
            wait,
            ttl: lease_ttl,
            size,
        };
        let kept = retry_key
            .as_deref()
            .map(|key| leases.answer_kept(&name, kind, key));
        let admission = Box::pin(Admission::acquire_or_replay(
            &state,
            &caller,
            leases.locks(),
            ask,
            kept,
        ))
        .await?;
        let watched = state.access.revocations.watch(&caller);
        drop(caller);
        let acquired = admission::unless_revoked(watched, acquiring).await?;
        let acquisition = Acquisition {
            state: &state,
            leases: &leases,
            name: &name,
            kind,
            policy,
            token: token.as_ref(),
            wait,
        };
        Box::pin(acquisition.answer(admission, acquired)).await
    })
}

/// An acquire request once its wait is over.
pub(super) struct Acquisition<'a> {
    state: &'a AppState,
    leases: &'a Leases,
    name: &'a LockName,
    kind: Option<LeaseKind>,
    policy: RwPolicy,
    /// The bearer's token: a reentry.
    token: Option<&'a LeaseToken>,
    wait: Duration,
}

impl Acquisition<'_> {
    /// Settles the caller's accounts and answers.
    async fn answer(
        self,
        admission: Admission,
        granted: Result<Granted, LeaseError>,
    ) -> Result<Response, Problem> {
        match granted.as_ref().map(|g| &g.acquired) {
            Ok(Acquired::Granted(grant)) if grant.new_lease => {
                admission.granted(grant.lease_id, grant.expires_at).await;
            }
            Ok(Acquired::Queued(ticket)) => {
                admission.granted(ticket.lease_id, ticket.poll_by).await;
            }
            Ok(Acquired::Granted(grant)) => {
                admission.renewed(grant.lease_id, grant.expires_at).await;
            }
            Err(_) => admission.done().await,
        }
        let Granted { acquired, quorum } = match granted {
            Ok(granted) => granted,
            Err(LeaseError::Lock(e)) => {
                let locks = self.leases.locks();
                let problem =
                    contention::explain(locks, self.name, self.kind, self.policy, e).await;
                return Err(problem.waited(self.wait));
            }
            Err(e) => return Err(Problem::from(e).waited(self.wait)),
        };
        if let (Acquired::Granted(grant), Some(token)) = (&acquired, self.token) {
            limit_reentry(self.state, self.leases, self.name, grant, token).await?;
        }
        let estimate = turn_estimate(self.leases.locks(), self.name, &acquired).await;
        Ok(acquired_response(
            self.name,
            acquired,
            quorum,
            self.state.limits.ticket_timeout_ms,
            (self.wait, estimate),
        ))
    }
}

/// The acquire request's body and bearer checked and made domain values: the request, the
/// bearer's lease token (a reentry) and the TTL a new lease gets.
pub(super) fn acquire_request(
    state: &AppState,
    caller: &Caller<ClientRole>,
    name: &LockName,
    bearer: &Bearer,
    idempotency: Option<IdempotencyKey>,
    body: AcquireBody,
) -> Result<(AcquireRequest, Option<LeaseToken>, Ttl), Problem> {
    caller.check_name(name)?;
    let token = bearer.lease_token()?;
    let ttl = requested_ttl(state, caller, body.ttl_ms)?;
    let request = AcquireRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        kind: body.kind.map(LeaseKind::from),
        policy: body.policy,
        idempotency: idempotency.map(|k| k.bound_to(&caller.idempotency_scope())),
        lock_delay: body
            .lock_delay_ms
            .map(|ms| LockDelay::parse(ms, super::leases::max_lock_delay_ms(state, caller)))
            .transpose()?
            .flatten(),
    };
    let ttl = ttl.unwrap_or(default_ttl(state, caller)?);
    Ok((request, token, ttl))
}

/// A reentry past `--max-reentry-depth` is taken back (one level released) and refused. Done
/// after the fact because the acquire script knows the depth only once it has counted it; a
/// script-side check would refuse it before counting.
pub(super) async fn limit_reentry(
    state: &AppState,
    leases: &Leases,
    name: &LockName,
    grant: &Grant,
    token: &LeaseToken,
) -> Result<(), Problem> {
    let cap = state.limits.per_lock.reentry_depth;
    if grant.new_lease || grant.replayed || grant.reentry_count <= cap {
        return Ok(());
    }
    let mode = match grant.kind {
        LeaseKind::Read => Some(RwMode::Read),
        LeaseKind::Write => Some(RwMode::Write),
        _ => None,
    };
    leases
        .release(
            Resource::Lock,
            name,
            grant.lease_id,
            token,
            false,
            mode,
            None,
        )
        .await?;
    Err(Problem::new(
        ProblemKind::ReentryTooDeep,
        format!("a lease may re-enter at most {cap} levels deep (--max-reentry-depth)"),
    )
    .with("reentry_count", cap))
}

/// 201/200 for a grant, 202 for a fair-queue ticket; both say the wait they were allowed.
pub(super) fn acquired_response(
    name: &LockName,
    acquired: Acquired,
    quorum: Option<QuorumAck>,
    ticket_ms: u64,
    (wait, estimate): (Duration, Option<Duration>),
) -> Response {
    match acquired {
        Acquired::Granted(grant) => {
            let location = lease_path(name, grant.lease_id);
            grant_response(&location, name, grant, Some(wait), quorum)
        }
        Acquired::Queued(ticket) => ticket_response(name, ticket, ticket_ms, (wait, estimate)),
    }
}

/// How long a ticket may still wait for its turn ("why am I waiting?"; none for a grant).
async fn turn_estimate(
    locks: &crate::locks::Locks,
    name: &LockName,
    acquired: &Acquired,
) -> Option<Duration> {
    let Acquired::Queued(ticket) = acquired else {
        return None;
    };
    let current = ticket.behind.as_ref().map(|b| b.held_for);
    let ahead = ticket.position.saturating_sub(1);
    locks.estimated_wait(name, current, ahead).await
}

pub(super) fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/locks/{name}/leases/{id}")
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    operation_id = "pollTicket",
    tag = "leases",
    params(("name" = String, Path), ("ticket_id" = String, Path, format = Uuid, description = "The ticket's id (also its lease's)"), WaitQuery),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
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
pub fn poll_ticket(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    ticket: HeldLease,
    Query(query): Query<WaitQuery>,
) -> impl Future<Output = Result<Response, Problem>> + Send {
    // Not an `async fn`, as `acquire` says: the poll may park for its whole wait.
    let allowed = caller.check_name(&ticket.name);
    let wait = state.limits.wait(query.wait_ms);
    async move {
        allowed?;
        let locks = state.locks_for(&caller);
        let ask = Ask {
            name: &ticket.name,
            new_lease: false,
            joins_queue: false,
            wait,
            ttl: Duration::ZERO,
            size: Size::default(),
        };
        let admission = Admission::acquire(&state, &caller, &locks, ask).await?;
        let acquired = admission::unless_revoked(
            state.access.revocations.watch(&caller),
            locks.poll_ticket(&ticket.name, ticket.id, ticket.token, wait),
        )
        .await?;
        admission.done().await;
        match &acquired {
            Ok(Acquired::Granted(grant)) => {
                let holder = grant.holder.as_deref();
                let (id, until) = (grant.lease_id, grant.expires_at);
                admission::renewed(&state, &caller, &ticket.name, id, holder, until).await;
            }
            Ok(Acquired::Queued(queued)) => {
                let (id, until) = (queued.lease_id, queued.poll_by);
                admission::renewed(&state, &caller, &ticket.name, id, None, until).await;
            }
            Err(e) => follow_loss(&state, &caller, &ticket.name, ticket.id, e).await,
        }
        let acquired = acquired.map_err(|e| refused_after(e, wait))?;
        let estimate = turn_estimate(&locks, &ticket.name, &acquired).await;
        Ok(acquired_response(
            &ticket.name,
            acquired,
            None,
            state.limits.ticket_timeout_ms,
            (wait, estimate),
        ))
    }
}

#[utoipa::path(
    delete,
    path = "/v1/locks/{name}/tickets/{ticket_id}",
    operation_id = "leaveQueue",
    tag = "leases",
    params(("name" = String, Path), ("ticket_id" = String, Path, format = Uuid, description = "The ticket's id (also its lease's)")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
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
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    ticket: HeldLease,
) -> Result<Json<LeftBody>, Problem> {
    caller.check_name(&ticket.name)?;
    let left = state
        .locks_for(&caller)
        .leave(&ticket.name, ticket.id, &ticket.token)
        .await;
    match &left {
        Ok(_) => admission::ended(&state, &caller, &ticket.name, ticket.id).await,
        Err(e) => follow_loss(&state, &caller, &ticket.name, ticket.id, e).await,
    }
    left?;
    Ok(Json(LeftBody {
        ticket_id: bodies::lease_id(ticket.id),
        lock: ticket.name.to_string(),
        left: true,
    }))
}
