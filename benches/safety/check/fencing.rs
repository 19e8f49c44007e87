//! Fencing: fences grow with the order of grants, reentries and heartbeats keep theirs, and
//! the fenced resource loses no acknowledged increment.

use std::collections::HashMap;

use super::{Hold, Report, Violation, slice_of};
use crate::history::{Family, Op, Outcome, Request};

/// A loss of Redis data between two spans (`(grant_lb, start)` of each) excuses what it
/// explains.
type AcrossLoss<'a> = &'a dyn Fn((u64, u64), (u64, u64)) -> bool;

pub(super) fn fencing(
    ops: &[Op],
    holds: &[Hold],
    resources: &[(String, u64, u64)],
    across_loss: AcrossLoss,
    report: &mut Report,
) {
    fences_grow(ops, holds, across_loss, report);
    let fence_of: HashMap<&str, (u64, &Hold)> = holds
        .iter()
        .filter_map(|h| Some((h.lease.as_str(), (h.fence?, h))))
        .collect();
    fences_kept(ops, &fence_of, across_loss, report);
    lost_updates(ops, resources, &fence_of, report);
    resource_fenced(ops, holds, across_loss, report);
}

/// A grant asked after another grant's answer came carries a larger fence.
fn fences_grow(ops: &[Op], holds: &[Hold], across_loss: AcrossLoss, report: &mut Report) {
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
}

/// Reentries and heartbeats keep the lease's fence. (Not RedLock's: there each answer gives
/// the largest fence of the nodes that answered it, and while the node that gave the grant's
/// largest is down that is another; the book's RedLock page says so. Its grants are still
/// checked by `fences_grow`.)
fn fences_kept(
    ops: &[Op],
    fence_of: &HashMap<&str, (u64, &Hold)>,
    across_loss: AcrossLoss,
    report: &mut Report,
) {
    for op in ops.iter().filter(|op| op.family != Family::Redlock) {
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
        // A grant Redis lost (a crash with `appendfsync everysec`) may be made again under
        // the same id with a new, higher fence: a candidate's campaign retried with its
        // Idempotency-Key whose place in line outlived the crash, its term did not.
        let regranted = |want: u64, h: &Hold| {
            got > want && across_loss((h.grant_lb, h.start), (op.send, op.recv))
        };
        if let Some(lease) = op.lease()
            && let Some(&(want, h)) = fence_of.get(lease)
            && got != want
            && !regranted(want, h)
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
}

/// Lost updates: acknowledged increments the final value does not show.
fn lost_updates(
    ops: &[Op],
    resources: &[(String, u64, u64)],
    fence_of: &HashMap<&str, (u64, &Hold)>,
    report: &mut Report,
) {
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
}

/// Resource operations refused inside a hold, or accepted after it.
fn resource_fenced(ops: &[Op], holds: &[Hold], across_loss: AcrossLoss, report: &mut Report) {
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
