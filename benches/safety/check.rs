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
//! 3. **Liveness.** Every answer comes within its wait plus a slack; no 5xx but 503 in a
//!    fault; no waiter is refused after its whole wait while the lock was certainly free
//!    (free by *upper* bounds of every hold) for a good part of it.
//!
//! Faults that lose Redis data (a restart without persistence, or an AOF missing its last
//! second) cannot keep mutual exclusion across the loss: overlaps between a hold granted
//! before the loss and one granted after it are reported as expected, not as failures. Fences
//! must stay monotonic even then.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::history::{Family, Op, Outcome, Request};

/// Tolerance for Redis's millisecond expiry arithmetic against the harness's µs clock.
const CLOCK_SLACK_US: u64 = 3_000;
/// An answer may come this long after its wait before it counts as late.
const LATE_SLACK_US: u64 = 2_500_000;
/// A waiter refused while the lock was certainly free for this long missed its wake-up.
const FREE_STRETCH_US: u64 = 400_000;
/// After a fault heals, 503s and slow answers are still expected this long.
const RECOVERY_US: u64 = 3_000_000;
/// A fair ticket keeps its place this long after its last request ends (--ticket-timeout-ms).
const TICKET_TIMEOUT_US: u64 = 1_000_000;

/// When a fault was on, and whether it lost Redis data at its start.
#[derive(Debug, Clone)]
pub struct FaultWindow {
    pub what: String,
    pub start: u64,
    pub end: u64,
    pub data_loss: bool,
    /// Whether answers may be slow or 503 while it lasts (a fault meant to be invisible to
    /// clients, like a dropped subscription, is not).
    pub exempt: bool,
    /// Whether requests for new leases (acquires, ticket polls) may be refused with 503 while
    /// it lasts, though nothing else may (Redis full).
    pub refuses_new: bool,
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
    pub grants: usize,
    pub overlaps: usize,
    pub expected_overlaps: usize,
    pub fence_regressions: usize,
    pub lost_updates: u64,
    pub rejected_in_hold: usize,
    pub stale_rejected: usize,
    pub stale_accepted: usize,
    pub late_answers: usize,
    pub parked_while_free: usize,
    pub server_errors: usize,
    pub semantic: usize,
    pub longest_unavailable_us: u64,
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

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

/// Whether `op` asked for a new lease during a fault that refuses those.
fn refused_new(windows: &[FaultWindow], op: &Op) -> bool {
    matches!(
        op.request,
        Request::Acquire { .. } | Request::AcquirePermits { .. } | Request::Poll { .. }
    ) && windows
        .iter()
        .any(|w| w.refuses_new && op.send < w.end && w.start < op.recv)
}

fn in_fault(windows: &[FaultWindow], from: u64, to: u64, pad: u64) -> bool {
    windows
        .iter()
        .any(|w| w.exempt && from < w.end + pad && w.start < to.saturating_add(pad))
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
    let loss_times: Vec<u64> = windows
        .iter()
        .filter(|w| w.data_loss)
        .map(|w| w.start)
        .collect();
    // Two holds are excused when a data loss came between one's possible grant and the
    // other's answer: the first grant may be what Redis lost.
    let across_loss = |a: (u64, u64), b: (u64, u64)| {
        loss_times
            .iter()
            .any(|&t| (a.0 < t && t < b.1) || (b.0 < t && t < a.1))
    };

    mutual_exclusion(ops, &holds, &across_loss, &mut report);
    fencing(ops, &holds, resources, &across_loss, &mut report);
    liveness(ops, &holds, windows, ttl_max_ms, &mut report);
    semantics(ops, &across_loss, &mut report);
    report
}

/// Builds every lease's hold from its ops.
fn derive_holds(ops: &[Op]) -> Vec<Hold> {
    let mut by_lease: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if matches!(op.request, Request::ForceRelease { .. }) {
            continue;
        }
        if let Some(lease) = op.lease()
            && !lease.is_empty()
        {
            by_lease.entry(lease.to_owned()).or_default().push(i);
        }
    }
    let mut forced: HashMap<(&str, bool), Vec<usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if let Request::ForceRelease { semaphore } = op.request {
            forced
                .entry((op.name.as_str(), semaphore))
                .or_default()
                .push(i);
        }
    }
    let mut holds = Vec::new();
    for (lease, mut idx) in by_lease {
        idx.sort_by_key(|&i| (ops[i].send, ops[i].seq));
        let is_redisson = idx
            .iter()
            .any(|&i| matches!(ops[i].request, Request::RedissonLock { .. }));
        let hold = if is_redisson {
            redisson_hold(ops, &lease, &idx, &forced)
        } else {
            lease_hold(ops, &lease, &idx, &forced)
        };
        if let Some(h) = hold {
            holds.push(h);
        }
    }
    holds
}

