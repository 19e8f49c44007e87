//! `GET /v1/events[?prefix=..]`: the live feed of the caller's locks' events (its tenant's,
//! within its name patterns) as server-sent events, one JSON event per message (`data:`),
//! from the process's one Redis subscription. An `event: resync` message means events may
//! have been missed (re-read what you show). It can start with recent events (`?backlog=N`)
//! or resume after `Last-Event-ID` from the tenant's events journal ([`super::backlog`]).
//! The stream ends when the server shuts down, and within a second or so of its key's
//! revocation (or its dashboard session's end: see `auth::revocation`).

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use super::backlog;
use super::extract::Query;
use crate::auth::{Caller, Principal, ReaderRole, Who};
use crate::event_feed::FeedMessage;
use crate::leases::election::ElectionName;
use crate::limits::slots::Slot;
use crate::locks::NamePrefix;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events of locks whose name starts with this.
    #[serde(default)]
    prefix: String,
    /// Send the most recent events of every lock first (at most 1000), then the live ones.
    #[serde(default)]
    backlog: Option<usize>,
}

#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "streamEvents",
    tag = "events",
    params(("prefix" = Option<String>, Query, description = "Only events of locks whose name starts with this; `election/` and the start of an election's name: only events of those elections"), ("backlog" = Option<u32>, Query, maximum = 1000, description = "First send up to this many recent events (oldest first; of every lock, then filtered by prefix), then the live ones"), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (its `id:`): every event since is sent first, or `event: resync` when some are gone")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Server-sent events: one JSON lock event per `data:` message, with its journal id as `id:` (and `event_id`); `event: resync` when events may have been missed; keep-alive comments every 15 s", body = crate::wire::LockEventMessage, content_type = "text/event-stream"),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required: the dashboard is private and no session, admin token or key came; token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name: the prefix is not a lock name (or `election/` and one)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/events[?prefix=..][&backlog=N]`: recent events (or those after `Last-Event-ID`),
/// then the live feed.
pub async fn stream(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    if state.dashboard.private && matches!(caller.who, Who::Anonymous(_)) {
        return Err(Problem::new(
            ProblemKind::AdminTokenRequired,
            "this server's dashboard is private: sign in, or send the admin token or a key",
        ));
    }
    let prefix = events_prefix(&query.prefix)?;
    let count = query.backlog.unwrap_or(0);
    if count > backlog::BACKLOG_MAX {
        return Err(Problem::new(
            ProblemKind::InvalidQuery,
            format!("backlog must be at most {}", backlog::BACKLOG_MAX),
        ));
    }
    // A backlog read costs Redis about as much as a request per 50 events.
    state
        .access
        .charge(&caller, 1 + u32::try_from(count / 50).unwrap_or(u32::MAX))?;
    let slot = stream_slot(&state, &caller)?;
    let tenant = caller.tenant.clone();
    let patterns = caller.patterns.clone();
    // An election's events are its lock's (`election/<name>`); the caller's patterns are
    // of names, the election's as a campaign checks it.
    let visible = move |lock: &str| {
        prefix.matches(lock) && patterns.allows(ElectionName::of_lock(lock).unwrap_or(lock))
    };
    // Listening before the journal is read: nothing falls between the two. The journal read
    // is the caller's tenant's (`locks_for`).
    let rx = state.feed.listen(&tenant).await;
    let (first, last) = backlog::first(&state.locks_for(&caller), &headers, count, &visible).await;
    let seen = move |event_tenant: &crate::tenant::Tenant, lock: &str| {
        *event_tenant == tenant && visible(lock)
    };
    // The slot travels with the stream: it comes back when the client goes.
    let events =
        futures_util::stream::unfold((rx, seen, slot), move |(mut rx, seen, slot)| async move {
            loop {
                let event = match rx.recv().await {
                    Ok(FeedMessage::Event { tenant, event }) if seen(&tenant, &event.lock) => {
                        if backlog::already_sent(&event, last) {
                            continue;
                        }
                        match backlog::message(&event) {
                            Some(message) => message,
                            None => continue,
                        }
                    }
                    Ok(FeedMessage::Event { .. }) => continue,
                    Ok(FeedMessage::Resync) | Err(RecvError::Lagged(_)) => backlog::resync(),
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok(event), (rx, seen, slot)));
            }
        });
    let hello = futures_util::stream::once(async { Ok(Event::default().comment("connected")) });
    let first = futures_util::stream::iter(first.into_iter().map(Ok));
    let stream = hello
        .chain(first)
        .chain(events)
        .take_until(stream_end(&state, &caller));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// When a server-sent event stream ends: at shutdown, and when the key or session `caller`
/// opened it with is revoked (`/v1/events`, lease watches, election observers alike).
pub(super) fn stream_end(
    state: &AppState,
    caller: &Principal,
) -> impl Future<Output = ()> + Send + use<> {
    let watched = state.access.revocations.watch(caller);
    let revoked = async move {
        match watched {
            Some(watched) => watched.revoked().await,
            None => std::future::pending().await,
        }
    };
    let shutdown = state.shutdown.clone().cancelled_owned();
    async move {
        futures_util::future::select(Box::pin(shutdown), Box::pin(revoked)).await;
    }
}

/// One of the caller's server-sent event streams on this instance (`/v1/events` and lease
/// watches alike), given back when the returned slot drops.
pub(super) fn stream_slot(state: &AppState, caller: &Principal) -> Result<Slot, Problem> {
    state
        .streams
        .take(&caller.owner(), caller.quotas.streams)
        .ok_or_else(|| {
            Problem::new(
                ProblemKind::QuotaExceeded,
                format!(
                    "this caller already has {} event streams open here \
                     (--max-streams-per-client)",
                    caller.quotas.streams
                ),
            )
            .with("quota", "event streams")
            .retry_after(std::time::Duration::from_secs(5))
        })
}

/// `?prefix=`: the start of a lock's name, or `election/` and the start of an election's (an
/// election's events are those of its lock, `election/<name>`).
fn events_prefix(raw: &str) -> Result<NamePrefix, Problem> {
    let Some(election) = raw.strip_prefix(ElectionName::LOCK_PREFIX) else {
        return Ok(NamePrefix::parse(raw)?);
    };
    let start = NamePrefix::parse(election)?;
    Ok(NamePrefix::internal(&format!(
        "{}{}",
        ElectionName::LOCK_PREFIX,
        start.as_str()
    )))
}
