//! What the lock domain reports ([`Observer`]): acquisitions, waits, handoffs, script calls,
//! heartbeats, and the leases active through this instance (tracked until their known expiry).

use std::time::{Duration, Instant};

use super::Metrics;
use super::labels::{
    AcquireLabels, HandoffLabels, KindLabels, Label, LateLabels, NodeCallLabels, NodeLabels,
    ScriptLabels, WaitLabels, kind_label,
};
use crate::locks::observer::{AcquireReport, Observer};
use crate::locks::{LeaseId, LeaseKind};

impl Metrics {
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

    /// Drops leases past their known expiry and sets the gauge.
    pub(super) fn sample_active(&self) {
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
