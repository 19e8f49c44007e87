//! RedLock leases on the ordinary lock routes: `POST /v1/locks/{name}/leases` with
//! `"kind": "redlock"` comes here ([`acquire`]); heartbeat, release and inspect of a lease the
//! main Redis does not know are asked of the RedLock nodes ([`renew`], [`release`],
//! [`inspect`]). A RedLock lease lives on the RedLock nodes only, so the main Redis answers
//! "no such lease" for it first: one extra call on the main Redis per RedLock heartbeat, and
//! none for any other lease.

use super::charges::Size;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};

use super::admission::{self, Admission, Ask};
use super::bodies::{self, WAIT_HEADER};
use super::extract::{Bearer, HeldLease, LeasePath};
use super::leases::follow_loss;
use crate::auth::{Caller, ClientRole, Principal};
use crate::locks::{IdempotencyKey, LockError, LockName, Ttl};
use crate::problem::{Problem, ProblemKind};
use crate::redlock::{RedGrant, RedRenewal, Redlock, RedlockError};
use crate::state::AppState;
use crate::wire::{AcquireBody, GrantBody, LeaseBody, ReleaseBody, RenewalBody, WaitQuery};

/// The kind RedLock leases are shown as.
const KIND: &str = "redlock";

fn disabled() -> Problem {
    Problem::new(
        ProblemKind::RedlockDisabled,
        "kind redlock needs RedLock nodes: start the server with --redlock-nodes URL,URL,URL \
         (LEASEHOLD_REDLOCK_NODES)",
    )
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `POST /v1/locks/{name}/leases` with `"kind": "redlock"` (see `acquire::acquire`).
pub(super) async fn acquire(
    state: AppState,
    caller: Caller<ClientRole>,
    name: LockName,
    query: WaitQuery,
    bearer: Bearer,
    idempotency: Option<IdempotencyKey>,
    body: AcquireBody,
) -> Result<Response, Problem> {
    let redlock = nodes_for(&state, &caller)?;
    // An Idempotency-Key is accepted (the official clients send one with every acquire) but
    // not kept: each node would keep its own record, and a retry could be answered by a
    // minority. A retry is a new attempt (the book's RedLock page).
    let _ = idempotency;
    let wait = state.limits.wait(query.wait_ms);
    let (request, token, ttl) =
        super::acquire::acquire_request(&state, &caller, &name, &bearer, None, body)?;
    let locks = state.locks_for(&caller);
    let ask = Ask {
        name: &name,
        new_lease: token.is_none(),
        joins_queue: false,
        wait,
        ttl: ttl.as_duration(),
        size: Size {
            holder: request.holder.as_ref().map_or(0, |h| h.as_str().len()),
            metadata: request
                .metadata
                .as_ref()
                .map_or(0, crate::locks::Metadata::json_len),
            permits: 0,
        },
    };
    let admission = Box::pin(Admission::acquire(&state, &caller, &locks, ask)).await?;
    let watched = state.access.revocations.watch(&caller);
    let acquired = admission::unless_revoked(
        watched,
        redlock.acquire(&name, request, token.clone(), ttl, wait),
    )
    .await?;
    match &acquired {
        Ok(g) if g.grant.new_lease => {
            admission
                .granted(g.grant.lease_id, g.grant.expires_at)
                .await;
        }
        Ok(g) => {
            admission
                .renewed(g.grant.lease_id, g.grant.expires_at)
                .await
        }
        Err(_) => admission.done().await,
    }
    match acquired {
        Ok(grant) => {
            if let Some(token) = &token {
                limit_reentry(&state, &redlock, &name, &grant, token).await?;
            }
            Ok(grant_response(&name, grant, wait))
        }
        Err(e) => Err(Problem::from(e).waited(wait)),
    }
}

/// A reentry past `--max-reentry-depth` is given back (one level, on every node) and
/// refused, as `acquire::limit_reentry` does for the other kinds.
async fn limit_reentry(
    state: &AppState,
    redlock: &Redlock,
    name: &LockName,
    red: &RedGrant,
    token: &crate::locks::LeaseToken,
) -> Result<(), Problem> {
    let cap = state.limits.per_lock.reentry_depth;
    if red.grant.new_lease || red.grant.reentry_count <= cap {
        return Ok(());
    }
    redlock
        .release(name, red.grant.lease_id, token, false)
        .await?;
    Err(Problem::new(
        ProblemKind::ReentryTooDeep,
        format!("a lease may re-enter at most {cap} levels deep (--max-reentry-depth)"),
    )
    .with("reentry_count", cap))
}

/// 201 (or 200 on reentry) with the nodes that granted it and its validity.
fn grant_response(name: &LockName, red: RedGrant, wait: Duration) -> Response {
    let RedGrant {
        grant,
        nodes_acked,
        validity,
    } = red;
    let status = if grant.new_lease {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let location = super::acquire::lease_path(name, grant.lease_id);
    let body = GrantBody {
        lease_id: bodies::lease_id(grant.lease_id),
        token: grant.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        kind: KIND.to_owned(),
        holder: grant.holder,
        fencing_token: grant.fencing_token.0,
        reentry_count: grant.reentry_count,
        permits: None,
        ttl_ms: grant.ttl_ms,
        expires_at: grant.expires_at.rfc3339(),
        wait_ms: Some(millis(wait)),
        replicas_acked: None,
        degraded: None,
        nodes_acked: Some(nodes_acked),
        validity_ms: Some(millis(validity)),
    };
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(WAIT_HEADER, HeaderValue::from(millis(wait)));
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    response
}

/// Whether a lock-route call the main Redis answered with `error` may be a RedLock lease's:
/// the main Redis does not know the lease, and RedLock is configured.
pub(super) fn may_be_redlock(state: &AppState, error: &LockError) -> bool {
    state.redlock.is_some() && matches!(error, LockError::UnknownLease)
}

/// The RedLock nodes in `caller`'s tenant; the call about to go to each of them is charged
/// as that many requests.
fn nodes_for(state: &AppState, caller: &Principal) -> Result<Redlock, Problem> {
    let redlock = state.redlock_for(caller).ok_or_else(disabled)?;
    state.access.charge(
        caller,
        u32::try_from(redlock.nodes().len()).unwrap_or(u32::MAX),
    )?;
    Ok(redlock)
}

/// A heartbeat of a RedLock lease: a majority must extend it.
pub(super) async fn renew(
    state: &AppState,
    caller: &Principal,
    lease: &HeldLease,
    ttl: Option<Ttl>,
) -> Result<Json<RenewalBody>, Problem> {
    let redlock = nodes_for(state, caller)?;
    let renewal = redlock
        .renew(&lease.name, lease.id, &lease.token, ttl)
        .await;
    match &renewal {
        Ok(r) => {
            let (id, until) = (r.renewal.lease_id, r.renewal.expires_at);
            let holder = r.renewal.holder.as_deref();
            admission::renewed(state, caller, &lease.name, id, holder, until).await;
        }
        Err(RedlockError::Lock(e)) => follow_loss(state, caller, &lease.name, lease.id, e).await,
        Err(RedlockError::NoQuorum { .. }) => {}
    }
    let RedRenewal {
        renewal,
        nodes_acked,
        validity,
    } = renewal?;
    let mut body = bodies::renewal(&lease.name, renewal);
    body.nodes_acked = Some(nodes_acked);
    body.validity_ms = Some(millis(validity));
    Ok(Json(body))
}

/// A release of a RedLock lease: on every node that answers.
pub(super) async fn release(
    state: &AppState,
    caller: &Principal,
    lease: &HeldLease,
    all: bool,
) -> Result<Response, Problem> {
    let redlock = nodes_for(state, caller)?;
    let released = redlock
        .release(&lease.name, lease.id, &lease.token, all)
        .await;
    match &released {
        Ok(r) if r.released => admission::ended(state, caller, &lease.name, lease.id).await,
        Ok(_) | Err(RedlockError::NoQuorum { .. }) => {}
        Err(RedlockError::Lock(e)) => follow_loss(state, caller, &lease.name, lease.id, e).await,
    }
    let body: ReleaseBody = bodies::release(&lease.name, released?);
    Ok(Json(body).into_response())
}

/// A RedLock lease as the nodes that know it see it.
pub(super) async fn inspect(
    state: &AppState,
    caller: &Principal,
    lease: &LeasePath,
) -> Result<Json<LeaseBody>, Problem> {
    let redlock = nodes_for(state, caller)?;
    let looked_up = redlock.lease(&lease.name, lease.id).await;
    if looked_up.is_err() {
        // Looked up in the history of every node.
        state.access.consume(caller, crate::auth::LOOKUP_COST);
    }
    let (view, _holding) = looked_up?;
    let mut body = bodies::lease(view);
    body.kind = KIND.to_owned();
    Ok(Json(body))
}

/// A watch of a RedLock lease (see `crate::redlock::watch`); `error` (what the main Redis
/// said) when the RedLock nodes do not know the lease either.
pub(super) async fn watch(
    state: &AppState,
    caller: &Principal,
    lease: &HeldLease,
    error: LockError,
) -> Result<crate::redlock::RedWatch, Problem> {
    let Some(redlock) = state.redlock_for(caller) else {
        return Err(error.into());
    };
    match redlock.watch(&lease.name, lease.id, &lease.token).await {
        Ok(watch) => Ok(watch),
        Err(LockError::LeaseLost(state)) => Err(LockError::LeaseLost(state).into()),
        Err(e @ (LockError::TokenMismatch | LockError::ShuttingDown)) => Err(e.into()),
        Err(e) if e.unavailable() => Err(e.into()),
        Err(_) => Err(error.into()),
    }
}

/// RedLock's refusals: no majority is 503 `no_quorum` (nothing of it was left on any node),
/// with the counts; the rest is what the nodes' majority said.
impl From<RedlockError> for Problem {
    fn from(e: RedlockError) -> Self {
        match e {
            RedlockError::NoQuorum {
                acked,
                quorum,
                nodes,
            } => Problem::new(ProblemKind::NoQuorum, e.to_string())
                .with("nodes_acked", acked)
                .with("quorum", quorum)
                .with("nodes", nodes)
                .retry_after(Duration::from_secs(1)),
            RedlockError::Lock(e) => e.into(),
        }
    }
}
