//! The checkers, run on the recorded history after a run.
//!
//! 1. **Mutual exclusion.** Each lease's hold is a *lower bound* on when it really held the
//!    lock: from the moment its grant answer arrived to the earliest of (the send time of its
//!    last grant, reentry or heartbeat plus that TTL; the send time of the release that let
//!    go; the arrival of a 410/404 about it; the send time of an admin force release of its
//!    name). Clock error or an unseen expiry can only shorten these bounds, never lengthen
//!    them, so an overlap found is real. Read holds share; semaphores may not have more
//!    permits out than their limit.
//! 2. **Fencing.** A grant whose request was sent after another grant's answer arrived must
//!    carry a larger fence; reentries and heartbeats keep the lease's fence; the fenced
//!    resource loses no acknowledged increment; no resource operation made inside a hold is
//!    refused.
//! 3. **Replies.** Every 2xx answer names the lock, the lease and the holder it was asked
//!    about, and no new lease id is answered twice: a reply handed to the wrong request shows.
//! 4. **Liveness.** Every answer comes within its wait plus a slack; no 5xx but 503 in a
//!    fault; no waiter is refused after its whole wait while the lock was certainly free
//!    (free by *upper* bounds of every hold) for a good part of it; after a failover, every
//!    name is served again (granted or renewed) within 10 s of the promotion.
//!
//! 5. **Elections** (`elections.rs`): every observer is told every term in order (a resumed
//!    stream fills its gap), and no candidate is granted after it left. Two leaders at once
//!    and terms that do not grow are found by 1. and 2.: each candidate that leads is a lease
//!    of the election's name, its term the fence.
//!
//! 6. **Told before, not after** (`warnings.rs`): no write with a lease's fencing token is
//!    accepted after its watch warned its holder (`expiring` not renewed since, or
//!    `revocation_requested`) and the lease ended.
//!
//! Faults that lose Redis data (a restart without persistence, or an AOF missing its last
//! second) cannot keep mutual exclusion across the loss: overlaps between a hold granted
//! before the loss and one granted after it are reported as expected, not as failures. Fences
//! must stay monotonic even then.

mod elections;
mod exclusion;
mod fencing;
mod holds;
mod lease_hold;
mod liveness;
mod recovery;
mod replies;
mod self_check;
mod semantics;
mod warnings;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::history::{Op, Request};

use self::elections::elections;
use self::exclusion::mutual_exclusion;
use self::fencing::fencing;
use self::holds::derive_holds;
use self::liveness::liveness;
pub use self::recovery::SERVED_WITHIN_US;
use self::recovery::served_again;
use self::replies::replies;
pub use self::self_check::self_check;
use self::semantics::semantics;
use self::warnings::warnings;

/// When a fault was on, and whether it lost Redis data at its start (a crash) or anywhere
/// in it (a failover: what the old master granted until it was demoted).
#[derive(Debug, Clone)]
pub struct FaultWindow {
    pub what: String,
    pub start: u64,
    pub end: u64,
    pub data_loss: bool,
    /// The loss may fall anywhere in the window, not only at its start: a grant made in it
    /// may be lost (a failover without enough acks).
    pub loss_throughout: bool,
    /// Whether answers may be slow or 503 while it lasts (a fault meant to be invisible to
    /// clients, like a dropped subscription, is not).
    pub exempt: bool,
    /// With `exempt`: 503s are allowed, slow answers are not (a slot being moved: Redis
    /// answers TRYAGAIN, and Leasehold must still answer within the wait plus its timeout).
    pub answers_in_time: bool,
    /// Whether requests for new leases (acquires, ticket polls) may be refused with 503 while
    /// it lasts, though nothing else may (Redis full).
    pub refuses_new: bool,
    /// A failover: from when every name must be served again (see `recovery`).
    pub served_from: Option<u64>,
}

/// One finding, with the slice of history that shows it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub what: &'static str,
    pub detail: String,
    pub slice: Vec<Op>,
}

