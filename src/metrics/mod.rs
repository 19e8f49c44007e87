//! Prometheus metrics of one Leasehold process, in an explicit [`Registry`] (no global recorder,
//! so several servers in one test process stay apart). The lock domain reports what only it
//! sees (waits, handoffs, script calls, heartbeat slack) to [`Metrics`] as its
//! [`Observer`](crate::locks::observer::Observer) ([`leases`]); the HTTP layer records requests
//! ([`http`]) and serves `GET /metrics`; what is read at scrape time is [`operator`]'s (Redis,
//! the census, the process) and [`elections`]' (read from the elections' terms logs). Label
//! sets are [`labels`]'. Nothing here knows HTTP or Redis.
//!
//! Several stateless instances share one Redis, so every number is **process-local**: what
//! this instance did or saw. Sum over instances for the service's totals; the book's metrics
//! table (docs/book/src/operating/metrics.md) says where a sum means something different.
//!
//! Label values are bounded: kinds, outcomes, script names and route templates. Lock names
//! appear (as `lock` on acquisitions) only when `--metrics-lock-names` asks for them.

mod elections;
mod http;
mod labels;
mod leases;
mod operator;

pub use elections::{ELECTIONS_SAMPLED, ElectionMetrics, HISTORY_READ};
pub use operator::CENSUS_BUDGET;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::labels::{
    AcquireLabels, HandoffLabels, HttpLabels, KindLabels, Label, LateLabels, NodeCallLabels,
    NodeLabels, RouteLabels, ScriptLabels, WaitLabels,
};
use crate::locks::{LeaseId, LeaseKind};

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric of the process. Cheap to share behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    lock_names: bool,
    acquisitions: Family<AcquireLabels, Counter>,
    wait: Family<WaitLabels, Histogram>,
    hold: Family<KindLabels, Histogram>,
    handoff: Family<HandoffLabels, Histogram>,
    active: Gauge,
    /// Leases granted or renewed here, by the expiry this instance last saw.
    tracked: Mutex<HashMap<LeaseId, Instant>>,
    waiting: Gauge,
    expirations: Counter,
    heartbeat_slack: Histogram,
    late_heartbeats: Family<LateLabels, Counter>,
    script_duration: Family<ScriptLabels, Histogram>,
    script_errors: Family<ScriptLabels, Counter>,
    node_calls: Family<NodeCallLabels, Counter>,
    node_call_duration: Family<NodeLabels, Histogram>,
    subscriber_reconnects: Counter,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Family<RouteLabels, Histogram>,
    /// Read at scrape time: Redis, the subscriber, the census of live locks, the process.
    pub sampled: operator::Sampled,
    /// Read at scrape time: the live elections' terms and lines.
    pub elections: ElectionMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("lock_names", &self.lock_names)
            .finish_non_exhaustive()
    }
}

