//! A connection's requests in flight, and since when it has been idle: the idle timeout's
//! clock. Response bodies are tracked to their end, so a streamed answer counts as in flight.

use axum::body::Body;
use http_body::Frame;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Requests in flight on one connection (counted until their response body is done) and
/// since when there have been none. A mutex and a `Notify` rather than a `watch` channel:
/// this is one per connection, and a `watch` sender is about 370 bytes.
#[derive(Clone)]
pub(super) struct Activity {
    pub(super) shared: Arc<ActivityState>,
}

pub(super) struct ActivityState {
    /// Requests in flight, and since when there have been none.
    pub(super) counts: std::sync::Mutex<(usize, Instant)>,
    pub(super) changed: Notify,
}

/// One request in flight; dropping it (the body sent, or abandoned) ends it.
pub(super) struct Active {
    pub(super) shared: Arc<ActivityState>,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            shared: Arc::new(ActivityState {
                counts: std::sync::Mutex::new((0, Instant::now())),
                changed: Notify::new(),
            }),
        }
    }

    pub(super) fn begin(&self) -> Active {
        self.shared.update(|(n, _)| *n += 1);
        Active {
            shared: self.shared.clone(),
        }
    }

    /// When the connection will have been idle for `limit`: far off while a request is in
    /// flight (a change wakes `changed()` first).
    pub(super) fn idle_deadline(&self, limit: Duration) -> Instant {
        match self.shared.counts() {
            (0, since) => since + limit,
            _ => Instant::now() + Duration::from_secs(365 * 24 * 3600),
        }
    }

    /// Resolves at the next start or end of a request (enable it before reading the counts).
    pub(super) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.changed.notified()
    }
}

impl ActivityState {
    pub(super) fn counts(&self) -> (usize, Instant) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn update(&self, change: impl FnOnce(&mut (usize, Instant))) {
        change(&mut self.counts.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.notify_waiters();
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.shared.update(|(n, since)| {
            *n = n.saturating_sub(1);
            if *n == 0 {
                *since = Instant::now();
            }
        });
    }
}

/// A response body that keeps its request counted as in flight until it is done (an event
/// stream stays in flight for as long as it streams).
pub(super) struct Tracked {
    pub(super) body: Body,
    pub(super) _active: Active,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
