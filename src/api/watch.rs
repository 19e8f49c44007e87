//! `GET /v1/{locks|semaphores}/{name}/leases/{lease_id}/watch`: the lease's holder hears what
//! it needs to act on while the lease stands (`expiring`, `renewed`, `degraded`, `recovered`,
//! `contended`, `revocation_requested`: see [`crate::locks::ops::signals`]) and the moment it
//! ends (`lost`, with the reason), instead of at its next heartbeat. Every event has an `id:`
//! (a count within the stream); a watch opened again with `Last-Event-ID` goes on counting
//! from there and first tells whatever still stands (a revocation, the slack, the waiters),
//! so a reconnect misses nothing that still matters; a lease that ended meanwhile answers 410
//! with its reason. The stream ends after `lost`, and when the server shuts down. Each open
//! watch takes one of the instance's `--max-watches` places.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;

use super::bodies;
use super::events::stream_slot;
use super::extract::{HeldLease, Query};
use crate::auth::{Caller, ClientRole, Principal};
use crate::leases::Telling;
use crate::limits::slots::Slot;
use crate::locks::ops::signals::{Notice, Signal};
use crate::locks::{LeaseEnd, LeaseId, Resource};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{LostEvent, WatchSignal};

/// A watch's query: when `expiring` is told.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WatchQuery {
    /// Tell `expiring` once less than this is left with no heartbeat since (ms; default a
    /// third of the lease's TTL, at most half of it). Set by the watcher (the holder), so
    /// one lease may be watched with different slacks.
    #[param(minimum = 1)]
    pub expiring_slack_ms: Option<u64>,
}

/// How a watch tells: its slack, and the id its first event follows.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchOptions {
    pub slack: Option<Duration>,
    pub after: u64,
}

impl WatchOptions {
    pub fn new(query: &WatchQuery, headers: &HeaderMap) -> Result<Self, Problem> {
        let slack = match query.expiring_slack_ms {
            Some(0) => {
                return Err(Problem::new(
                    ProblemKind::InvalidQuery,
                    "expiring_slack_ms must be at least 1 (leave it out for a third of the TTL)",
                ));
            }
            ms => ms.map(Duration::from_millis),
        };
        // An id this server did not give (not a count) starts the count again.
        let after = headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Ok(Self { slack, after })
    }
}

#[utoipa::path(
    get,
    path = "/v1/locks/{name}/leases/{lease_id}/watch",
    operation_id = "watchLockLease",
    tag = "leases",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), WatchQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume: the count goes on after this id, and what still stands is told first")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events, each with an `id:`: while the lease holds, `expiring`, `renewed`, `degraded`, `recovered`, `contended` and `revocation_requested` (data: a WatchSignal, JSON); then one `event: lost` (data: a LostEvent) and the end; keep-alive comments every 15 s", body = LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending: the token is a queued ticket's", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released, left): it ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: expiring_slack_ms is 0 or not a number", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}/leases/{lease_id}/watch` (the lease's token as bearer).
