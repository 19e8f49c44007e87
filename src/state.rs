//! What every request handler can reach.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::audit::AuditLog;
use crate::auth::{Access, Principal};
use crate::event_feed::EventFeed;
use crate::leases::Leases;
use crate::limits::LockLimits;
use crate::limits::ledger::Ledger;
use crate::limits::slots::Slots;
use crate::locks::{Locks, TtlPolicy};
use crate::metrics::Metrics;
use crate::operator::{Operator, Reason, ReasonError};
use crate::problem::Problem;
use crate::redis::SubscriberStatus;
use crate::tenant::Tenant;

/// One allocation shared by every request: handlers and middleware clone the state several
/// times per request, and a clone of one `Arc` costs one atomic add where cloning each field
/// cost one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] holds.
pub struct Shared {
    /// The lock domain in the default tenant's key space ([`Self::locks_for`] for a caller's).
    pub locks: Locks,
    /// The deployment's key prefix, under which every tenant's space lies.
    pub key_prefix: Arc<str>,
    pub limits: ApiLimits,
    pub access: Arc<Access>,
    /// Quotas that hold across instances.
    pub ledger: Ledger,
    /// What each caller (and tenant) makes Redis keep, in bytes.
    pub budget: crate::limits::budget::Budget,
    pub audit: AuditLog,
    /// Event streams open per caller, on this instance.
    pub streams: Arc<Slots>,
    /// The slots of requests waiting per lock on this instance (`--max-waiters-per-lock`);
    /// not [`crate::locks::wakeups::WaitRegistry`], which wakes them, nor the waiting lists
    /// in Redis (`locks::feed::waitlist`), which show them.
    pub wait_slots: Arc<Slots>,
    pub subscriber: Arc<SubscriberStatus>,
    pub metrics: Arc<Metrics>,
    /// Events of every lock, fanned out from the one subscription.
    pub feed: EventFeed,
    pub dashboard: DashboardSettings,
    /// Cancelled when the server stops: event streams end then.
    pub shutdown: CancellationToken,
    /// One permit per open lease watch (`GET .../watch`), up to `ApiLimits::max_watches`.
    pub watches: Arc<Semaphore>,
    /// RedLock's nodes, when `--redlock-nodes` was given.
    pub redlock: Option<crate::leases::Redlock>,
    /// The deadlines of the revocations this instance took.
    pub revocations: crate::leases::revocation::Deadlines,
}

impl Shared {
    /// The lock domain in `caller`'s tenant.
    pub fn locks_for(&self, caller: &Principal) -> Locks {
        caller.locks(&self.locks, &self.key_prefix)
    }

    /// Every store of `caller`'s leases (see [`crate::leases`]), in its tenant.
    pub fn leases_for(&self, caller: &Principal) -> Leases {
        self.leases_in(&caller.tenant)
    }

    /// Every store of `tenant`'s leases.
    pub fn leases_in(&self, tenant: &Tenant) -> Leases {
        let in_tenant = |locks: &Locks| {
            if tenant.is_default() {
                locks.clone()
            } else {
                locks.in_space(tenant.key_space(&self.key_prefix))
            }
        };
        let redlock = self
            .redlock
            .as_ref()
            .map(|nodes| nodes.map_locks(in_tenant));
        Leases::new(in_tenant(&self.locks), redlock)
    }

    /// `principal` acting as an operator in its tenant, recorded as done `by` that name.
    pub fn operator<'a>(&'a self, principal: &'a Principal, by: String) -> Operator<'a> {
        Operator {
            principal,
            leases: self.leases_for(principal),
            audit: &self.audit,
            by,
        }
    }

    /// An operator's reason as given in a query string or a form, under this server's
    /// `--max-reason-chars`.
    pub fn reason(&self, raw: &str) -> Result<Reason, Problem> {
        Reason::parse(raw, self.limits.per_lock.reason_chars).map_err(ReasonError::in_query)
    }

    /// As [`Self::reason`], for a reason given in a JSON body (its refusal names the body).
    pub fn body_reason(&self, raw: &str) -> Result<Reason, Problem> {
        Reason::parse(raw, self.limits.per_lock.reason_chars).map_err(ReasonError::in_body)
    }
}

/// How the dashboard is offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct DashboardSettings {
    /// Read-only pages (and `GET /v1/events`) need a signed-in user or a key too.
    pub private: bool,
}

/// Bounds on what a request may ask for.
#[derive(Debug, Clone, Copy)]
pub struct ApiLimits {
    pub ttl: TtlPolicy,
    /// Longer `wait_ms` values are cut to this.
    pub max_wait: Duration,
    /// The longest `lock_delay_ms` an acquire may ask for (`--max-lock-delay-ms`).
    pub max_lock_delay_ms: u64,
    /// How long a fair-queue ticket keeps its place without a poll (shown to clients).
    pub ticket_timeout_ms: u64,
    /// The largest semaphore `limit` (and so `permits`) a request may name.
    pub max_permits: u32,
    /// Bounds on one lock, whoever asks.
    pub per_lock: LockLimits,
    /// How many lease watches this instance keeps open at once.
    pub max_watches: usize,
}

impl ApiLimits {
    /// How long a request may wait server-side: what it asked, cut to the maximum.
    pub fn wait(&self, wait_ms: u64) -> Duration {
        Duration::from_millis(wait_ms).min(self.max_wait)
    }
}

impl axum::extract::FromRef<AppState> for Arc<Access> {
    fn from_ref(state: &AppState) -> Self {
        state.access.clone()
    }
}
