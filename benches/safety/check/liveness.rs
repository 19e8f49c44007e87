//! Liveness: answers in time, no 5xx but 503 in a fault, no waiter left parked while the lock
//! was certainly free.

use std::collections::HashMap;

use super::{FaultWindow, Hold, Report, Violation};
use crate::history::{Op, Outcome, Request};

/// An answer may come this long after its wait before it counts as late.
const LATE_SLACK_US: u64 = 2_500_000;
/// A waiter answered `redis_unavailable` this long before its deadline was answered early.
const EARLY_SLACK_US: u64 = 300_000;
/// A waiter refused while the lock was certainly free for this long missed its wake-up.
const FREE_STRETCH_US: u64 = 400_000;
/// After a fault heals, 503s and slow answers are still expected this long.
const RECOVERY_US: u64 = 3_000_000;
/// A waiter whose attempt Redis refused (full) tries again 250 ms later (the server's
/// `UNANSWERED_RETRY`): it may find the permits taken by then, so a full Redis keeps a name
/// from its waiters this long after it empties.
const REFUSED_NEW_RETRY_US: u64 = 500_000;
/// A fair ticket keeps its place this long after its last request ends (--ticket-timeout-ms).
const TICKET_TIMEOUT_US: u64 = 1_000_000;

/// Whether `op` asked for a new lease during a fault that refuses those (or for what a full
/// Redis refuses alike: a leader's new value, which may take more memory).
fn refused_new(windows: &[FaultWindow], op: &Op) -> bool {
    matches!(
        op.request,
        Request::Acquire { .. }
            | Request::AcquirePermits { .. }
            | Request::Poll { .. }
            | Request::Proclaim { .. }
    ) && windows
        .iter()
        .any(|w| w.refuses_new && op.send < w.end && w.start < op.recv)
}

fn in_fault(windows: &[FaultWindow], from: u64, to: u64, pad: u64) -> bool {
    windows
        .iter()
        .any(|w| w.exempt && from < w.end + pad && w.start < to.saturating_add(pad))
}

/// Whether an answer over `from..to` may be late: in a fault that allows slow answers.
fn late_allowed(windows: &[FaultWindow], from: u64, to: u64, pad: u64) -> bool {
    windows.iter().any(|w| {
        w.exempt && !w.answers_in_time && from < w.end + pad && w.start < to.saturating_add(pad)
    })
}