#[derive(Debug, Default, Clone)]
pub struct Report {
    pub ops: usize,
    pub acquisitions: usize,
    /// Multileases granted (each member counts among the grants too).
    pub multileases: usize,
    pub grants: usize,
    pub overlaps: usize,
    pub expected_overlaps: usize,
    pub fence_regressions: usize,
    pub lost_updates: u64,
    pub rejected_in_hold: usize,
    pub stale_rejected: usize,
    pub stale_accepted: usize,
    pub late_answers: usize,
    /// Waiting requests answered `redis_unavailable` before their deadline (a waiter keeps
    /// waiting through a failover or a stall, issue 56).
    pub early_unavailable: usize,
    pub parked_while_free: usize,
    /// Names not served again within 10 s of a failover's promotion.
    pub not_served_again: usize,
    pub server_errors: usize,
    pub semantic: usize,
    /// Answers that named another lock, lease or holder than asked (see `replies`).
    pub mismatched_replies: usize,
    pub longest_unavailable_us: u64,
    /// Election terms granted, and the events their observers were told.
    pub election_terms: usize,
    pub observed_events: usize,
    /// Terms an observer stream was not told (or `resync`s with no data loss to explain them).
    pub observer_skips: usize,
    /// Terms an observer stream was told after a larger one.
    pub observer_disorder: usize,
    pub observer_resyncs: usize,
    /// Candidates granted after they left the line, resigned or were told they were out.
    pub granted_after_leaving: usize,
    /// Warnings holders' watches told (`expiring`, `revocation_requested`; see `warnings`).
    pub warned_expiring: usize,
    pub warned_revocation: usize,
    /// Leases the admin's revocations asked to let go; of those told so, released by their
    /// holder within the grace, and evicted at the deadline.
    pub revocations_asked: usize,
    pub revocations_honoured: usize,
    pub revocations_enforced: usize,
    /// Writes the resource accepted from a holder already warned whose lease had ended.
    pub written_after_warning: usize,
    /// What was injected, e.g. "redis-freeze x3".
    pub faults: String,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// What the checkers derive for one lease (or one Redisson lock session).
#[derive(Debug, Clone)]
struct Hold {
    lease: String,
    name: String,
    kind: String,
    fence: Option<u64>,
    permits: u32,
    limit: u32,
    /// Lower bound of when the grant happened (send times of requests it followed).
    grant_lb: u64,
    /// Lower-bound hold: [start, end).
    start: u64,
    end: u64,
    /// Lower-bound write (exclusive) part, for read/write leases; whole hold otherwise.
    excl: Option<(u64, u64)>,
    /// Upper bound of when the lease could have stopped holding.
    ub_end: u64,
    ops: Vec<usize>,
}

pub fn check(
    ops: &[Op],
    windows: &[FaultWindow],
    resources: &[(String, u64, u64)],
    ttl_max_ms: u64,
) -> Report {
    let mut report = Report {
        ops: ops.len(),
        ..Report::default()
    };
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    for w in windows {
        *injected.entry(w.what.as_str()).or_default() += 1;
    }
    report.faults = injected
        .iter()
        .map(|(what, n)| format!("{what} x{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let holds = derive_holds(ops);
    report.acquisitions = ops
        .iter()
        .filter(|o| {
            matches!(
                o.request,
                Request::Acquire {
                    reentry_of: None,
                    ..
                } | Request::AcquirePermits { .. }
                    | Request::RedissonLock { .. }
            )
        })
        .count();
    report.grants = holds.len();
    let losses: Vec<(u64, u64)> = windows
        .iter()
        .filter(|w| w.data_loss)
        .map(|w| (w.start, if w.loss_throughout { w.end } else { w.start }))
        .collect();
    // Two holds are excused when a data loss came between one's possible grant and the
    // other's answer: the first grant may be what Redis lost. A loss spread over a window
    // (a failover) may have taken any grant made before its end.
    let across_loss = |a: (u64, u64), b: (u64, u64)| {
        losses
            .iter()
            .any(|&(from, to)| (a.0 < to && from < b.1) || (b.0 < to && from < a.1))
    };

    mutual_exclusion(ops, &holds, &across_loss, &mut report);
    fencing(ops, &holds, resources, &across_loss, &mut report);
    liveness(ops, &holds, windows, ttl_max_ms, &mut report);
    served_again(ops, windows, &mut report);
    semantics(ops, &across_loss, &mut report);
    let loss_between = |a: u64, b: u64| losses.iter().any(|&(from, to)| from < b && a < to);
    // A failover, whatever the acks: an observer reading through the master being cut off
    // may be told a term it could not replicate (its candidate was answered 503
    // not_replicated), which the promoted replica never had: `resync` is the server's
    // honest answer then (the book's elections page says so).
    let after_failover = |t: u64| {
        windows
            .iter()
            .any(|w| w.served_from.is_some() && w.start <= t && t <= w.end + SERVED_WITHIN_US)
    };
    elections(ops, &loss_between, &after_failover, &mut report);
    replies(ops, &mut report);
    warnings(ops, &holds, &mut report);
    report
}

fn slice_of(ops: &[Op], holds: &[&Hold], extra: &[usize]) -> Vec<Op> {
    let mut idx: Vec<usize> = holds.iter().flat_map(|h| h.ops.iter().copied()).collect();
    idx.extend_from_slice(extra);
    idx.sort_unstable();
    idx.dedup();
    idx.into_iter().map(|i| ops[i].clone()).collect()
}

/// The report as text: one summary line, then each violation with its slice.
pub fn render(label: &str, seed: u64, report: &Report, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{label} seed={seed} (injected: {}): {} ops, {} acquisitions, {} grants ({} multileases); overlaps {} (expected after data loss {}), fence regressions {}, lost updates {}, refused in hold {} (stale writes refused {}, accepted before a newer holder wrote {}), late answers {}, waiters answered 503 early {}, parked while free {}, not served again {}, server errors {}, semantic {}, replies for other requests {}; election terms {}, observer events {} (terms skipped {}, out of order {}, resyncs {}), granted after leaving {}; warnings: expiring {}, revocation {}; revocations asked {} (honoured by release {}, enforced at the deadline {}), writes after a warning and the lease's end {}; longest unavailability {} ms => {}",
        if report.faults.is_empty() {
            "nothing"
        } else {
            &report.faults
        },
        report.ops,
        report.acquisitions,
        report.grants,
        report.multileases,
        report.overlaps,
        report.expected_overlaps,
        report.fence_regressions,
        report.lost_updates,
        report.rejected_in_hold,
        report.stale_rejected,
        report.stale_accepted,
        report.late_answers,
        report.early_unavailable,
        report.parked_while_free,
        report.not_served_again,
        report.server_errors,
        report.semantic,
        report.mismatched_replies,
        report.election_terms,
        report.observed_events,
        report.observer_skips,
        report.observer_disorder,
        report.observer_resyncs,
        report.granted_after_leaving,
        report.warned_expiring,
        report.warned_revocation,
        report.revocations_asked,
        report.revocations_honoured,
        report.revocations_enforced,
        report.written_after_warning,
        report.longest_unavailable_us / 1000,
        if report.failed() { "VIOLATIONS" } else { "ok" }
    );
    let mut shown: HashMap<&str, usize> = HashMap::new();
    for v in &report.violations {
        let n = shown.entry(v.what).or_default();
        *n += 1;
        if *n > limit {
            continue;
        }
        let _ = writeln!(out, "\n  VIOLATION ({}): {}", v.what, v.detail);
        let _ = writeln!(
            out,
            "  reproduce with --seed {seed}; the history that shows it:"
        );
        for op in &v.slice {
            let _ = writeln!(out, "    {op}");
        }
    }
    let mut kinds: Vec<_> = shown.into_iter().collect();
    kinds.sort();
    for (what, n) in kinds {
        if n > limit {
            let _ = writeln!(out, "\n  ... {} more of {what}", n - limit);
        }
    }
    out
}
