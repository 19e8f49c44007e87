//! A lock session: acquire (waiting or not), then hold: touch the fenced resource, re-enter,
//! heartbeat, release one level, by mode, all, or not at all.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::RngExt as _;
use serde_json::json;

use super::{CLIENT_SLACK, Client, Held};
use crate::history::{Family, Outcome, Request};

impl Client {
    pub(super) async fn lock_session(&mut self, name: String, family: Family, kind: &'static str) {
        let ttl_ms = self.rng.random_range(300..=1500);
        let wait_ms = if self.rng.random_bool(0.4) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        // A client that disconnects mid-wait.
        let gave_up_ms = (wait_ms > 200 && self.rng.random_bool(0.05))
            .then(|| self.rng.random_range(50..wait_ms));
        let timeout = match gave_up_ms {
            Some(ms) => Duration::from_millis(ms),
            None => Duration::from_millis(wait_ms) + CLIENT_SLACK,
        };
        let op = self
            .call(
                &name,
                family,
                reqwest::Method::POST,
                format!("/v1/locks/{name}/leases?wait_ms={wait_ms}"),
                Some(json!({"kind": kind, "ttl_ms": ttl_ms, "holder": format!("c{}", self.id)})),
                None,
                None,
                timeout,
                Request::Acquire {
                    kind,
                    ttl_ms: Some(ttl_ms),
                    wait_ms,
                    reentry_of: None,
                    idempotency: None,
                    gave_up_ms,
                },
            )
            .await;
        match op.outcome {
            Outcome::Granted {
                lease,
                fence,
                ttl_ms,
                ..
            } => {
                let token = self.token_of_last();
                let held = self.new_held(&name, family, kind, lease, token, fence, ttl_ms, op.send);
                self.hold(held).await;
            }
            Outcome::Queued { ticket } => {
                let token = self.token_of_last();
                self.ticket_session(name, family, ticket, token, ttl_ms)
                    .await;
            }
            _ => {}
        }
    }

    /// Uses the lease: resource, reentries, heartbeats, partial releases; then lets go.
    pub(super) async fn hold(&mut self, mut h: Held) {
        #[derive(Clone, Copy, PartialEq)]
        enum Beat {
            OnTime,
            Late,
            Never,
        }
        let beat = match self.rng.random_range(0..10) {
            0..=5 => Beat::OnTime,
            6..=7 => Beat::Late,
            _ => Beat::Never,
        };
        let pauser = self.id == 1 && self.shared.pausing.load(Ordering::Relaxed);
        // One holder in four does not watch its lease, as a client without the watch: its
        // overstays are left to fencing alone, which holder-pause keeps testing that way.
        let _watch = self.rng.random_bool(0.75).then(|| self.open_watch(&h));
        let steps = self.rng.random_range(1..=6);
        self.touch(&h).await;
        for _ in 0..steps {
            if !self.running() {
                break;
            }
            if self.heed(&mut h).await {
                return;
            }
            let alive = match self.rng.random_range(0..10) {
                0..=2 => {
                    self.touch(&h).await;
                    true
                }
                3..=4 if !h.semaphore => self.reenter(&mut h).await,
                5 if h.levels() > 1 => self.release(&mut h, false).await,
                _ => {
                    let nap = match beat {
                        Beat::Late => h.ttl_ms + 100,
                        _ => self.rng.random_range(0..=h.ttl_ms / 2),
                    };
                    h.signals.nap(Duration::from_millis(nap)).await;
                    if h.signals.revoked() || h.signals.lost() {
                        continue;
                    }
                    if beat != Beat::Never {
                        self.heartbeat(&mut h).await
                    } else {
                        true
                    }
                }
            };
            if !alive {
                return;
            }
            if beat == Beat::OnTime
                && self.now() > h.renewed_at + h.ttl_ms * 1000 / 3
                && !self.heartbeat(&mut h).await
            {
                return;
            }
        }
        if pauser {
            // Stop heartbeating past the TTL (a paused process: it heeds nothing meanwhile),
            // then write anyway: fencing must stop it once a newer holder has written. What
            // its watch told while it was paused it heeds once it runs again.
            tokio::time::sleep(Duration::from_millis(h.ttl_ms + 300)).await;
            if h.signals.may_write(h.renewed_at) {
                self.resource_op(&h, true).await;
            }
            return;
        }
        if self.heed(&mut h).await {
            return;
        }
        match self.rng.random_range(0..20) {
            0..=11 => {
                self.release(&mut h, true).await;
            }
            12..=16 => {
                // Level by level (bounded: a client whose count is off gets refusals).
                for _ in 0..8 {
                    if h.levels() == 0 || !self.release(&mut h, false).await {
                        break;
                    }
                }
            }
            _ => {} // abandoned: it must expire by itself
        }
    }