fn redisson_hold(
    ops: &[Op],
    holder: &str,
    idx: &[usize],
    forced: &HashMap<(&str, bool), Vec<usize>>,
) -> Option<Hold> {
    let lock = idx
        .iter()
        .copied()
        .find(|&i| ops[i].outcome == Outcome::RedissonLocked)?;
    let (mut exp_at, mut ttl) = match ops[lock].request {
        Request::RedissonLock { ttl_ms, .. } => (ops[lock].send, ttl_ms),
        _ => return None,
    };
    let mut end = u64::MAX;
    let mut ub_end = ops[lock].recv + ttl * 1000;
    for &i in idx {
        let op = &ops[i];
        match (&op.request, &op.outcome) {
            (Request::RedissonRenew { ttl_ms, .. }, Outcome::RedissonDone { ok: true }) => {
                exp_at = op.send;
                ttl = *ttl_ms;
                ub_end = op.recv + ttl_ms * 1000;
            }
            // The client learns it lost the lock.
            (Request::RedissonRenew { .. }, Outcome::RedissonDone { ok: false }) => {
                end = end.min(op.recv);
                ub_end = ub_end.min(op.recv);
            }
            (Request::RedissonUnlock { .. }, _) => {
                end = end.min(op.send);
                ub_end = ub_end.min(op.recv);
            }
            _ => {}
        }
    }
    let start = ops[lock].recv;
    for &f in forced
        .get(&(ops[lock].name.as_str(), false))
        .into_iter()
        .flatten()
    {
        let fr = &ops[f];
        if fr.recv >= ops[lock].send {
            end = end.min(fr.send.max(start));
        }
    }
    let end = end.min((exp_at + ttl * 1000).saturating_sub(CLOCK_SLACK_US));
    Some(Hold {
        lease: holder.to_owned(),
        name: ops[lock].name.clone(),
        kind: "redisson".into(),
        fence: None,
        permits: 0,
        limit: 0,
        grant_lb: ops[lock].send,
        start,
        end,
        excl: Some((start, end)),
        ub_end,
        ops: idx.to_vec(),
    })
}

fn lease_hold(
    ops: &[Op],
    lease: &str,
    idx: &[usize],
    forced: &HashMap<(&str, bool), Vec<usize>>,
) -> Option<Hold> {
    // The first answer that granted it: a new lease (201) or a ticket's poll.
    let first = idx.iter().copied().find(|&i| {
        matches!(ops[i].outcome, Outcome::Granted { .. })
            && matches!(
                ops[i].request,
                Request::Acquire {
                    reentry_of: None,
                    ..
                } | Request::AcquirePermits { .. }
                    | Request::Poll { .. }
            )
    })?;
    let grant = &ops[first];
    let Outcome::Granted {
        fence,
        ttl_ms,
        kind,
        ..
    } = &grant.outcome
    else {
        return None;
    };
    // The grant followed every request of the ticket that was answered "queued".
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
    let (permits, limit) = match grant.request {
        Request::AcquirePermits { permits, limit, .. } => (permits, limit),
        _ => (0, 0),
    };
    let semaphore = permits > 0;
    let rw = kind == "read" || kind == "write";
    let (mut reads, mut writes) = (u64::from(kind == "read"), u64::from(kind != "read"));
    let mut excl_end: Option<u64> = None;
    let (mut exp_at, mut exp_ttl) = (grant_lb, *ttl_ms);
    let mut ub_exp = grant.recv + ttl_ms * 1000;
    let mut end = u64::MAX;
    let mut ub_end = u64::MAX;
    // A retry with an Idempotency-Key gets the first answer again: it renews nothing, so the
    // TTL counts from the first request that carried the key.
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
    for &i in idx {
        let op = &ops[i];
        if op.seq == grant.seq || (op.send < grant.send && op.recv < grant_lb) {
            continue;
        }
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
                if rw {
                    if *k == "read" {
                        reads += 1;
                    } else {
                        writes += 1;
                    }
                    let total = reads + writes;
                    if *count < total && *k == "read" {
                        reads -= total - count;
                    } else if *count < total {
                        writes -= total - count;
                    }
                } else {
                    writes = *count;
                }
                exp_at = op.send;
                exp_ttl = *ttl_ms;
                ub_exp = op.recv + ttl_ms * 1000;
            }
            (Request::Heartbeat { .. }, Outcome::Renewed { ttl_ms, .. }) => {
                exp_at = op.send;
                exp_ttl = *ttl_ms;
                ub_exp = op.recv + ttl_ms * 1000;
            }
            // An unknown reentry or heartbeat may have extended the lease.
            (
                Request::Acquire { ttl_ms, .. } | Request::Heartbeat { ttl_ms, .. },
                Outcome::Failed { .. },
            ) => {
                ub_exp = ub_exp.max(op.recv + ttl_ms.unwrap_or(exp_ttl).max(exp_ttl) * 1000);
            }
            (
                Request::Release {
                    all,
                    mode,
                    idempotency,
                    ..
                },
                outcome,
            ) => {
                let certain = !outcome.uncertain();
                // A retry with an Idempotency-Key gets the first answer again and renews
                // nothing itself: the renewal a level left makes happened once, when one of the
                // key's requests ran, no earlier than the first was sent.
                let renewed_from = match idempotency.as_deref().and_then(|k| first_send.get(k)) {
                    Some(&first) if first < op.send => exp_at.max(first),
                    _ => op.send,
                };
                match outcome {
                    Outcome::Released { released, count } => {
                        if *released || *count == 0 {
                            end = end.min(op.send);
                            ub_end = ub_end.min(op.recv);
                        } else if rw {
                            // Levels remain: like Redisson's unlock, the release renews the
                            // lease for its TTL (the lock key follows its read holds' own
                            // timeouts, so only the upper bound moves).
                            ub_exp = ub_exp.max(op.recv + exp_ttl * 1000);
                            let which = if *all {
                                "both"
                            } else {
                                mode.unwrap_or(if writes > 0 { "write" } else { "read" })
                            };
                            match which {
                                "write" => writes = writes.saturating_sub(1),
                                "read" => reads = reads.saturating_sub(1),
                                _ => {}
                            }
                            if writes == 0 && excl_end.is_none() {
                                excl_end = Some(op.send);
                            }
                        } else if *all {
                            // The client asked for all: from its point of view the hold is over.
                            end = end.min(op.send);
                        } else {
                            // Levels remain: like Redisson's unlock, the release renews the
                            // lease (and the lock key) for the lease's TTL. `count` levels
                            // are left: a later release that fails may have ended the lease.
                            writes = *count;
                            exp_at = renewed_from;
                            ub_exp = ub_exp.max(op.recv + exp_ttl * 1000);
                        }
                    }
                    Outcome::Lost { .. } => {
                        end = end.min(op.recv);
                        ub_end = ub_end.min(op.recv);
                    }
                    // It may have released: a lower bound must assume so.
                    _ if !certain && (*all || reads + writes <= 1 || semaphore) => {
                        end = end.min(op.send);
                    }
                    // It may have released one level, which renews: an upper bound must
                    // assume so.
                    _ if !certain => ub_exp = ub_exp.max(op.recv + exp_ttl * 1000),
                    _ => {}
                }
                if *all && !rw {
                    end = end.min(op.send);
                }
            }
            // A poll of a ticket already granted must answer with the grant or a clear 409/410
            // and never release the lease: its 410 does not end the hold.
            (Request::Poll { .. }, Outcome::Lost { .. }) => {}
            (_, Outcome::Lost { .. }) => {
                end = end.min(op.recv);
                ub_end = ub_end.min(op.recv);
            }
            _ => {}
        }
    }
    // An admin force release of the name ends the hold when it is sent.
    if let Some(frs) = forced.get(&(grant.name.as_str(), semaphore)) {
        for &f in frs {
            let fr = &ops[f];
            // It may have removed this lease if it could run after the grant...
            if fr.recv >= grant_lb {
                end = end.min(fr.send.max(start));
            }
            // ...and certainly did if it was sent after the grant's answer came.
            if fr.send >= start && matches!(fr.outcome, Outcome::Forced { .. }) {
                ub_end = ub_end.min(fr.recv);
            }
        }
    }
    let expiry = (exp_at + exp_ttl * 1000).saturating_sub(CLOCK_SLACK_US);
    let end = end.min(expiry);
    let ub_end = ub_end.min(ub_exp + CLOCK_SLACK_US);
    let excl = if kind == "read" {
        None
    } else if rw {
        Some((start, excl_end.unwrap_or(end).min(end)))
    } else if semaphore {
        None
    } else {
        Some((start, end))
    };
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

