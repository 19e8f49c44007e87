//! One Leasehold lease's hold, derived from its ops in send order: when its grant answer
//! came, and the lower and upper bounds of when it let go (a release, a 410, an expiry after
//! its last renewal, an admin force release of its name).

use std::collections::HashMap;

use super::Hold;
use super::holds::{CLOCK_SLACK_US, Ends};
use crate::history::{Op, Outcome, Request};

/// The hold of the lease `lease` whose ops (in send order) are `idx`, or None if it was
/// never granted.
pub(super) fn lease_hold(ops: &[Op], lease: &str, idx: &[usize], forced: &Ends) -> Option<Hold> {
    let grant = &ops[first_grant(ops, idx)?];
    let Outcome::Granted {
        fence,
        ttl_ms,
        kind,
        ..
    } = &grant.outcome
    else {
        return None;
    };
    let (grant_lb, start) = granted_between(ops, idx, grant);
    let (permits, limit) = match grant.request {
        Request::AcquirePermits { permits, limit, .. } => (permits, limit),
        _ => (0, 0),
    };
    let first_send = first_sends(ops, idx);
    let mut track = Track::new(grant, kind, *ttl_ms, grant_lb, permits > 0);
    for &i in idx {
        let op = &ops[i];
        if op.seq == grant.seq || (op.send < grant.send && op.recv < grant_lb) {
            continue;
        }
        track.apply(op, &first_send);
    }
    track.forced(ops, forced, &grant.name, grant_lb, start);
    let (end, excl, ub_end) = track.bounds(kind, start);
    Some(Hold {
        lease: lease.to_owned(),
        name: grant.name.clone(),
        kind: kind.clone(),
        fence: Some(*fence),
        permits,
        limit,
        grant_lb,
        start,
        end,
        excl,
        ub_end,
        ops: idx.to_vec(),
    })
}

/// The first answer that granted it: a new lease (201) or a ticket's poll.
fn first_grant(ops: &[Op], idx: &[usize]) -> Option<usize> {
    idx.iter().copied().find(|&i| {
        matches!(ops[i].outcome, Outcome::Granted { .. })
            && matches!(
                ops[i].request,
                Request::Acquire {
                    reentry_of: None,
                    ..
                } | Request::AcquirePermits { .. }
                    | Request::Poll { .. }
            )
    })
}

/// (no earlier than, held from): the grant followed every request of the ticket that was
/// answered "queued", and the hold starts at the first granting answer that came.
fn granted_between(ops: &[Op], idx: &[usize], grant: &Op) -> (u64, u64) {
    let grant_lb = idx
        .iter()
        .map(|&i| &ops[i])
        .filter(|o| matches!(o.outcome, Outcome::Queued { .. }))
        .map(|o| o.send)
        .fold(grant.send, u64::max);
    let start = idx
        .iter()
        .map(|&i| &ops[i])
        .filter(|o| {
            matches!(o.outcome, Outcome::Granted { .. })
                && matches!(
                    o.request,
                    Request::Poll { .. } | Request::AcquirePermits { .. }
                )
                || o.seq == grant.seq
        })
        .map(|o| o.recv)
        .min()
        .unwrap_or(grant.recv);
    (grant_lb, start)
}

/// A retry with an Idempotency-Key gets the first answer again: it renews nothing, so the
/// TTL counts from the first request that carried the key.
fn first_sends<'a>(ops: &'a [Op], idx: &[usize]) -> HashMap<&'a str, u64> {
    let mut first_send: HashMap<&str, u64> = HashMap::new();
    for &i in idx {
        if let Request::Acquire {
            idempotency: Some(key),
            ..
        }
        | Request::Release {
            idempotency: Some(key),
            ..
        } = &ops[i].request
        {
            let send = first_send.entry(key.as_str()).or_insert(ops[i].send);
            *send = (*send).min(ops[i].send);
        }
    }
    first_send
}

/// What the ops after the grant tell, as they are applied: the levels held, the last
/// renewal (lower bound of the expiry) and the latest it may have reached (upper bound), and
/// the ends.
struct Track {
    rw: bool,
    semaphore: bool,
    reads: u64,
    writes: u64,
    /// A read-write lease's last write level let go: no longer exclusive from then.
    excl_end: Option<u64>,
    exp_at: u64,
    exp_ttl: u64,
    ub_exp: u64,
    end: u64,
    ub_end: u64,
}

