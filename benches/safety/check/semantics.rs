//! What the API promises beyond the three properties: replays, `all=true`, levels kept.

use std::collections::HashMap;

use super::{Report, Violation};
use crate::history::{Family, Op, Outcome, Request};

/// What the API promises beyond the three properties: replays answer the first answer,
/// `all=true` releases everything, a reentry adds one level and a release takes one (a call
/// that ran twice adds or takes two), and releasing one level of a reentrant or fair lease held
/// several levels deep keeps the rest (its holder goes on working under them). Not across a
/// Redis data loss (`across_loss`, as for overlaps): what Redis lost (a re-entry, the first
/// answer's idempotency record) is gone, as the book's safety page says of a Redis that loses writes.
pub(super) fn semantics(ops: &[Op], across_loss: AcrossLoss, report: &mut Report) {
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
                all_left_levels(ops, op, report);
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
        if !same_answer(ops, prev, op) {
            flag(
                report,
                "a retry did not get the first answer",
                format!("{}: Idempotency-Key {key}", op.name),
                vec![(*prev).clone(), op.clone()],
            );
        }
    }
}

/// A loss of Redis data between two spans (send, recv) excuses what it explains.
type AcrossLoss<'a> = &'a dyn Fn((u64, u64), (u64, u64)) -> bool;

fn flag(report: &mut Report, what: &'static str, detail: String, slice: Vec<Op>) {
    report.semantic += 1;
    report.violations.push(Violation {
        what,
        detail,
        slice,
    });
}

/// Every op of the lease, for a violation's slice.
fn lease_slice(ops: &[Op], lease: Option<&str>) -> Vec<Op> {
    ops.iter().filter(|o| o.lease() == lease).cloned().collect()
}

/// A lock's release with `all=true` that left levels.
fn all_left_levels(ops: &[Op], op: &Op, report: &mut Report) {
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
        flag(
            report,
            "all=true left levels",
            format!("{}: a release with all=true left {count} levels", op.name),
            lease_slice(ops, op.lease()),
        );
    }
}

/// Whether a retry with the key of `prev` answered as the first did (or as honestly as the
/// lease's standing now allows).
fn same_answer(ops: &[Op], prev: &Op, op: &Op) -> bool {
    match (&prev.outcome, &op.outcome) {
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
        // A lease granted (or re-entered) first may have run out before the retry came, or an
        // operator may have force-released (or revoked) its lock in between: a replay answers
        // for the lease as it is now, so "lost" is its honest answer then (a replayed grant
        // would tell the client it holds a lock it does not).
        (Outcome::Granted { ttl_ms, .. }, Outcome::Lost { .. }) => {
            op.recv >= prev.send + ttl_ms * 1_000
                || ops.iter().any(|f| {
                    f.name == op.name
                        && matches!(
                            f.request,
                            Request::ForceRelease { .. } | Request::Revoke { .. }
                        )
                        && f.send < op.recv
                        && f.recv > prev.send
                })
        }
        // A campaign asked again answers the candidate's standing now: it may have come to
        // lead since, or be out (never a second candidate: see `replies`).
        (
            Outcome::Queued { ticket },
            Outcome::Granted { lease, .. } | Outcome::Queued { ticket: lease },
        ) if op.family == Family::Election => ticket == lease,
        (Outcome::Queued { .. }, Outcome::Lost { .. }) if op.family == Family::Election => true,
        // A failed first try may have happened or not; anything goes for the retry.
        (Outcome::Failed { .. }, _) | (_, Outcome::Failed { .. }) => true,
        // A refusal changed nothing and is not kept: the retry runs again, as of now.
        (Outcome::Refused { .. } | Outcome::Lost { .. }, _) => true,
        (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

/// Lease -> its levels, and when the op that told them was sent and answered.
type Levels<'a> = HashMap<&'a str, (u64, (u64, u64))>;

/// A release of one level answered "released" (the lock let go) while the lease was known to
/// hold more levels. Levels are known from the answers (a grant's count, a partial release's
/// count left); an answer that did not come (a failure) makes them unknown until the next, and
/// so does a data loss between the answer that told them and the release.
fn levels_kept(ops: &[Op], across_loss: AcrossLoss, report: &mut Report) {
    let mut levels: Levels = HashMap::new();
    for op in ops {
        if !matches!(op.family, Family::Reentrant | Family::Fair) {
            continue;
        }
        let Some(lease) = op.lease() else { continue };
        match (&op.request, &op.outcome) {
            (request, Outcome::Granted { count, .. }) => {
                granted_levels(ops, op, request, *count, &mut levels, across_loss, report);
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
            ) => released_level(
                ops,
                op,
                (*released, *count),
                &mut levels,
                across_loss,
                report,
            ),
            _ => {}
        }
    }
}

/// A grant of `count` levels: one reentry adds one level (a replay answers the first count
/// again), a new lease holds one; more means it ran twice, as a call re-sent after its reply
/// was lost would.
fn granted_levels(
    ops: &[Op],
    op: &Op,
    request: &Request,
    count: u64,
    levels: &mut Levels,
    across_loss: AcrossLoss,
    report: &mut Report,
) {
    let Some(lease) = op.lease() else { return };
    let reentry = matches!(
        request,
        Request::Acquire {
            reentry_of: Some(_),
            ..
        }
    );
    if reentry
        && let Some(&(before, told)) = levels.get(lease)
        && !across_loss(told, (op.send, op.recv))
        && count > before + 1
    {
        flag(
            report,
            "a reentry counted twice",
            format!(
                "{}: lease {lease} held {before} levels; one reentry made it {count}",
                op.name
            ),
            lease_slice(ops, Some(lease)),
        );
    }
    let new_lease = matches!(
        request,
        Request::Acquire {
            reentry_of: None,
            ..
        }
    );
    if new_lease && count > 1 {
        flag(
            report,
            "a grant counted twice",
            format!("{}: new lease {lease} granted with {count} levels", op.name),
            vec![op.clone()],
        );
    }
}

/// A release of one level answered (`released`, `count` left).
fn released_level<'a>(
    ops: &[Op],
    op: &'a Op,
    (released, count): (bool, u64),
    levels: &mut Levels<'a>,
    across_loss: AcrossLoss,
    report: &mut Report,
) {
    let Some(lease) = op.lease() else { return };
    let before = levels
        .remove(lease)
        .filter(|&(_, told)| !across_loss(told, (op.send, op.recv)))
        .map(|(n, _)| n);
    if !released && before.is_some_and(|n| count + 1 < n) {
        flag(
            report,
            "a release counted twice",
            format!(
                "{}: lease {lease} held {} levels; releasing one left {count}",
                op.name,
                before.unwrap_or_default()
            ),
            lease_slice(ops, Some(lease)),
        );
    }
    if released && before.is_some_and(|n| n >= 2) {
        flag(
            report,
            "one level released let the lock go",
            format!(
                "{}: lease {lease} held {} levels; releasing one freed the lock",
                op.name,
                before.unwrap_or_default()
            ),
            lease_slice(ops, Some(lease)),
        );
    } else if !released {
        levels.insert(lease, (count, (op.send, op.recv)));
    }
}
