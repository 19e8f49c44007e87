//! `GET /v1/events[?prefix=..]`: the live feed of the caller's locks' events (its tenant's,
//! within its name patterns) as server-sent events, one JSON event per message (`data:`),
//! from the process's one Redis subscription. An `event: resync` message means events may
//! have been missed (re-read what you show). The stream ends when the server shuts down.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use super::extract::Query;
use crate::auth::{Caller, Principal, ReaderRole, Who};
use crate::events::FeedMessage;
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
}

#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "streamEvents",
    tag = "events",
    params(("prefix" = Option<String>, Query, description = "Only events of locks whose name starts with this")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Server-sent events: one JSON lock event per `data:` message; `event: resync` when events may have been missed", body = String, content_type = "text/event-stream"),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required: the dashboard is private and no session, admin token or key came; token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name: the prefix is not a lock name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/events[?prefix=..]`: the live event feed.
pub async fn stream(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    Query(query): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    if state.dashboard.private && matches!(caller.who, Who::Anonymous(_)) {
        return Err(Problem::new(
            ProblemKind::AdminTokenRequired,
            "this server's dashboard is private: sign in, or send the admin token or a key",
        ));
    }
    let prefix = NamePrefix::parse(&query.prefix)?;
    let slot = stream_slot(&state, &caller)?;
    let tenant = caller.tenant.clone();
    let patterns = caller.patterns.clone();
    let rx = state.feed.subscribe();
    let seen = move |event_tenant: &crate::tenant::Tenant, lock: &str| {
        *event_tenant == tenant && prefix.matches(lock) && patterns.allows(lock)
    };
    // The slot travels with the stream: it comes back when the client goes.
    let events =
        futures_util::stream::unfold((rx, seen, slot), |(mut rx, seen, slot)| async move {
            loop {
                let event = match rx.recv().await {
                    Ok(FeedMessage::Event { tenant, event }) if seen(&tenant, &event.lock) => {
                        match serde_json::to_string(&*event) {
                            Ok(json) => Event::default().data(json),
                            Err(_) => continue,
                        }
                    }
                    Ok(FeedMessage::Event { .. }) => continue,
                    Ok(FeedMessage::Resync) | Err(RecvError::Lagged(_)) => {
                        Event::default().event("resync").data("")
                    }
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok(event), (rx, seen, slot)));
            }
        });
    let hello = futures_util::stream::once(async { Ok(Event::default().comment("connected")) });
    let stream = hello
        .chain(events)
        .take_until(state.shutdown.clone().cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
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