impl Track {
    fn new(grant: &Op, kind: &str, ttl_ms: u64, grant_lb: u64, semaphore: bool) -> Self {
        Track {
            rw: kind == "read" || kind == "write",
            semaphore,
            reads: u64::from(kind == "read"),
            writes: u64::from(kind != "read"),
            excl_end: None,
            exp_at: grant_lb,
            exp_ttl: ttl_ms,
            ub_exp: grant.recv + ttl_ms * 1000,
            end: u64::MAX,
            ub_end: u64::MAX,
        }
    }

    /// Renewed by an op sent at `send` whose answer came at `recv`, for `ttl_ms`.
    fn renewed(&mut self, op: &Op, ttl_ms: u64) {
        self.exp_at = op.send;
        self.exp_ttl = ttl_ms;
        self.ub_exp = op.recv + ttl_ms * 1000;
    }

    fn apply(&mut self, op: &Op, first_send: &HashMap<&str, u64>) {
        match (&op.request, &op.outcome) {
            (
                Request::Acquire {
                    idempotency: Some(key),
                    ..
                },
                Outcome::Granted { .. },
            ) if first_send
                .get(key.as_str())
                .is_some_and(|&first| first < op.send) =>
            {
                // A replay: the level and the TTL came with the first answer.
            }
            (Request::Acquire { kind: k, .. }, Outcome::Granted { ttl_ms, count, .. }) => {
                // A reentry: one more level, the TTL starts again.
                self.reentered(k, *count);
                self.renewed(op, *ttl_ms);
            }
            (Request::Heartbeat { .. }, Outcome::Renewed { ttl_ms, .. }) => {
                self.renewed(op, *ttl_ms);
            }
            // A multilease's heartbeat that finds another member gone gives this one back
            // before it answers 410: from the holder's point of view the hold ended when it
            // was sent. One whose answer is unknown may have done the same, or renewed.
            (Request::Heartbeat { multi: true, .. }, Outcome::Lost { .. }) => {
                self.end = self.end.min(op.send);
                self.ub_end = self.ub_end.min(op.recv);
            }
            (Request::Heartbeat { multi: true, .. }, Outcome::Failed { .. }) => {
                self.end = self.end.min(op.send);
                self.ub_exp = self.ub_exp.max(op.recv + self.exp_ttl * 1000);
            }
            // An unknown reentry or heartbeat may have extended the lease.
            (
                Request::Acquire { ttl_ms, .. } | Request::Heartbeat { ttl_ms, .. },
                Outcome::Failed { .. },
            ) => {
                let ttl = ttl_ms.unwrap_or(self.exp_ttl).max(self.exp_ttl);
                self.ub_exp = self.ub_exp.max(op.recv + ttl * 1000);
            }
            (
                Request::Release {
                    all,
                    mode,
                    idempotency,
                    ..
                },
                outcome,
            ) => self.released(op, outcome, *all, *mode, idempotency.as_deref(), first_send),
            // A poll of a ticket already granted must answer with the grant or a clear 409/410
            // and never release the lease: its 410 does not end the hold.
            (Request::Poll { .. }, Outcome::Lost { .. }) => {}
            (_, Outcome::Lost { .. }) => {
                self.end = self.end.min(op.recv);
                self.ub_end = self.ub_end.min(op.recv);
            }
            _ => {}
        }
    }

    /// A reentry of kind `k` granted with `count` levels held in all.
    fn reentered(&mut self, k: &str, count: u64) {
        if !self.rw {
            self.writes = count;
            return;
        }
        if k == "read" {
            self.reads += 1;
        } else {
            self.writes += 1;
        }
        let total = self.reads + self.writes;
        if count < total && k == "read" {
            self.reads -= total - count;
        } else if count < total {
            self.writes -= total - count;
        }
    }

    /// Whether a release (of all levels, or of the last) would end the lease.
    fn ends_with_release(&self, all: bool) -> bool {
        all || self.reads + self.writes <= 1 || self.semaphore
    }

