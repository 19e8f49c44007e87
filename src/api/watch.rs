//! `GET /v1/{locks|semaphores}/{name}/leases/{lease_id}/watch`: the lease's holder learns the
//! moment its lease ends, as one server-sent event `lost` with the reason, instead of at its
//! next heartbeat. Until then the stream carries keep-alive comments only; it ends after
//! `lost`, and when the server shuts down. Each open watch takes one of the instance's
//! `--max-watches` places.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};

use super::bodies;
use super::events::stream_slot;
use super::extract::HeldLease;
use crate::auth::{Caller, ClientRole, Principal};
use crate::limits::slots::Slot;
use crate::locks::{LeaseEnd, Resource};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::LostEvent;

#[utoipa::path(
    get,
    path = "/v1/locks/{name}/leases/{lease_id}/watch",
    operation_id = "watchLockLease",
    tag = "leases",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events: nothing but keep-alive comments while the lease holds, then one `event: lost` whose data is a LostEvent (JSON), and the end; keep-alive comments every 15 s", body = LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "ticket_pending: the token is a queued ticket's", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released, left): it ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}/leases/{lease_id}/watch` (the lease's token as bearer).
pub async fn watch_lock_lease(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    watch(state, &caller, Resource::Lock, lease).await
}

#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}/leases/{lease_id}/watch",
    operation_id = "watchSemaphoreLease",
    tag = "semaphores",
    params(("name" = String, Path), ("lease_id" = String, Path, format = Uuid, description = "The lease's id")),
    security(("lease_token" = []), ("api_key" = ["client"], "lease_token" = [])),
    responses(
        (status = 200, description = "Server-sent events: nothing but keep-alive comments while the lease holds its permits, then one `event: lost` whose data is a LostEvent (JSON), and the end; keep-alive comments every 15 s", body = LostEvent, content_type = "text/event-stream"),
        (status = 401, description = "token_missing, token_malformed (with WWW-Authenticate: Bearer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "token_mismatch: the token does not prove this lease", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "lease_not_found: no such lease (or it ended long ago); not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 410, description = "lease_lost (reason: expired, released, force_released): it ended before the watch began", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/semaphores/{name}/leases/{lease_id}/watch` (the lease's token as bearer).
pub async fn watch_semaphore_lease(
    caller: Caller<ClientRole>,
    State(state): State<AppState>,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    watch(state, &caller, Resource::Semaphore, lease).await
}

async fn watch(
    state: AppState,
    caller: &Principal,
    resource: Resource,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, Problem> {
    caller.check_name(&lease.name)?;
    watch_named(state, caller, resource, lease).await
}

/// [`watch`] once the caller's name patterns allowed the name (an election's candidate:
/// its election's name, not its lock's).
pub(super) async fn watch_named(
    state: AppState,
    caller: &Principal,
    resource: Resource,
    lease: HeldLease,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, Problem> {
    let place = WatchPlace::take(&state, caller)?;
    let leases = state.leases_for(caller);
    state
        .access
        .charge(caller, leases.cost_of(resource, lease.id))?;
    let ended = leases
        .watch(resource, &lease.name, lease.id, &lease.token)
        .await?;
    let (id, lock) = (lease.id, lease.name.to_string());
    Ok(lost_stream(&state, caller, place, async move {
        ended.await.ok().map(|end| lost_event(id, lock, end))
    }))
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

/// A watch's stream: a `watching` comment, keep-alives, then the `lost` event `lost` resolves
/// to (none when the end could not be read), and the end; it also ends at shutdown, and when
/// the key or session `caller` opened it with is revoked (as `/v1/events` does).
pub(super) fn lost_stream<F>(
    state: &AppState,
    caller: &Principal,
    place: WatchPlace,
    lost: F,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<F>>
where
    F: Future<Output = Option<Event>> + Send + 'static,
{
    let lost = futures_util::stream::once(async move {
        let _place = place;
        lost.await
    })
    .filter_map(std::future::ready)
    .map(Ok);
    let hello = futures_util::stream::once(async { Ok(Event::default().comment("watching")) });
    let stream = hello
        .chain(lost)
        .take_until(super::events::stream_end(state, caller));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

pub(super) fn lost_event(id: crate::locks::LeaseId, lock: String, end: LeaseEnd) -> Event {
    let body = LostEvent {
        lease_id: bodies::lease_id(id),
        lock,
        reason: end.state.as_str().to_owned(),
        ended_at: end.ended_at.map(|t| t.rfc3339()),
    };
    let data = serde_json::to_string(&body).unwrap_or_default();
    Event::default().event("lost").data(data)
}
