//! What `GET /v1/events` sends before the live events: the recent events of every lock from
//! the journal Redis keeps (`?backlog=N`), or, for a client that reconnects with
//! `Last-Event-ID`, every event after that one, or `event: resync` when some of them are gone.
//! Every event carries its journal id as the SSE `id:`, so a browser's `EventSource` resumes
//! by itself.

use axum::http::HeaderMap;
use axum::response::sse::Event;

use crate::locks::feed::journal::{EventId, READ_MAX};
use crate::locks::{LockEvent, Locks};

/// The most events `?backlog=` may ask for.
pub const BACKLOG_MAX: usize = READ_MAX;

/// The SSE message of one event: its JSON, with its journal id as `id:` when it has one.
pub fn message(event: &LockEvent) -> Option<Event> {
    let json = serde_json::to_string(event).ok()?;
    let message = Event::default().data(json);
    Some(match event.detail_str("event_id") {
        Some(id) => message.id(id),
        None => message,
    })
}

/// The events to send first (those of locks `visible` to the caller), and the id of the last one read from the
/// journal: live events up to it were sent already.
pub async fn first(
    locks: &Locks,
    headers: &HeaderMap,
    backlog: usize,
    visible: &impl Fn(&str) -> bool,
) -> (Vec<Event>, Option<EventId>) {
    let last_seen = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty());
    let (after, count) = match last_seen {
        // A resume: everything after that event, or a resync when it cannot be.
        Some(raw) => match EventId::parse(raw) {
            Some(id) => (Some(id), READ_MAX),
            None => return (vec![resync()], None),
        },
        None if backlog == 0 => return (Vec::new(), None),
        None => (None, backlog.min(BACKLOG_MAX)),
    };
    let recent = match locks.events_after(after, count).await {
        Ok(recent) => recent,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the events journal");
            return (after.map_or_else(Vec::new, |_| vec![resync()]), None);
        }
    };
    let mut sent = Vec::with_capacity(recent.events.len() + 1);
    if recent.gap {
        sent.push(resync());
    }
    let last = recent.events.last().map(|(id, _)| *id);
    sent.extend(
        recent
            .events
            .iter()
            .filter(|(_, e)| visible(&e.lock))
            .filter_map(|(_, e)| message(e)),
    );
    (sent, last.or(after))
}

/// Whether a live event was sent already from the journal (its id is not after `last`).
pub fn already_sent(event: &LockEvent, last: Option<EventId>) -> bool {
    let (Some(last), Some(id)) = (last, event.detail_str("event_id").and_then(EventId::parse))
    else {
        return false;
    };
    id <= last
}

/// `event: resync`, with data: a message with no data is never dispatched (WHATWG SSE:
/// an empty data buffer), so a listener would not see it.
pub fn resync() -> Event {
    Event::default().event("resync").data("resync")
}
