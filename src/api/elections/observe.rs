//! `GET /v1/elections/{name}/observe`: an election's changes as server-sent events. On
//! connect the current state (`event: leader`, or `event: vacant`), then one message per
//! change in order: each new term as Redis granted it (read from the election's terms log
//! whenever an event of the election wakes the stream: pub/sub wakes it, the log says what
//! happened), and a vacancy when nobody leads. Each message's `id:` is its place in the log,
//! so a client that reconnects with `Last-Event-ID` gets every term it missed
//! (`event: resync` when the log no longer reaches back that far).

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use tokio::sync::broadcast::error::RecvError;

use crate::api::backlog;
use crate::api::events::stream_slot;
use crate::api::extract::NamePath;
use crate::auth::{Caller, ReaderRole};
use crate::event_feed::FeedMessage;
use crate::leases::Leases;
use crate::leases::election::ElectionName;
use crate::leases::election::observe::{Change, Observed};
use crate::locks::EventKind;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::ObservedBody;

fn message(change: Change) -> Option<Event> {
    let (kind, body, id) = match change {
        Change::Leader {
            term,
            value,
            holder,
            since,
            candidate_id,
            id,
        } => (
            "leader",
            ObservedBody {
                term,
                value,
                holder,
                since: since.map(|t| t.rfc3339()),
                candidate_id: candidate_id.map(crate::api::bodies::lease_id),
            },
            id,
        ),
        Change::Vacant { term, id } => (
            "vacant",
            ObservedBody {
                term,
                value: None,
                holder: None,
                since: None,
                candidate_id: None,
            },
            id,
        ),
        Change::Gap => return Some(backlog::resync()),
    };
    let json = serde_json::to_string(&body).ok()?;
    let event = Event::default().event(kind).data(json);
    Some(match id {
        Some(id) => event.id(id),
        None => event,
    })
}

/// Whether an event of the election's lock may start or end a term, or change its value:
/// a heartbeat, or a candidate joining or leaving the line, does neither, and each observer's
/// look costs two Redis reads (a thousand observers, two thousand reads per heartbeat).
fn may_change_leader(kind: &EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Renewed | EventKind::Reentered | EventKind::Queued | EventKind::Left
    )
}

/// What changed since `observed` was last told: its messages (a failed read tells nothing
/// now; the next wake-up reads again from the same place).
async fn look(leases: &Leases, name: &ElectionName, observed: &mut Observed) -> Vec<Event> {
    let terms = match leases.terms(name, observed.after()).await {
        Ok(terms) => terms,
        Err(e) => {
            tracing::debug!(error = %e, "could not read an election's terms");
            return Vec::new();
        }
    };
    let now = match leases.election(name).await {
        Ok(now) => now,
        Err(e) => {
            tracing::debug!(error = %e, "could not read an election");
            return Vec::new();
        }
    };
    observed
        .changes(terms, &now)
        .into_iter()
        .filter_map(message)
        .collect()
}

#[utoipa::path(
    get,
    path = "/v1/elections/{name}/observe",
    operation_id = "observeElection",
    tag = "elections",
    params(("name" = String, Path), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this message (its `id:`): every term since is sent first, or `event: resync` when some are gone")),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Server-sent events: `event: leader` (a new term, with its value, holder and since) and `event: vacant` (nobody leads; the last term), in order, each with its `id:`; `event: resync` when terms may have been missed", body = ObservedBody, content_type = "text/event-stream"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "quota_exceeded: this caller has its streams open already", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/elections/{name}/observe`: the current state, then every change, in order.
pub async fn observe(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    caller.check_name(&name)?;
    let name = ElectionName::new(name);
    let mut observed = match headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
    {
        Some(last) => Observed::resuming(last).ok_or_else(|| {
            Problem::new(
                ProblemKind::InvalidQuery,
                "Last-Event-ID is not the id of a message of this stream",
            )
        })?,
        None => Observed::default(),
    };
    let slot = stream_slot(&state, &caller)?;
    let leases = state.leases_for(&caller);
    // Listening before the first look: no change falls between the two.
    let rx = state.feed.listen(&caller.tenant).await;
    let first = look(&leases, &name, &mut observed).await;
    let lock = name.lock().to_string();
    let changes = futures_util::stream::unfold(
        (rx, observed, leases, name, lock, slot),
        |(mut rx, mut observed, leases, name, lock, slot)| async move {
            loop {
                match rx.recv().await {
                    Ok(FeedMessage::Event { event, .. })
                        if event.lock == lock && may_change_leader(&event.kind) => {}
                    Ok(FeedMessage::Event { .. }) => continue,
                    // Events may have been missed: the log says what happened all the same.
                    Ok(FeedMessage::Resync) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                }
                let told = look(&leases, &name, &mut observed).await;
                if told.is_empty() {
                    continue;
                }
                let told = futures_util::stream::iter(told.into_iter().map(Ok));
                return Some((told, (rx, observed, leases, name, lock, slot)));
            }
        },
    )
    .flatten();
    let hello = futures_util::stream::once(async { Ok(Event::default().comment("connected")) });
    let first = futures_util::stream::iter(first.into_iter().map(Ok));
    let stream = hello
        .chain(first)
        .chain(changes)
        .take_until(crate::api::events::stream_end(&state, &caller));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