pub async fn watch_lock_lease(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    Query(query): Query<WatchQuery>,
    headers: HeaderMap,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let options = WatchOptions::new(&query, &headers)?;
    watch(state, &caller, Resource::Lock, lease, options).await
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}/leases/{lease_id}/watch",
    operation_id = "watchSemaphoreLease",
    tag = "semaphores",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id"), WatchQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume: the count goes on after this id, and what still stands is told first")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events, each with an `id:`: while the lease holds its permits, `expiring`, `renewed`, `degraded`, `recovered`, `contended` and `revocation_requested` (data: a WatchSignal, JSON); then one `event: lost` (data: a LostEvent) and the end; keep-alive comments every 15 s", body = LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released): it ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query: expiring_slack_ms is 0 or not a number", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}/leases/{lease_id}/watch` (the lease's token as bearer).
pub async fn watch_semaphore_lease(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    Query(query): Query<WatchQuery>,
    headers: HeaderMap,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let options = WatchOptions::new(&query, &headers)?;
    watch(state, &caller, Resource::Semaphore, lease, options).await
}

async fn watch(
    state: AppState,
    caller: &Principal,
    resource: Resource,
    lease: HeldLease,
    options: WatchOptions,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, Problem> {
    caller.check_name(&lease.name)?;
    watch_named(state, caller, resource, lease, options).await
}

/// [`watch`] once the caller's name patterns allowed the name (an election's candidate:
/// its election's name, not its lock's).
pub(super) async fn watch_named(
    state: AppState,
    caller: &Principal,
    resource: Resource,
    lease: HeldLease,
    options: WatchOptions,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, Problem> {
    let place = WatchPlace::take(&state, caller)?;
    let leases = state.leases_for(caller);
    state
        .access
        .charge(caller, leases.cost_of(resource, lease.id))?;
    let telling = match leases
        .watch_telling(resource, &lease.name, lease.id, &lease.token, options.slack)
        .await
    {
        Ok(telling) => telling,
        Err(e) => return Err(lost_as_revoked(&leases, &lease.name, lease.id, e).await),
    };
    let told = Told::new(lease.id, lease.name.to_string(), options.after);
    Ok(signal_stream(&state, caller, place, telling, told))
}

/// Who a watch's events are about, and how many it has sent (its events' ids).
pub(super) struct Told {
    id: LeaseId,
    lock: String,
    count: u64,
}

impl Told {
    /// A watch of lease `id` of `lock` (a multilease's: its members name themselves), whose
    /// first event follows id `after`.
    pub(super) fn new(id: LeaseId, lock: String, after: u64) -> Self {
        Self {
            id,
            lock,
            count: after,
        }
    }

    fn next_id(&mut self) -> String {
        self.count += 1;
        self.count.to_string()
    }

    fn signal(&mut self, notice: &Notice) -> Event {
        let signal = &notice.signal;
        let mut body = WatchSignal {
            lease_id: bodies::lease_id(self.id),
            lock: notice
                .member
                .as_ref()
                .map_or_else(|| self.lock.clone(), ToString::to_string),
            remaining_ms: None,
            valid_until: None,
            since: None,
            waiters: None,
            revocation: None,
        };
        match signal {
            Signal::Expiring {
                remaining_ms,
                valid_until,
            } => {
                body.remaining_ms = Some(*remaining_ms);
                body.valid_until = Some(valid_until.rfc3339());
            }
            Signal::Renewed { valid_until } | Signal::Recovered { valid_until } => {
                body.valid_until = Some(valid_until.rfc3339());
            }
            Signal::Degraded { since, valid_until } => {
                body.since = Some(since.rfc3339());
                body.valid_until = Some(valid_until.rfc3339());
            }
            Signal::Contended { waiters } => body.waiters = Some(*waiters),
            Signal::RevocationRequested(revocation) => {
                body.revocation = Some(bodies::revocation_body(revocation));
            }
        }
        let data = serde_json::to_string(&body).unwrap_or_default();
        Event::default()
            .event(signal.name())
            .id(self.next_id())
            .data(data)
    }

    fn lost(&mut self, end: LeaseEnd, member: Option<crate::locks::LockName>) -> Event {
        let id = self.next_id();
        let lock = member.map_or_else(|| self.lock.clone(), |m| m.to_string());
        lost_event_with(self.id, lock, end, Some(id))
    }
}

/// `e` as the caller is told it: a lease that ended other than by a release after an operator
/// revoked it is lost with reason `revoked` (as its watch said), not `force_released` or
/// `expired` (one read of its revocation record, on that error only).
pub(super) async fn lost_as_revoked(
    leases: &crate::leases::Leases,
    name: &crate::locks::LockName,
    id: LeaseId,
    e: crate::leases::LeaseError,
) -> Problem {
    use crate::locks::{LeaseState, LockError};
    let Some(LockError::LeaseLost(LeaseState::ForceReleased | LeaseState::Expired)) = e.as_lock()
    else {
        return e.into();
    };
    match leases.locks().revocations_of(name).await {
        Ok(revocations) if revocations.contains_key(&id) => Problem::new(
            ProblemKind::LeaseLost,
            "the lease no longer holds the lock: an operator revoked it and its grace ended \
             before it was released; acquire a new lease",
        )
        .with("reason", "revoked"),
        _ => e.into(),
    }
}

/// A telling watch's stream: a `watching` comment, its signals as they come, then `lost`
/// (none when the end could not be read) and the end; it also ends at shutdown, and when
/// the key or session `caller` opened it with is revoked (as `/v1/events` does).
pub(super) fn signal_stream(
    state: &AppState,
    caller: &Principal,
    place: WatchPlace,
    telling: Telling,
    told: Told,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let Telling { signals, ended } = telling;
    let events = futures_util::stream::unfold(
        (Some((signals, ended, place)), told),
        |(live, mut told)| async move {
            let (mut signals, mut ended, place) = live?;
            tokio::select! {
                biased;
                Some(signal) = signals.recv() => {
                    let event = told.signal(&signal);
                    Some((Some(event), (Some((signals, ended, place)), told)))
                }
                end = &mut ended => {
                    // (Signals sent before the end came first: `biased`.)
                    drop(place);
                    let event = end.ok().map(|(end, member)| told.lost(end, member));
                    Some((event, (None, told)))
                }
            }
        },
    )
    .filter_map(std::future::ready)
    .map(Ok);
    let hello = futures_util::stream::once(async { Ok(Event::default().comment("watching")) });
    let stream = hello
        .chain(events)
        .take_until(super::events::stream_end(state, caller));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A lease watch's places: one of the caller's event streams (as `/v1/events` is) and one of
/// the instance's `--max-watches`, given back when the stream ends or its client goes away.
pub(super) struct WatchPlace {
    _stream: Slot,
    _watch: tokio::sync::OwnedSemaphorePermit,
}

impl WatchPlace {
    /// Taken first: a full instance refuses before it reads anything from Redis.
    pub(super) fn take(state: &AppState, caller: &Principal) -> Result<Self, Problem> {
        let stream = stream_slot(state, caller)?;
        let watch = state.watches.clone().try_acquire_owned().map_err(|_| {
            Problem::new(
                ProblemKind::TooManyWatches,
                "this instance keeps as many lease watches open as it may (--max-watches); \
                 try another instance, or rely on heartbeats",
            )
            .retry_after(Duration::from_secs(1))
        })?;
        Ok(Self {
            _stream: stream,
            _watch: watch,
        })
    }
}

/// The `lost` event, with its `id:` (before its data, as every other event's).
fn lost_event_with(id: LeaseId, lock: String, end: LeaseEnd, event_id: Option<String>) -> Event {
    let body = LostEvent {
        lease_id: bodies::lease_id(id),
        lock,
        reason: end.reason().to_owned(),
        ended_at: end.ended_at.map(|t| t.rfc3339()),
    };
    let data = serde_json::to_string(&body).unwrap_or_default();
    let event = Event::default().event("lost");
    match event_id {
        Some(n) => event.id(n).data(data),
        None => event.data(data),
    }
}