pub(super) fn liveness(
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
        early_unavailable(op, wait_ms, gave_up, report);
        if gave_up || late_allowed(windows, op.send, op.recv, RECOVERY_US) {
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

/// A waiting request answered `redis_unavailable` well before its deadline: it should have
/// waited on through the failover or stall, and been answered 503 only at its deadline.
fn early_unavailable(op: &Op, wait_ms: u64, gave_up: bool, report: &mut Report) {
    let Outcome::Failed {
        status: Some(503),
        what,
    } = &op.outcome
    else {
        return;
    };
    if gave_up || wait_ms == 0 || !what.contains("redis_unavailable") {
        return;
    }
    let took = op.recv - op.send;
    if took + EARLY_SLACK_US < wait_ms * 1000 {
        report.early_unavailable += 1;
        report.violations.push(Violation {
            what: "waiter answered 503 early",
            detail: format!(
                "{} {:?}: redis_unavailable after {} ms of a {wait_ms} ms wait",
                op.name,
                op.family,
                took / 1000
            ),
            slice: vec![op.clone()],
        });
    }
}

/// Upper-bound intervals in which something may have held (or queued for) each name:
/// (from, to, exclusive, permits).
type Busy<'a> = HashMap<&'a str, Vec<(u64, u64, bool, u32)>>;

/// A waiter refused after its whole wait while the lock was certainly free for a good part
/// of it missed a wake-up.
fn parked_while_free(
    ops: &[Op],
    holds: &[Hold],
    windows: &[FaultWindow],
    ttl_max_ms: u64,
    report: &mut Report,
) {
    let busy = busy_intervals(ops, holds, ttl_max_ms);
    let ttl_us = ttl_max_ms * 1000;
    for op in ops {
        let Some((wait_ms, wants_exclusive, permits, limit)) = refused_waiter(op) else {
            continue;
        };
        if wait_ms * 1000 < FREE_STRETCH_US + 200_000 {
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
        let blocking: Vec<(u64, u64, u32)> = busy
            .get(op.name.as_str())
            .into_iter()
            .flatten()
            .filter(|&&(s, e, excl, p)| {
                s < to
                    && from < e
                    && (wants_exclusive || excl || (permits > 0 && p > 0))
                    && !(s == op.send && e > op.recv)
            })
            .map(|&(s, e, _, p)| (s, e, p))
            // While Redis refuses new leases (full) no waiter can be granted: the name is as
            // good as taken (every permit of a semaphore), however free its holds left it.
            .chain(
                windows
                    .iter()
                    .filter(|w| w.refuses_new)
                    .map(|w| (w.start, w.end + REFUSED_NEW_RETRY_US, limit.max(1))),
            )
            .collect();
        let stretch = longest_free((from, to), &blocking, permits, limit);
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

/// Every hold's upper bound, and every answer that may have granted or queued.
fn busy_intervals<'a>(ops: &'a [Op], holds: &'a [Hold], ttl_max_ms: u64) -> Busy<'a> {
    let mut busy: Busy = HashMap::new();
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
        let interval = match (&op.request, &op.outcome) {
            // An answer that may have granted: busy until its TTL could have run out.
            (Request::Acquire { ttl_ms, .. }, Outcome::Failed { .. }) => (
                op.send,
                op.recv + ttl_ms.unwrap_or(ttl_max_ms) * 1000 * 3,
                true,
                0,
            ),
            (Request::AcquirePermits { ttl_ms, .. }, Outcome::Failed { .. }) => {
                (op.send, op.recv + ttl_ms * 1000, false, permits)
            }
            (Request::Poll { .. }, Outcome::Failed { .. }) => {
                (op.send, op.recv + ttl_us * 3, true, 0)
            }
            // A queued ticket holds its place until its last request plus the ticket timeout.
            (_, Outcome::Queued { ticket }) => {
                let last = ticket_polls
                    .get(ticket.as_str())
                    .and_then(|p| p.iter().map(|o| o.recv).max())
                    .unwrap_or(op.recv)
                    .max(op.recv);
                (op.send, last + TICKET_TIMEOUT_US + 200_000, true, 0)
            }
            _ => continue,
        };
        busy.entry(op.name.as_str()).or_default().push(interval);
    }
    busy
}

/// A first request for a lease refused after its wait (or queued): (wait_ms, exclusive,
/// permits, limit).
fn refused_waiter(op: &Op) -> Option<(u64, bool, u32, u32)> {
    let waiter = match &op.request {
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
        _ => return None,
    };
    let refused = match &op.outcome {
        Outcome::Refused { code, .. } => code == "lock_held" || code == "no_permits",
        Outcome::Queued { .. } => true,
        _ => false,
    };
    refused.then_some(waiter)
}

/// The longest stretch of `[from, to)` not covered by a blocking interval (for semaphores: by
/// more permits than leave room for this request).
fn longest_free(
    (from, to): (u64, u64),
    blocking: &[(u64, u64, u32)],
    permits: u32,
    limit: u32,
) -> u64 {
    let mut points: Vec<u64> = vec![from, to];
    for &(s, e, _) in blocking {
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
    stretch
}

/// Known histories for the parked-while-free check: a semaphore waiter refused while every
/// permit was free, outside a fault and inside one that refuses new leases (Redis full).
pub(super) fn self_checks() -> Vec<(&'static str, bool)> {
    let op = |seq, client, (send, recv), request, outcome| Op {
        seq,
        client,
        instance: 0,
        name: "sem-0".to_owned(),
        family: crate::history::Family::Semaphore,
        send,
        recv,
        request,
        outcome,
        echo: None,
    };
    let permits = |permits, wait_ms| Request::AcquirePermits {
        permits,
        limit: 3,
        ttl_ms: 5_000,
        wait_ms,
    };
    // Lease A takes all 3 permits (0-1 ms) and gives them back at 1.0 s; B asks for 1 at
    // 0.5 s, waiting 2 s, and is refused at its deadline: free from 1.0 to 2.5 s.
    let history = vec![
        op(
            0,
            0,
            (0, 1_000),
            permits(3, 0),
            Outcome::Granted {
                status: 201,
                lease: "a".to_owned(),
                fence: 10,
                ttl_ms: 5_000,
                count: 3,
                kind: "semaphore".to_owned(),
            },
        ),
        op(
            1,
            0,
            (1_000_000, 1_001_000),
            Request::Release {
                lease: "a".to_owned(),
                all: true,
                mode: None,
                semaphore: true,
                idempotency: None,
            },
            Outcome::Released {
                released: true,
                count: 0,
            },
        ),
        op(
            2,
            1,
            (500_000, 2_500_000),
            permits(1, 2_000),
            Outcome::Refused {
                status: 409,
                code: "no_permits".to_owned(),
            },
        ),
    ];
    // Redis full from 0.8 s to `end`: no new lease can be granted in it.
    let judged = |end: Option<u64>| {
        let windows: Vec<FaultWindow> = end
            .map(|end| FaultWindow {
                what: "redis-full".to_owned(),
                start: 800_000,
                end,
                data_loss: false,
                loss_throughout: false,
                exempt: false,
                answers_in_time: false,
                refuses_new: true,
                served_from: None,
            })
            .into_iter()
            .collect();
        super::check(&history, &windows, &[], 1_500).parked_while_free
    };
    vec![
        (
            "a semaphore waiter refused while every permit was free for 1.4 s: parked while free",
            judged(None) == 1,
        ),
        (
            "the same while Redis was full (no new lease could be granted): excused",
            judged(Some(2_300_000)) == 0,
        ),
        (
            "the same when Redis was full for the first 0.4 s of it only: parked while free",
            judged(Some(1_200_000)) == 1,
        ),
    ]
}