/// 1 ms to about 65 s: waits, holds and slack.
fn long_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// 50 µs to about 1.6 s: script calls, handoffs, HTTP requests.
fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Metrics {
    /// `lock_names`: label acquisitions with the lock's name (unbounded cardinality: only for
    /// deployments with a few well-known lock names).
    pub fn new(lock_names: bool) -> Self {
        let mut registry = Registry::with_prefix("leasehold");
        let m = Self {
            lock_names,
            acquisitions: Family::default(),
            wait: Family::new_with_constructor(long_buckets),
            hold: Family::new_with_constructor(long_buckets),
            handoff: Family::new_with_constructor(short_buckets),
            active: Gauge::default(),
            tracked: Mutex::new(HashMap::new()),
            waiting: Gauge::default(),
            expirations: Counter::default(),
            heartbeat_slack: long_buckets(),
            late_heartbeats: Family::default(),
            script_duration: Family::new_with_constructor(short_buckets),
            script_errors: Family::default(),
            node_calls: Family::default(),
            node_call_duration: Family::new_with_constructor(short_buckets),
            subscriber_reconnects: Counter::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(short_buckets),
            registry: Registry::default(),
            sampled: operator::Sampled::register(&mut registry),
            elections: ElectionMetrics::new(lock_names, crate::locks::wall_ms()),
        };
        m.elections.register(&mut registry);
        m.register_series(&mut registry);
        m.start_from_zero();
        Self { registry, ..m }
    }

    /// The request path's series (the operator's are [`operator::Sampled`]'s).
    fn register_series(&self, registry: &mut Registry) {
        registry.register(
            "acquisitions",
            "Acquire requests (locks, tickets and semaphores) by kind and outcome",
            self.acquisitions.clone(),
        );
        registry.register(
            "acquire_wait_seconds",
            "Time a request spent waiting server-side, from arrival to grant, ticket or timeout; \
             only requests whose first attempt found the lock taken",
            self.wait.clone(),
        );
        registry.register(
            "lease_hold_seconds",
            "Age of a lease when it was released (all levels) through this instance",
            self.hold.clone(),
        );
        registry.register(
            "handoff_seconds",
            "For a waiting request that got the lock: time from the wake-up (unlock message or \
             TTL timer) reaching this instance to the grant",
            self.handoff.clone(),
        );
        registry.register(
            "leases_active",
            "Leases whose latest grant or heartbeat went through this instance and that have \
             neither ended nor passed that expiry",
            self.active.clone(),
        );
        registry.register(
            "waiting_requests",
            "Requests waiting server-side for a lock or permits in this instance",
            self.waiting.clone(),
        );
        registry.register(
            "lease_expirations",
            "Calls (heartbeat, release, reentry) through this instance that found their lease \
             expired: its TTL ran out before the call",
            self.expirations.clone(),
        );
        registry.register(
            "heartbeat_slack_seconds",
            "TTL left on a lease when its heartbeat renewed it",
            self.heartbeat_slack.clone(),
        );
        registry.register(
            "heartbeats_late",
            "Heartbeats with less than a third of the TTL left (renewed) or after it ran out \
             (expired)",
            self.late_heartbeats.clone(),
        );
        registry.register(
            "redis_script_duration_seconds",
            "Latency of Lua script calls (EVALSHA) by script",
            self.script_duration.clone(),
        );
        registry.register(
            "redis_script_errors",
            "Lua script calls that failed (Redis error, timeout, lost connection) by script",
            self.script_errors.clone(),
        );
        registry.register(
            "redlock_node_calls",
            "Lua function calls on each RedLock node by function and outcome (ok, error): one \
             RedLock call is one call per node here, and one acquisition in \
             leasehold_acquisitions",
            self.node_calls.clone(),
        );
        registry.register(
            "redlock_node_call_duration_seconds",
            "Latency of Lua function calls on each RedLock node",
            self.node_call_duration.clone(),
        );
        registry.register(
            "subscriber_reconnects",
            "Times this instance's unlock subscriber lost and re-established its subscription",
            self.subscriber_reconnects.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests by method, route template and status",
            self.http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by method and route template (long-polls included)",
            self.http_duration.clone(),
        );
    }

    /// Creates the counters' usual series at zero, so that `rate()` and alerts see them
    /// before the first event (a series born at 1 hides its first increase).
    fn start_from_zero(&self) {
        let outcomes = <crate::locks::observer::AcquireOutcome as strum::VariantArray>::VARIANTS;
        // With lock names as labels there is no usual series to start.
        if !self.lock_names {
            for kind in LeaseKind::ALL {
                for outcome in outcomes {
                    let _ = self.acquisitions.get_or_create(&AcquireLabels {
                        kind: kind.as_str(),
                        outcome: Label(outcome.as_str()),
                        lock: None,
                    });
                }
            }
        }
        for outcome in ["renewed", "expired"] {
            let _ = self.late_heartbeats.get_or_create(&LateLabels { outcome });
        }
    }

    /// Whether acquisitions (and the per-lock gauges) carry lock names.
    pub fn lock_names(&self) -> bool {
        self.lock_names
    }

    /// The text exposition, after reading the values that are sampled rather than counted:
    /// `waiting` requests now and the subscriber's `reconnects` so far.
    pub fn encode(&self, waiting: usize, reconnects: u64) -> Result<String, std::fmt::Error> {
        self.waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        let seen = self.subscriber_reconnects.get();
        self.subscriber_reconnects
            .inc_by(reconnects.saturating_sub(seen));
        self.sample_active();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        // One exposition: the process's metrics go before the single `# EOF`.
        if let Some(body) = out.strip_suffix("# EOF\n") {
            out.truncate(body.len());
        }
        self.sampled.encode_process(&mut out)?;
        Ok(out)
    }
}