    /// What the lease's watch said that ends the hold: a loss, or a revocation (released at
    /// once, an ordinary release within the grace). True when the hold is over.
    async fn heed(&mut self, h: &mut Held) -> bool {
        if h.signals.lost() {
            return true;
        }
        if h.signals.revoked() {
            self.release(h, true).await;
            return true;
        }
        false
    }

    /// A fenced operation on the name's resource, if the client still believes it holds and
    /// its watch has not warned it (see `watch.rs`).
    pub(super) async fn touch(&mut self, h: &Held) {
        if self.now() >= h.valid_until() || !h.signals.may_write(h.renewed_at) {
            return;
        }
        let exclusive = h.writes > 0 && h.kind != "semaphore";
        if h.semaphore {
            return;
        }
        self.resource_op(h, exclusive).await;
    }

    pub(super) async fn resource_op(&mut self, h: &Held, exclusive: bool) {
        let send = self.now();
        let resources = self.shared.resources.clone();
        let outcome = if exclusive {
            match resources.read(&h.name, h.fence) {
                Err(seen) => Outcome::ResourceRejected { seen },
                Ok(v) => {
                    // The gap where another holder could sneak in.
                    self.pause(5).await;
                    match resources.write(&h.name, h.fence, v + 1) {
                        Ok(()) => Outcome::ResourceOk { wrote: Some(v + 1) },
                        Err(seen) => Outcome::ResourceRejected { seen },
                    }
                }
            }
        } else {
            match resources.check(&h.name, h.fence) {
                Ok(()) => Outcome::ResourceOk { wrote: None },
                Err(seen) => Outcome::ResourceRejected { seen },
            }
        };
        self.shared.recorder.record(
            self.id,
            usize::MAX,
            &h.name,
            h.family,
            send,
            Request::Resource {
                lease: h.lease.clone(),
                fence: h.fence,
                write: exclusive,
            },
            outcome,
        );
    }