fn slice_of(ops: &[Op], holds: &[&Hold], extra: &[usize]) -> Vec<Op> {
    let mut idx: Vec<usize> = holds.iter().flat_map(|h| h.ops.iter().copied()).collect();
    idx.extend_from_slice(extra);
    idx.sort_unstable();
    idx.dedup();
    idx.into_iter().map(|i| ops[i].clone()).collect()
}

fn mutual_exclusion(
    ops: &[Op],
    holds: &[Hold],
    across_loss: &dyn Fn((u64, u64), (u64, u64)) -> bool,
    report: &mut Report,
) {
    let mut by_name: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds {
        if h.start < h.end {
            by_name.entry(h.name.as_str()).or_default().push(h);
        }
    }
    for (name, mut hs) in by_name {
        hs.sort_by_key(|h| h.start);
        // Locks (and locks against semaphores).
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                if b.start >= a.end {
                    continue;
                }
                let conflict = match (a.permits > 0, b.permits > 0) {
                    (true, true) => false, // counted below
                    (true, false) | (false, true) => true,
                    (false, false) => {
                        a.excl.is_some_and(|x| overlaps(x, (b.start, b.end)))
                            || b.excl.is_some_and(|x| overlaps(x, (a.start, a.end)))
                    }
                };
                if !conflict {
                    continue;
                }
                if across_loss((a.grant_lb, a.start), (b.grant_lb, b.start)) {
                    report.expected_overlaps += 1;
                    continue;
                }
                report.overlaps += 1;
                let forced: Vec<usize> = ops
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| {
                        o.name == name
                            && matches!(o.request, Request::ForceRelease { .. })
                            && o.recv + 1_000_000 >= a.start.min(b.start)
                            && o.send <= a.end.max(b.end) + 1_000_000
                    })
                    .map(|(i, _)| i)
                    .collect();
                report.violations.push(Violation {
                    what: "mutual exclusion",
                    detail: format!(
                        "{name}: {} lease {} held [{:.6}s, {:.6}s) and {} lease {} held [{:.6}s, {:.6}s)",
                        a.kind,
                        a.lease,
                        a.start as f64 / 1e6,
                        a.end as f64 / 1e6,
                        b.kind,
                        b.lease,
                        b.start as f64 / 1e6,
                        b.end as f64 / 1e6
                    ),
                    slice: slice_of(ops, &[a, b], &forced),
                });
            }
        }
        // Semaphores: permits out never above the limit.
        let sem: Vec<&&Hold> = hs.iter().filter(|h| h.permits > 0).collect();
        let mut events: Vec<(u64, i64, usize)> = Vec::new();
        for (k, h) in sem.iter().enumerate() {
            events.push((h.start, i64::from(h.permits), k));
            events.push((h.end, -i64::from(h.permits), k));
        }
        events.sort_by_key(|&(t, d, _)| (t, d));
        let mut out = 0i64;
        let mut live: Vec<usize> = Vec::new();
        for (_, d, k) in events {
            out += d;
            if d > 0 {
                live.push(k);
            } else {
                live.retain(|&x| x != k);
            }
            let limit = sem.get(k).map_or(0, |h| h.limit);
            if out > i64::from(limit) && d > 0 {
                let involved: Vec<&Hold> = live.iter().map(|&x| *sem[x]).collect();
                let lbs: Vec<(u64, u64)> = involved.iter().map(|h| (h.grant_lb, h.start)).collect();
                let expected = lbs.iter().any(|&x| lbs.iter().any(|&y| across_loss(x, y)));
                if expected {
                    report.expected_overlaps += 1;
                    continue;
                }
                report.overlaps += 1;
                report.violations.push(Violation {
                    what: "semaphore over its limit",
                    detail: format!("{name}: {out} permits out of {limit}"),
                    slice: slice_of(ops, &involved, &[]),
                });
            }
        }
    }
}