    fn released(
        &mut self,
        op: &Op,
        outcome: &Outcome,
        all: bool,
        mode: Option<&'static str>,
        idempotency: Option<&str>,
        first_send: &HashMap<&str, u64>,
    ) {
        let certain = !outcome.uncertain();
        // A retry with an Idempotency-Key gets the first answer again and renews nothing
        // itself: the renewal a level left makes happened once, when one of the key's
        // requests ran, no earlier than the first was sent.
        let renewed_from = match idempotency.and_then(|k| first_send.get(k)) {
            Some(&first) if first < op.send => self.exp_at.max(first),
            _ => op.send,
        };
        match outcome {
            Outcome::Released { released, count } => {
                self.levels_released(op, *released, *count, all, mode, renewed_from);
            }
            // Gone: from the client's point of view it stopped holding when it sent a
            // release that would end the lease (the lease may have ended by this very
            // release, answered 410 by a second run of it: a call re-sent after its reply
            // was lost); with levels left, when the 410 came.
            Outcome::Lost { .. } => {
                let at = if self.ends_with_release(all) {
                    op.send
                } else {
                    op.recv
                };
                self.end = self.end.min(at);
                self.ub_end = self.ub_end.min(op.recv);
            }
            // It may have released: a lower bound must assume so.
            _ if !certain && self.ends_with_release(all) => {
                self.end = self.end.min(op.send);
            }
            // It may have released one level, which renews: an upper bound must assume so.
            _ if !certain => self.ub_exp = self.ub_exp.max(op.recv + self.exp_ttl * 1000),
            _ => {}
        }
        if all && !self.rw {
            self.end = self.end.min(op.send);
        }
    }

    /// A release answered: the lease ended (`released`, or no level left) or levels remain.
    fn levels_released(
        &mut self,
        op: &Op,
        released: bool,
        count: u64,
        all: bool,
        mode: Option<&'static str>,
        renewed_from: u64,
    ) {
        if released || count == 0 {
            self.end = self.end.min(op.send);
            self.ub_end = self.ub_end.min(op.recv);
        } else if self.rw {
            // Levels remain: like Redisson's unlock, the release renews the lease for its
            // TTL (the lock key follows its read holds' own timeouts, so only the upper
            // bound moves).
            self.ub_exp = self.ub_exp.max(op.recv + self.exp_ttl * 1000);
            let which = if all {
                "both"
            } else {
                mode.unwrap_or(if self.writes > 0 { "write" } else { "read" })
            };
            match which {
                "write" => self.writes = self.writes.saturating_sub(1),
                "read" => self.reads = self.reads.saturating_sub(1),
                _ => {}
            }
            if self.writes == 0 && self.excl_end.is_none() {
                self.excl_end = Some(op.send);
            }
        } else if all {
            // The client asked for all: from its point of view the hold is over.
            self.end = self.end.min(op.send);
        } else {
            // Levels remain: like Redisson's unlock, the release renews the lease (and the
            // lock key) for the lease's TTL. `count` levels are left: a later release that
            // fails may have ended the lease.
            self.writes = count;
            self.exp_at = renewed_from;
            self.ub_exp = self.ub_exp.max(op.recv + self.exp_ttl * 1000);
        }
    }

    /// An admin force release of the name ends the hold when it is sent.
    fn forced(&mut self, ops: &[Op], forced: &Ends, name: &str, grant_lb: u64, start: u64) {
        for &f in forced.get(&(name, self.semaphore)).into_iter().flatten() {
            let fr = &ops[f];
            // It may have removed this lease if it could run after the grant...
            if fr.recv >= grant_lb {
                self.end = self.end.min(fr.send.max(start));
            }
            // ...and certainly did if it was sent after the grant's answer came.
            if fr.send >= start && matches!(fr.outcome, Outcome::Forced { .. }) {
                self.ub_end = self.ub_end.min(fr.recv);
            }
        }
    }

    /// (end, exclusive span, upper bound of the end) once every op is applied: the expiry
    /// after the last renewal bounds both ends.
    fn bounds(&self, kind: &str, start: u64) -> (u64, Option<(u64, u64)>, u64) {
        let expiry = (self.exp_at + self.exp_ttl * 1000).saturating_sub(CLOCK_SLACK_US);
        let end = self.end.min(expiry);
        let ub_end = self.ub_end.min(self.ub_exp + CLOCK_SLACK_US);
        let excl = if kind == "read" {
            None
        } else if self.rw {
            Some((start, self.excl_end.unwrap_or(end).min(end)))
        } else if self.semaphore {
            None
        } else {
            Some((start, end))
        };
        (end, excl, ub_end)
    }
}
