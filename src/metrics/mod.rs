//! Prometheus metrics of one Leasehold process, in an explicit [`Registry`] (no global recorder,
//! so several servers in one test process stay apart). The lock domain reports what only it
//! sees (waits, handoffs, script calls, heartbeat slack) to [`Metrics`] as its
//! [`Observer`]; the HTTP layer records requests and serves `GET /metrics`. Nothing here knows
//! HTTP or Redis.
//!
//! Several stateless instances share one Redis, so every number is **process-local**: what
//! this instance did or saw. Sum over instances for the service's totals; the book's metrics
//! table (docs/book/src/operating/metrics.md) says where a sum means something different.
//!
//! Label values are bounded: kinds, outcomes, script names and route templates. Lock names
//! appear (as `lock` on acquisitions) only when `--metrics-lock-names` asks for them.

mod operator;

pub use operator::CENSUS_BUDGET;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::locks::observer::{AcquireReport, Observer};
use crate::locks::{LeaseId, LeaseKind};

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A lease kind as a label value (`other` for a reentry refused before its kind was known).
fn kind_label(kind: Option<LeaseKind>) -> &'static str {
    kind.map_or("other", LeaseKind::as_str)
}

/// A label value from a fixed set of names (outcomes, wake-ups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Label(&'static str);

impl EncodeLabelValue for Label {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AcquireLabels {
    kind: &'static str,
    outcome: Label,
    /// Only with `--metrics-lock-names`.
    lock: Option<String>,
}

impl EncodeLabelSet for AcquireLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("kind", self.kind).encode(encoder.encode_label())?;
        ("outcome", self.outcome).encode(encoder.encode_label())?;
        if let Some(lock) = &self.lock {
            ("lock", lock.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WaitLabels {
    kind: &'static str,
    outcome: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HandoffLabels {
    kind: &'static str,
    wake: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LateLabels {
    /// `renewed`: came with less than a third of the TTL left; `expired`: came after it ran out.
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ScriptLabels {
    script: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeCallLabels {
    /// A RedLock node's URL, its credentials taken out (one series per configured node).
    node: String,
    script: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    /// The route template (`/v1/locks/{name}`), never the concrete path; `unmatched` for 404s
    /// of the fallback.
    route: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

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
        };
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

    /// A lease was granted or renewed here: it counts as active until `ttl` from now.
    fn track(&self, id: LeaseId, ttl: Duration) {
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.insert(id, Instant::now() + ttl);
        }
    }

    /// A lease ended here (released, force-released, found lost).
    fn untrack(&self, id: LeaseId) {
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.remove(&id);
        }
    }

    /// One HTTP request answered.
    pub fn http_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let method = method_label(method);
        self.http_requests
            .get_or_create(&HttpLabels {
                method,
                route: route.to_owned(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                method,
                route: route.to_owned(),
            })
            .observe(took.as_secs_f64());
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

    /// Drops leases past their known expiry and sets the gauge.
    fn sample_active(&self) {
        let Ok(mut tracked) = self.tracked.lock() else {
            return;
        };
        let now = Instant::now();
        tracked.retain(|_, expires| *expires > now);
        self.active
            .set(i64::try_from(tracked.len()).unwrap_or(i64::MAX));
    }
}

impl Observer for Metrics {
    fn script_call(&self, script: &'static str, took: Duration, ok: bool) {
        let labels = ScriptLabels { script };
        self.script_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if !ok {
            self.script_errors.get_or_create(&labels).inc();
        }
    }

    fn node_call(&self, node: &str, script: &'static str, took: Duration, ok: bool) {
        self.node_calls
            .get_or_create(&NodeCallLabels {
                node: node.to_owned(),
                script,
                outcome: if ok { "ok" } else { "error" },
            })
            .inc();
        self.node_call_duration
            .get_or_create(&NodeLabels {
                node: node.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    fn acquisition(&self, report: AcquireReport<'_>) {
        let kind = kind_label(report.kind);
        let outcome = Label(report.outcome.as_str());
        self.acquisitions
            .get_or_create(&AcquireLabels {
                kind,
                outcome,
                lock: self.lock_names.then(|| report.lock.as_str().to_owned()),
            })
            .inc();
        if let Some(waited) = report.waited {
            self.wait
                .get_or_create(&WaitLabels { kind, outcome })
                .observe(waited.as_secs_f64());
        }
        if let Some((wake, after)) = report.handoff {
            self.handoff
                .get_or_create(&HandoffLabels {
                    kind,
                    wake: Label(wake.as_str()),
                })
                .observe(after.as_secs_f64());
        }
    }

    fn lease_live(&self, lease: LeaseId, ttl: Duration) {
        self.track(lease, ttl);
    }

    fn lease_ended(&self, lease: LeaseId) {
        self.untrack(lease);
    }

    fn lease_expired(&self, lease: LeaseId) {
        self.untrack(lease);
        self.expirations.inc();
    }

    fn released(&self, lease: LeaseId, kind: Option<LeaseKind>, held: Option<Duration>) {
        self.untrack(lease);
        if let Some(held) = held {
            self.hold
                .get_or_create(&KindLabels {
                    kind: kind_label(kind),
                })
                .observe(held.as_secs_f64());
        }
    }

    fn heartbeat(&self, slack: Duration, ttl: Duration) {
        self.heartbeat_slack.observe(slack.as_secs_f64());
        if slack * 3 < ttl {
            self.late_heartbeats
                .get_or_create(&LateLabels { outcome: "renewed" })
                .inc();
        }
    }

    fn heartbeat_too_late(&self) {
        self.late_heartbeats
            .get_or_create(&LateLabels { outcome: "expired" })
            .inc();
    }
}

/// Standard methods by name; anything else is `other`, so a client cannot mint label values.
fn method_label(method: &str) -> &'static str {
    [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ]
    .into_iter()
    .find(|m| *m == method)
    .unwrap_or("other")
}