fn fencing(
    ops: &[Op],
    holds: &[Hold],
    resources: &[(String, u64, u64)],
    across_loss: &dyn Fn((u64, u64), (u64, u64)) -> bool,
    report: &mut Report,
) {
    let mut by_name: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds.iter().filter(|h| h.fence.is_some()) {
        by_name.entry(h.name.as_str()).or_default().push(h);
    }
    for (name, hs) in &by_name {
        // Grants whose answer arrived (in recv order) against grants asked later.
        let mut done: Vec<(u64, u64, &Hold)> = hs
            .iter()
            .map(|h| (h.start, h.fence.unwrap_or(0), *h))
            .collect();
        done.sort_by_key(|d| d.0);
        let mut asked: Vec<&&Hold> = hs.iter().collect();
        asked.sort_by_key(|h| h.grant_lb);
        let mut j = 0;
        let mut best: Option<(u64, &Hold)> = None;
        for b in asked {
            while j < done.len() && done[j].0 < b.grant_lb {
                if best.is_none_or(|(f, _)| done[j].1 > f) {
                    best = Some((done[j].1, done[j].2));
                }
                j += 1;
            }
            if let (Some((f, a)), Some(fb)) = (best, b.fence)
                && fb <= f
                && a.lease != b.lease
            {
                report.fence_regressions += 1;
                report.violations.push(Violation {
                    what: "fence regression",
                    detail: format!(
                        "{name}: lease {} got fence {fb} after lease {} had {f}{}",
                        b.lease,
                        a.lease,
                        if across_loss((a.grant_lb, a.start), (b.grant_lb, b.start)) {
                            " (across a Redis data loss)"
                        } else {
                            ""
                        }
                    ),
                    slice: slice_of(ops, &[a, b], &[]),
                });
            }
        }
    }
    // Reentries and heartbeats keep the lease's fence.
    let fence_of: HashMap<&str, (u64, &Hold)> = holds
        .iter()
        .filter_map(|h| Some((h.lease.as_str(), (h.fence?, h))))
        .collect();
    for op in ops {
        let got = match (&op.request, &op.outcome) {
            (
                Request::Acquire {
                    reentry_of: Some(_),
                    ..
                },
                Outcome::Granted { fence, .. },
            )
            | (Request::Heartbeat { .. }, Outcome::Renewed { fence, .. })
            | (Request::Poll { .. }, Outcome::Granted { fence, .. }) => *fence,
            _ => continue,
        };
        if let Some(lease) = op.lease()
            && let Some(&(want, h)) = fence_of.get(lease)
            && got != want
        {
            report.fence_regressions += 1;
            report.violations.push(Violation {
                what: "fence changed within a lease",
                detail: format!(
                    "{}: lease {lease} has fence {want}, an answer said {got}",
                    op.name
                ),
                slice: slice_of(ops, &[h], &[]),
            });
        }
    }
    // Lost updates: acknowledged increments the final value does not show.
    for (name, value, acked) in resources {
        if value != acked {
            report.lost_updates += acked.abs_diff(*value);
            let mut written: HashMap<u64, Vec<usize>> = HashMap::new();
            for (i, op) in ops.iter().enumerate() {
                if &op.name == name
                    && let Outcome::ResourceOk { wrote: Some(v) } = op.outcome
                {
                    written.entry(v).or_default().push(i);
                }
            }
            let dup: Vec<usize> = written
                .into_values()
                .filter(|v| v.len() > 1)
                .flatten()
                .take(6)
                .collect();
            let involved: Vec<&Hold> = dup
                .iter()
                .filter_map(|&i| ops[i].lease().and_then(|l| fence_of.get(l)).map(|x| x.1))
                .collect();
            report.violations.push(Violation {
                what: "lost update",
                detail: format!("{name}: {acked} increments acknowledged, value {value}"),
                slice: slice_of(ops, &involved, &dup),
            });
        }
    }
    // Resource operations refused inside a hold, or accepted after it.
    let hold_of: HashMap<&str, &Hold> = holds.iter().map(|h| (h.lease.as_str(), h)).collect();
    for (i, op) in ops.iter().enumerate() {
        let Request::Resource { lease, write, .. } = &op.request else {
            continue;
        };
        let Some(h) = hold_of.get(lease.as_str()) else {
            continue;
        };
        let inside = if *write {
            h.excl.is_some_and(|(s, e)| s <= op.send && op.recv <= e)
        } else {
            h.start <= op.send && op.recv <= h.end
        };
        match op.outcome {
            Outcome::ResourceRejected { seen } if inside => {
                // Who pushed the mark past this fence, and was that across a data loss?
                let newer = holds
                    .iter()
                    .find(|o| o.name == h.name && o.fence == Some(seen));
                if newer.is_some_and(|n| across_loss((h.grant_lb, h.start), (n.grant_lb, n.start)))
                {
                    report.expected_overlaps += 1;
                    continue;
                }
                report.rejected_in_hold += 1;
                let mut involved = vec![*h];
                involved.extend(newer);
                report.violations.push(Violation {
                    what: "resource refused a holder",
                    detail: format!(
                        "{}: lease {lease} (fence {:?}) was refused inside its hold; fence {seen} had been seen",
                        op.name, h.fence
                    ),
                    slice: slice_of(ops, &involved, &[i]),
                });
            }
            Outcome::ResourceRejected { .. } => report.stale_rejected += 1,
            Outcome::ResourceOk { .. } if op.send > h.end => report.stale_accepted += 1,
            _ => {}
        }
    }
}