    /// One more level; false when the lease turned out to be gone.
    async fn reenter(&mut self, h: &mut Held) -> bool {
        if h.kind == "exclusive" && !self.rng.random_bool(0.2) {
            return true;
        }
        let kind = self.reentry_kind(h);
        // Sometimes a longer TTL (it must then hold for every level), sometimes the lease's.
        let ttl_ms = match self.rng.random_range(0..4) {
            0 => Some(h.ttl_ms * self.rng.random_range(2..=3)),
            1 => Some(h.ttl_ms),
            _ => None,
        };
        // (RedLock keeps no Idempotency-Key: a retry is a new attempt; see the book's RedLock page.)
        let idem =
            (self.shared.plan.idempotency && h.kind != "redlock" && self.rng.random_bool(0.3))
                .then(|| self.idem_key());
        let mut body = json!({"kind": kind});
        if let Some(ttl) = ttl_ms {
            body["ttl_ms"] = json!(ttl);
        }
        let name = h.name.clone();
        let token = h.token.clone();
        let request = Request::Acquire {
            kind,
            ttl_ms,
            wait_ms: 0,
            reentry_of: Some(h.lease.clone()),
            idempotency: idem.clone(),
            gave_up_ms: None,
        };
        let path = format!("/v1/locks/{name}/leases?wait_ms=0");
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::POST,
                path.clone(),
                Some(body.clone()),
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request.clone(),
            )
            .await;
        // A retry of the same request, as after a lost answer: it must not add a level.
        let op = if idem.is_some() && self.rng.random_bool(0.5) {
            self.call(
                &name,
                h.family,
                reqwest::Method::POST,
                path,
                Some(body),
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request,
            )
            .await
        } else {
            op
        };
        match op.outcome {
            Outcome::Granted { count, ttl_ms, .. } => {
                if !(kind == "read" && h.kind != "read" && h.kind != "write") {
                    entered(h, kind, count);
                    h.ttl_ms = ttl_ms;
                    h.renewed_at = op.send;
                }
                true
            }
            Outcome::Lost { .. } => false,
            // A failed reentry might have happened: stop using the lease.
            Outcome::Failed { .. } => false,
            _ => true,
        }
    }

    /// The kind a reentry asks: the same mode again; for a read-write lease sometimes a
    /// downgrade (write, then read), rarely an upgrade, which must be refused.
    fn reentry_kind(&mut self, h: &Held) -> &'static str {
        match h.kind.as_str() {
            "read" | "write" => {
                let downgrade = h.writes > 0 && self.rng.random_bool(0.4);
                let upgrade = h.writes == 0 && self.rng.random_bool(0.05);
                // The same mode again; a downgrade (write, then read); rarely an upgrade,
                // which must be refused.
                if downgrade || (h.writes == 0 && !upgrade) {
                    "read"
                } else {
                    "write"
                }
            }
            "fair" => "fair",
            "exclusive" => "exclusive",
            "redlock" => "redlock",
            _ => "reentrant",
        }
    }

    async fn heartbeat(&mut self, h: &mut Held) -> bool {
        let path = if h.semaphore {
            format!("/v1/semaphores/{}/leases/{}/heartbeat", h.name, h.lease)
        } else {
            format!("/v1/locks/{}/leases/{}/heartbeat", h.name, h.lease)
        };
        let name = h.name.clone();
        let token = h.token.clone();
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::POST,
                path,
                None,
                Some(&token),
                None,
                CLIENT_SLACK,
                Request::Heartbeat {
                    lease: h.lease.clone(),
                    ttl_ms: None,
                    semaphore: h.semaphore,
                    multi: false,
                },
            )
            .await;
        match op.outcome {
            Outcome::Renewed { ttl_ms, .. } => {
                h.ttl_ms = ttl_ms;
                h.renewed_at = op.send;
                true
            }
            Outcome::Lost { .. } => false,
            // Unknown: keep going on the old belief (it runs out by itself).
            _ => true,
        }
    }

    /// Releases one level (by mode, sometimes) or all; false when the lease is over.
    pub(super) async fn release(&mut self, h: &mut Held, all: bool) -> bool {
        let mode: Option<&'static str> = if (h.kind == "read" || h.kind == "write") && !all {
            match self.rng.random_range(0..3) {
                0 if h.reads > 0 => Some("read"),
                1 if h.writes > 0 => Some("write"),
                _ => None,
            }
        } else {
            None
        };
        let path = if h.semaphore {
            format!("/v1/semaphores/{}/leases/{}", h.name, h.lease)
        } else {
            let mut p = format!("/v1/locks/{}/leases/{}?all={all}", h.name, h.lease);
            if let Some(m) = mode {
                p.push_str(&format!("&mode={m}"));
            }
            p
        };
        let idem = (self.shared.plan.idempotency
            && !h.semaphore
            && h.kind != "redlock"
            && self.rng.random_bool(0.3))
        .then(|| self.idem_key());
        let request = Request::Release {
            lease: h.lease.clone(),
            all,
            mode,
            semaphore: h.semaphore,
            idempotency: idem.clone(),
        };
        let name = h.name.clone();
        let token = h.token.clone();
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::DELETE,
                path.clone(),
                None,
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request.clone(),
            )
            .await;
        let op = if idem.is_some() && self.rng.random_bool(0.5) {
            self.call(
                &name,
                h.family,
                reqwest::Method::DELETE,
                path,
                None,
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request,
            )
            .await
        } else {
            op
        };
        match op.outcome {
            Outcome::Released { released, count } => {
                if released || all || h.semaphore {
                    h.reads = 0;
                    h.writes = 0;
                    return false;
                }
                let which = mode.unwrap_or(if h.writes > 0 { "write" } else { "read" });
                if which == "write" && h.writes > 0 {
                    h.writes -= 1;
                } else if h.reads > 0 {
                    h.reads -= 1;
                }
                if h.kind != "read" && h.kind != "write" {
                    h.writes = count;
                }
                count > 0
            }
            // Refused (mode_not_held, ...): still held, but this client's count is off.
            Outcome::Refused { .. } => !h.semaphore && self.rng.random_bool(0.5),
            _ => false,
        }
    }
}

/// A reentry of `kind` granted, the lease now `count` levels deep (the server's count is the
/// truth: a replay answers the first count).
fn entered(h: &mut Held, kind: &str, count: u64) {
    if kind == "read" {
        h.reads += 1;
    } else {
        h.writes += 1;
    }
    if h.kind == "read" || h.kind == "write" {
        let total = h.reads + h.writes;
        if count < total {
            if kind == "read" {
                h.reads -= total - count;
            } else {
                h.writes -= total - count;
            }
        }
    } else {
        h.writes = count;
    }
}
