//! Mutual exclusion: no two holds of a lock overlap (read holds share; semaphores keep to
//! their limit), except across a Redis data loss.

use std::collections::HashMap;

use super::{Hold, Report, Violation, slice_of};
use crate::history::{Op, Request};

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

pub(super) fn mutual_exclusion(
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
                if !conflict(a, b) {
                    continue;
                }
                if across_loss((a.grant_lb, a.start), (b.grant_lb, b.start)) {
                    report.expected_overlaps += 1;
                    continue;
                }
                report.overlaps += 1;
                let forced = admin_ends_near(ops, name, a, b);
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
        semaphore_limit(ops, name, &hs, across_loss, report);
    }
}

/// Whether two holds of a name may not overlap (semaphore holds are counted by
/// `semaphore_limit`).
fn conflict(a: &Hold, b: &Hold) -> bool {
    match (a.permits > 0, b.permits > 0) {
        (true, true) => false,
        (true, false) | (false, true) => true,
        (false, false) => {
            a.excl.is_some_and(|x| overlaps(x, (b.start, b.end)))
                || b.excl.is_some_and(|x| overlaps(x, (a.start, a.end)))
        }
    }
}

/// The admin force releases and revocations of `name` near two holds, for the slice.
fn admin_ends_near(ops: &[Op], name: &str, a: &Hold, b: &Hold) -> Vec<usize> {
    ops.iter()
        .enumerate()
        .filter(|(_, o)| {
            o.name == name
                && matches!(
                    o.request,
                    Request::ForceRelease { .. } | Request::Revoke { .. }
                )
                && o.recv + 1_000_000 >= a.start.min(b.start)
                && o.send <= a.end.max(b.end) + 1_000_000
        })
        .map(|(i, _)| i)
        .collect()
}

/// Semaphores: permits out never above the limit.
fn semaphore_limit(
    ops: &[Op],
    name: &str,
    hs: &[&Hold],
    across_loss: &dyn Fn((u64, u64), (u64, u64)) -> bool,
    report: &mut Report,
) {
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