fn liveness(
    ops: &[Op],
    holds: &[Hold],
    windows: &[FaultWindow],
    ttl_max_ms: u64,
    report: &mut Report,
) {
    // Longest stretch in which requests were made and none succeeded.
    let mut by_recv: Vec<&Op> = ops.iter().filter(|o| o.instance != usize::MAX).collect();
    by_recv.sort_by_key(|o| o.recv);
    let mut last_ok = by_recv.first().map_or(0, |o| o.send);
    for op in &by_recv {
        if op.outcome.uncertain() {
            report.longest_unavailable_us = report.longest_unavailable_us.max(op.recv - last_ok);
        } else {
            last_ok = op.recv;
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if op.instance == usize::MAX {
            continue;
        }
        // Server errors: 500s never; 503 only during a fault (and its recovery).
        if let Outcome::Failed {
            status: Some(s), ..
        } = op.outcome
            && (s != 503
                || !(in_fault(windows, op.send, op.recv, RECOVERY_US) || refused_new(windows, op)))
        {
            report.server_errors += 1;
            report.violations.push(Violation {
                what: "server error",
                detail: format!("{} answered {s} outside a fault", op.name),
                slice: vec![ops[i].clone()],
            });
        }
        // Late answers.
        let (wait_ms, gave_up) = match &op.request {
            Request::Acquire {
                wait_ms,
                gave_up_ms,
                ..
            } => (*wait_ms, gave_up_ms.is_some()),
            Request::AcquirePermits { wait_ms, .. } | Request::Poll { wait_ms, .. } => {
                (*wait_ms, false)
            }
            _ => (0, false),
        };
        if gave_up || in_fault(windows, op.send, op.recv, RECOVERY_US) {
            continue;
        }
        if op.recv - op.send > wait_ms * 1000 + LATE_SLACK_US {
            report.late_answers += 1;
            report.violations.push(Violation {
                what: "late answer",
                detail: format!(
                    "{}: answered after {} ms with a wait of {wait_ms} ms",
                    op.name,
                    (op.recv - op.send) / 1000
                ),
                slice: vec![ops[i].clone()],
            });
        }
    }
    parked_while_free(ops, holds, windows, ttl_max_ms, report);
}

/// A waiter refused after its whole wait while the lock was certainly free for a good part
/// of it missed a wake-up.
fn parked_while_free(
    ops: &[Op],
    holds: &[Hold],
    windows: &[FaultWindow],
    ttl_max_ms: u64,
    report: &mut Report,
) {
    // Upper-bound intervals in which something may have held (or queued for) each name.
    let mut busy: HashMap<&str, Vec<(u64, u64, bool, u32)>> = HashMap::new();
    for h in holds {
        let exclusive = h.kind != "read";
        busy.entry(h.name.as_str()).or_default().push((
            h.grant_lb,
            h.ub_end.max(h.start),
            exclusive,
            h.permits,
        ));
    }
    let ttl_us = ttl_max_ms * 1000;
    let mut ticket_polls: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in ops {
        if let Request::Poll { ticket, .. } | Request::Leave { ticket } = &op.request {
            ticket_polls.entry(ticket.as_str()).or_default().push(op);
        }
    }
    for op in ops {
        let permits = match &op.request {
            Request::AcquirePermits { permits, .. } => *permits,
            _ => 0,
        };
        match (&op.request, &op.outcome) {
            // An answer that may have granted: busy until its TTL could have run out.
            (Request::Acquire { ttl_ms, .. }, Outcome::Failed { .. }) => {
                busy.entry(op.name.as_str()).or_default().push((
                    op.send,
                    op.recv + ttl_ms.unwrap_or(ttl_max_ms) * 1000 * 3,
                    true,
                    0,
                ))
            }
            (Request::AcquirePermits { ttl_ms, .. }, Outcome::Failed { .. }) => busy
                .entry(op.name.as_str())
                .or_default()
                .push((op.send, op.recv + ttl_ms * 1000, false, permits)),
            (Request::Poll { .. }, Outcome::Failed { .. }) => busy
                .entry(op.name.as_str())
                .or_default()
                .push((op.send, op.recv + ttl_us * 3, true, 0)),
            // A queued ticket holds its place until its last request plus the ticket timeout.
            (_, Outcome::Queued { ticket }) => {
                let last = ticket_polls
                    .get(ticket.as_str())
                    .and_then(|p| p.iter().map(|o| o.recv).max())
                    .unwrap_or(op.recv)
                    .max(op.recv);
                busy.entry(op.name.as_str()).or_default().push((
                    op.send,
                    last + TICKET_TIMEOUT_US + 200_000,
                    true,
                    0,
                ));
            }
            _ => {}
        }
    }
    for op in ops {
        let (wait_ms, wants_exclusive, permits, limit) = match &op.request {
            Request::Acquire {
                wait_ms,
                kind,
                reentry_of: None,
                gave_up_ms: None,
                ..
            } => (*wait_ms, *kind != "read", 0, 0),
            Request::Poll { wait_ms, .. } => (*wait_ms, true, 0, 0),
            Request::AcquirePermits {
                wait_ms,
                permits,
                limit,
                ..
            } => (*wait_ms, false, *permits, *limit),
            _ => continue,
        };
        let refused = match &op.outcome {
            Outcome::Refused { code, .. } => code == "lock_held" || code == "no_permits",
            Outcome::Queued { .. } => true,
            _ => false,
        };
        if !refused || wait_ms * 1000 < FREE_STRETCH_US + 200_000 {
            continue;
        }
        let from = op.send + 100_000;
        let to = (op.send + wait_ms * 1000).saturating_sub(100_000);
        if in_fault(
            windows,
            op.send.saturating_sub(ttl_us * 3),
            op.recv,
            RECOVERY_US,
        ) {
            continue;
        }
        let own_ticket = match &op.outcome {
            Outcome::Queued { ticket } => Some(ticket.as_str()),
            _ => None,
        };
        let blocking: Vec<(u64, u64, u32)> = busy
            .get(op.name.as_str())
            .into_iter()
            .flatten()
            .filter(|&&(s, e, excl, p)| {
                let _ = own_ticket;
                s < to
                    && from < e
                    && (wants_exclusive || excl || (permits > 0 && p > 0))
                    && !(s == op.send && e > op.recv)
            })
            .map(|&(s, e, _, p)| (s, e, p))
            .collect();
        // Longest stretch in [from, to) not covered by a blocking interval (for
        // semaphores: by more permits than leave room for this request).
        let mut points: Vec<u64> = vec![from, to];
        for &(s, e, _) in &blocking {
            points.push(s.clamp(from, to));
            points.push(e.clamp(from, to));
        }
        points.sort_unstable();
        points.dedup();
        let mut stretch = 0u64;
        let mut run_start: Option<u64> = None;
        for w in points.windows(2) {
            let mid = w[0] + (w[1] - w[0]) / 2;
            let used: u32 = blocking
                .iter()
                .filter(|&&(s, e, _)| s <= mid && mid < e)
                .map(|&(_, _, p)| p.max(if permits > 0 { 0 } else { 1 }))
                .sum();
            let free = if permits > 0 {
                used + permits <= limit
            } else {
                used == 0
            };
            if free {
                let s = *run_start.get_or_insert(w[0]);
                stretch = stretch.max(w[1] - s);
            } else {
                run_start = None;
            }
        }
        if stretch >= FREE_STRETCH_US {
            report.parked_while_free += 1;
            let slice: Vec<Op> = ops
                .iter()
                .filter(|o| o.name == op.name && o.send < op.recv && o.recv + 2_000_000 > op.send)
                .cloned()
                .collect();
            report.violations.push(Violation {
                what: "waiter parked while the lock was free",
                detail: format!(
                    "{}: refused after a {wait_ms} ms wait; free for {} ms of it",
                    op.name,
                    stretch / 1000
                ),
                slice,
            });
        }
    }
}

/// What the API promises beyond the three properties: replays answer the first answer,
/// `all=true` releases everything, and releasing one level of a reentrant or fair lease held
/// several levels deep keeps the rest (its holder goes on working under them). Not across a
/// Redis data loss (`across_loss`, as for overlaps): what Redis lost (a re-entry, the first
/// answer's idempotency record) is gone, as the README says of a Redis that loses writes.
fn semantics(
    ops: &[Op],
    across_loss: &dyn Fn((u64, u64), (u64, u64)) -> bool,
    report: &mut Report,
) {
    let mut first: HashMap<&str, &Op> = HashMap::new();
    levels_kept(ops, across_loss, report);
    for op in ops {
        let key = match &op.request {
            Request::Acquire {
                idempotency: Some(k),
                ..
            }
            | Request::Release {
                idempotency: Some(k),
                ..
            } => k.as_str(),
            _ => {
                if let (
                    Request::Release {
                        all: true,
                        semaphore: false,
                        ..
                    },
                    Outcome::Released {
                        released: false,
                        count,
                    },
                ) = (&op.request, &op.outcome)
                {
                    report.semantic += 1;
                    report.violations.push(Violation {
                        what: "all=true left levels",
                        detail: format!("{}: a release with all=true left {count} levels", op.name),
                        slice: ops
                            .iter()
                            .filter(|o| o.lease() == op.lease())
                            .cloned()
                            .collect(),
                    });
                }
                continue;
            }
        };
        let Some(prev) = first.get(key) else {
            first.insert(key, op);
            continue;
        };
        if across_loss((prev.send, prev.recv), (op.send, op.recv)) {
            continue;
        }
        let same = match (&prev.outcome, &op.outcome) {
            (
                Outcome::Granted {
                    count: a,
                    fence: fa,
                    ..
                },
                Outcome::Granted {
                    count: b,
                    fence: fb,
                    ..
                },
            ) => a == b && fa == fb,
            (
                Outcome::Released {
                    count: a,
                    released: ra,
                },
                Outcome::Released {
                    count: b,
                    released: rb,
                },
            ) => a == b && ra == rb,
            // A lease granted (or re-entered) first may have run out before the retry came, or
            // an operator may have force-released its lock in between: a replay answers for
            // the lease as it is now, so "lost" is its honest answer then (a replayed grant
            // would tell the client it holds a lock it does not).
            (Outcome::Granted { ttl_ms, .. }, Outcome::Lost { .. }) => {
                op.recv >= prev.send + ttl_ms * 1_000
                    || ops.iter().any(|f| {
                        f.name == op.name
                            && matches!(f.request, Request::ForceRelease { .. })
                            && f.send < op.recv
                            && f.recv > prev.send
                    })
            }
            // A failed first try may have happened or not; anything goes for the retry.
            (Outcome::Failed { .. }, _) | (_, Outcome::Failed { .. }) => true,
            // A refusal changed nothing and is not kept: the retry runs again, as of now.
            (Outcome::Refused { .. } | Outcome::Lost { .. }, _) => true,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        if !same {
            report.semantic += 1;
            report.violations.push(Violation {
                what: "a retry did not get the first answer",
                detail: format!("{}: Idempotency-Key {key}", op.name),
                slice: vec![(*prev).clone(), op.clone()],
            });
        }
    }
}

/// A release of one level answered "released" (the lock let go) while the lease was known to
/// hold more levels. Levels are known from the answers (a grant's count, a partial release's
/// count left); an answer that did not come (a failure) makes them unknown until the next, and
/// so does a data loss between the answer that told them and the release.
fn levels_kept(
    ops: &[Op],
    across_loss: &dyn Fn((u64, u64), (u64, u64)) -> bool,
    report: &mut Report,
) {
    // Lease -> its levels, and when the op that told them was sent and answered.
    let mut levels: HashMap<&str, (u64, (u64, u64))> = HashMap::new();
    for op in ops {
        if !matches!(op.family, Family::Reentrant | Family::Fair) {
            continue;
        }
        let Some(lease) = op.lease() else { continue };
        match (&op.request, &op.outcome) {
            (_, Outcome::Granted { count, .. }) => {
                levels.insert(lease, (*count, (op.send, op.recv)));
            }
            (_, Outcome::Failed { .. } | Outcome::Lost { .. }) => {
                levels.remove(lease);
            }
            (
                Request::Release {
                    all: false,
                    semaphore: false,
                    ..
                },
                Outcome::Released { released, count },
            ) => {
                let before = levels
                    .remove(lease)
                    .filter(|&(_, told)| !across_loss(told, (op.send, op.recv)))
                    .map(|(n, _)| n);
                if *released && before.is_some_and(|n| n >= 2) {
                    report.semantic += 1;
                    report.violations.push(Violation {
                        what: "one level released let the lock go",
                        detail: format!(
                            "{}: lease {lease} held {} levels; releasing one freed the lock",
                            op.name,
                            before.unwrap_or_default()
                        ),
                        slice: ops
                            .iter()
                            .filter(|o| o.lease() == Some(lease))
                            .cloned()
                            .collect(),
                    });
                } else if !*released {
                    levels.insert(lease, (*count, (op.send, op.recv)));
                }
            }
            _ => {}
        }
    }
}

/// The report as text: one summary line, then each violation with its slice.
pub fn render(label: &str, seed: u64, report: &Report, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{label} seed={seed} (injected: {}): {} ops, {} acquisitions, {} grants; overlaps {} (expected after data loss {}), fence regressions {}, lost updates {}, refused in hold {} (stale writes refused {}, accepted before a newer holder wrote {}), late answers {}, parked while free {}, server errors {}, semantic {}; longest unavailability {} ms => {}",
        if report.faults.is_empty() {
            "nothing"
        } else {
            &report.faults
        },
        report.ops,
        report.acquisitions,
        report.grants,
        report.overlaps,
        report.expected_overlaps,
        report.fence_regressions,
        report.lost_updates,
        report.rejected_in_hold,
        report.stale_rejected,
        report.stale_accepted,
        report.late_answers,
        report.parked_while_free,
        report.server_errors,
        report.semantic,
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

/// Known histories run through the checkers (`--self-check`): each must be judged as stated,
/// so a checker that stops seeing a violation, or starts seeing one that is not, shows here.
/// Returns (history, passed) pairs.
pub fn self_check() -> Vec<(&'static str, bool)> {
    let lease = |id: &str| id.to_owned();
    let op = |seq, client, send, recv, request, outcome| Op {
        seq,
        client,
        instance: 0,
        name: "re-0".to_owned(),
        family: Family::Reentrant,
        send,
        recv,
        request,
        outcome,
    };
    let acquire = |reentry_of: Option<String>| Request::Acquire {
        kind: "reentrant",
        ttl_ms: Some(500),
        wait_ms: 0,
        reentry_of,
        idempotency: None,
        gave_up_ms: None,
    };
    let granted = |id: &str, count, status| Outcome::Granted {
        status,
        lease: id.to_owned(),
        fence: 10,
        ttl_ms: 500,
        count,
        kind: "reentrant".to_owned(),
    };
    let release = |id: &str| Request::Release {
        lease: lease(id),
        all: false,
        mode: None,
        semaphore: false,
        idempotency: None,
    };
    let failed = || Outcome::Failed {
        status: Some(503),
        what: "redis_unavailable".to_owned(),
    };
    // Lease A granted (at 0-1 ms) and re-entered (at 2-3 ms): 2 levels.
    let entered_twice = || {
        vec![
            op(0, 0, 0, 1_000, acquire(None), granted("a", 1, 201)),
            op(
                1,
                0,
                2_000,
                3_000,
                acquire(Some(lease("a"))),
                granted("a", 2, 200),
            ),
        ]
    };
    // Lease A: granted, re-entered (2 levels), one level released (1 left), then a release
    // of the last level fails (503: it may have happened), and lease B is granted 100 ms
    // later, within A's TTL. `partial`: whether the one-level release came first.
    let history = |partial: bool| {
        let mut ops = entered_twice();
        if partial {
            ops.push(op(
                2,
                0,
                4_000,
                5_000,
                release("a"),
                Outcome::Released {
                    released: false,
                    count: 1,
                },
            ));
        }
        let n = ops.len();
        ops.push(op(n, 0, 6_000, 2_006_000, release("a"), failed()));
        ops.push(op(
            n + 1,
            1,
            100_000,
            101_000,
            acquire(None),
            Outcome::Granted {
                status: 201,
                lease: lease("b"),
                fence: 11,
                ttl_ms: 500,
                count: 1,
                kind: "reentrant".to_owned(),
            },
        ));
        ops
    };
    let judged = |ops: &[Op]| check(ops, &[], &[], 1_500).overlaps;
    // Lease A re-entered (2 levels), then a release of one level that let the lock go: what
    // Redis answers when it lost the re-entry (a crash that cut its last second of writes).
    let mut level_gone = entered_twice();
    level_gone.push(op(
        2,
        0,
        10_000,
        11_000,
        release("a"),
        Outcome::Released {
            released: true,
            count: 0,
        },
    ));
    let crash = FaultWindow {
        what: "redis-crash-aof-everysec".to_owned(),
        start: 5_000,
        end: 8_000,
        data_loss: true,
        exempt: true,
        refuses_new: false,
    };
    let semantic = |windows: &[FaultWindow]| check(&level_gone, windows, &[], 1_500).semantic;
    // Lease A re-entered (2 levels), one level released with an Idempotency-Key (at 4-5 ms,
    // renewing A for its 500 ms), the release retried with the same key at 300-301 ms (the
    // first answer again: no renewal), and lease B granted at 600-601 ms, after A's TTL.
    // Found by the full tier (seed 1, subscriber-drop), which counted the retry as a renewal.
    let keyed_release = || Request::Release {
        lease: lease("a"),
        all: false,
        mode: None,
        semaphore: false,
        idempotency: Some("k".to_owned()),
    };
    let one_left = || Outcome::Released {
        released: false,
        count: 1,
    };
    let mut replayed = entered_twice();
    replayed.push(op(2, 0, 4_000, 5_000, keyed_release(), one_left()));
    replayed.push(op(3, 0, 300_000, 301_000, keyed_release(), one_left()));
    replayed.push(op(
        4,
        1,
        600_000,
        601_000,
        acquire(None),
        Outcome::Granted {
            status: 201,
            lease: lease("b"),
            fence: 11,
            ttl_ms: 500,
            count: 1,
            kind: "reentrant".to_owned(),
        },
    ));
    vec![
        (
            "a failed release of a lease's last level may have ended it: no overlap",
            judged(&history(true)) == 0,
        ),
        (
            "a failed release of one of two levels leaves the lease held: an overlap",
            judged(&history(false)) == 1,
        ),
        (
            "a release of one of two levels that let the lock go: a semantic violation",
            semantic(&[]) == 1,
        ),
        (
            "the same across a Redis data loss (the re-entry may be what Redis lost): excused",
            semantic(std::slice::from_ref(&crash)) == 0,
        ),
        (
            "a release retried with its Idempotency-Key renews nothing: no overlap after the TTL",
            judged(&replayed) == 0,
        ),
    ]
}
