//! What every request handler can reach.

use std::sync::Arc;
use std::time::Duration;

use subtle::ConstantTimeEq as _;
use tokio_util::sync::CancellationToken;

use crate::events::{EventFeed, SubscriberStatus};
use crate::locks::{Locks, TokenDigest, TtlPolicy};
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
}

/// Who may call the admin routes.
#[derive(Clone)]
pub enum AdminAuth {
    /// No admin token configured: admin routes refuse everyone.
    Disabled,
    /// The SHA-256 of the admin token.
    Token(TokenDigest),
}

impl AdminAuth {
    pub fn from_token(token: Option<&str>) -> Self {
        token.map_or(Self::Disabled, |t| Self::Token(TokenDigest::of(t)))
    }

    /// The secret dashboard sessions are signed with: the admin token's SHA-256, so every
    /// instance configured with the same token accepts the same sessions, and the token itself
    /// never leaves the server. `None` when admin is disabled.
    pub fn session_key(&self) -> Option<&[u8; 32]> {
        match self {
            Self::Disabled => None,
            Self::Token(digest) => Some(digest.as_bytes()),
        }
    }

    /// Compares digests in constant time, so timing reveals nothing about the token.
    pub fn accepts(&self, presented: &str) -> bool {
        match self {
            Self::Disabled => false,
            Self::Token(expected) => bool::from(
                TokenDigest::of(presented)
                    .as_bytes()
                    .ct_eq(expected.as_bytes()),
            ),
        }
    }
}
