//! What every request handler can reach.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::AdminAuth;
use crate::events::{EventFeed, SubscriberStatus};
use crate::locks::{Locks, TtlPolicy};
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct AppState {
    pub locks: Locks,
    pub limits: ApiLimits,
    pub admin: AdminAuth,
    pub subscriber: Arc<SubscriberStatus>,
    pub metrics: Arc<Metrics>,
    /// Events of every lock, fanned out from the one subscription.
    pub feed: EventFeed,
    pub dashboard: DashboardSettings,
    /// Cancelled when the server stops: event streams end then.
    pub shutdown: CancellationToken,
    /// One permit per open lease watch (`GET .../watch`), up to `ApiLimits::max_watches`.
    pub watches: Arc<Semaphore>,
}

/// How the dashboard is offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct DashboardSettings {
    /// Read-only pages (and `GET /v1/events`) need a signed-in admin too.
    pub private: bool,
}

/// Bounds on what a request may ask for.
#[derive(Debug, Clone, Copy)]
pub struct ApiLimits {
    pub ttl: TtlPolicy,
    /// Longer `wait_ms` values are cut to this.
    pub max_wait: Duration,
    /// How long a fair-queue ticket keeps its place without a poll (shown to clients).
    pub ticket_timeout_ms: u64,
    /// The largest semaphore `limit` (and so `permits`) a request may name.
    pub max_permits: u32,
    /// How many lease watches this instance keeps open at once.
    pub max_watches: usize,
}

impl ApiLimits {
    /// How long a request may wait server-side: what it asked, cut to the maximum.
    pub fn wait(&self, wait_ms: u64) -> Duration {
        Duration::from_millis(wait_ms).min(self.max_wait)
    }
}

impl axum::extract::FromRef<AppState> for AdminAuth {
    fn from_ref(state: &AppState) -> Self {
        state.admin.clone()
    }
}
