//! Told before, not after (issue 56): **no write with a lease's fencing token is accepted by
//! the fenced resource after its holder was warned and its lease ended.** A warning is an
//! `expiring` its watch told (it stands until a heartbeat or reentry sent after it succeeds)
//! or a `revocation_requested` (it stands for good: the deadline holds). A lease has certainly
//! ended once its watch told `lost`, or by its hold's upper bound (a 410, a release, its TTL
//! from its last renewal's answer). A write sent after both was the holder's to refuse.
//!
//! Also counted: the warnings told, the leases a revocation asked, and of those told
//! `revocation_requested`, how many were let go by their holder's release and how many the
//! server evicted at the deadline (`lost`, reason `revoked`).

use std::collections::HashMap;

use super::{Hold, Report, Violation, slice_of};
use crate::history::{Op, Outcome, Request};

/// What one lease's watch told, and when (µs).
#[derive(Default)]
struct Told {
    expiring: Vec<u64>,
    revocation: Option<u64>,
    lost: Option<(u64, Option<String>)>,
    /// (send, recv) of its successful heartbeats and reentries.
    renewals: Vec<(u64, u64)>,
    /// Send time of its release that let it go.
    released: Option<u64>,
}

impl Told {
    /// The warning that stands at `t`, if any: (when it came, which).
    fn standing(&self, t: u64) -> Option<(u64, &'static str)> {
        if let Some(w) = self.revocation.filter(|&w| w <= t) {
            return Some((w, "revocation_requested"));
        }
        let w = self.expiring.iter().copied().filter(|&w| w <= t).max()?;
        let cleared = self
            .renewals
            .iter()
            .any(|&(send, recv)| send > w && recv <= t);
        (!cleared).then_some((w, "expiring"))
    }
}

pub(super) fn warnings(ops: &[Op], holds: &[Hold], report: &mut Report) {
    let told = told_by_lease(ops, report);
    let hold_of: HashMap<&str, &Hold> = holds.iter().map(|h| (h.lease.as_str(), h)).collect();
    for (i, op) in ops.iter().enumerate() {
        let (
            Request::Resource {
                lease,
                fence,
                write: true,
            },
            Outcome::ResourceOk { .. },
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        let Some(t) = told.get(lease.as_str()) else {
            continue;
        };
        let hold = hold_of.get(lease.as_str());
        let ended = t
            .lost
            .as_ref()
            .map(|l| l.0)
            .into_iter()
            .chain(hold.map(|h| h.ub_end))
            .min()
            .unwrap_or(u64::MAX);
        let Some((warned, which)) = t.standing(op.send) else {
            continue;
        };
        if op.send < ended {
            continue;
        }
        report.written_after_warning += 1;
        report.violations.push(Violation {
            what: "write after a warning and the lease's end",
            detail: format!(
                "{}: lease {lease} (fence {fence}) wrote at {:.6}s, accepted; told {which} at {:.6}s, its lease ended by {:.6}s",
                op.name,
                op.send as f64 / 1e6,
                warned as f64 / 1e6,
                ended as f64 / 1e6
            ),
            slice: slice_of(ops, &hold.into_iter().copied().collect::<Vec<_>>(), &[i]),
        });
    }
}

/// What each watched lease was told, with its renewals and release; counts the warnings and
/// the revocations on the way.
fn told_by_lease<'a>(ops: &'a [Op], report: &mut Report) -> HashMap<&'a str, Told> {
    let mut told: HashMap<&str, Told> = HashMap::new();
    for op in ops {
        match (&op.request, &op.outcome) {
            (Request::Watch { lease }, Outcome::Told { event, reason }) => {
                let t = told.entry(lease).or_default();
                match event.as_str() {
                    "expiring" => {
                        report.warned_expiring += 1;
                        t.expiring.push(op.recv);
                    }
                    "revocation_requested" => {
                        report.warned_revocation += 1;
                        t.revocation.get_or_insert(op.recv);
                    }
                    "lost" if t.lost.is_none() => t.lost = Some((op.recv, reason.clone())),
                    _ => {}
                }
            }
            (Request::Revoke { .. }, Outcome::Revoked { leases }) => {
                report.revocations_asked += leases.len();
            }
            _ => {}
        }
    }
    for op in ops {
        let Some(t) = op.lease().and_then(|l| told.get_mut(l)) else {
            continue;
        };
        match (&op.request, &op.outcome) {
            (Request::Heartbeat { .. }, Outcome::Renewed { .. })
            | (
                Request::Acquire {
                    reentry_of: Some(_),
                    ..
                },
                Outcome::Granted { .. },
            ) => t.renewals.push((op.send, op.recv)),
            (Request::Release { .. }, Outcome::Released { released, count })
                if *released || *count == 0 =>
            {
                t.released.get_or_insert(op.send);
            }
            _ => {}
        }
    }
    for t in told.values() {
        let Some(w) = t.revocation else { continue };
        if t.released.is_some_and(|r| r >= w) {
            report.revocations_honoured += 1;
        } else if t
            .lost
            .as_ref()
            .is_some_and(|(_, r)| r.as_deref() == Some("revoked"))
        {
            report.revocations_enforced += 1;
        }
    }
    told
}

/// One op of a self-check history on `re-0`, answered 1 ms after it was sent.
fn op(seq: usize, client: usize, send: u64, request: Request, outcome: Outcome) -> Op {
    Op {
        seq,
        client,
        instance: 0,
        name: "re-0".to_owned(),
        family: crate::history::Family::Reentrant,
        send,
        recv: send + 1_000,
        request,
        outcome,
        echo: None,
    }
}

/// A new lease of 500 ms.
fn grant(seq: usize, lease: &str, fence: u64, send: u64) -> Op {
    let request = Request::Acquire {
        kind: "reentrant",
        ttl_ms: Some(500),
        wait_ms: 0,
        reentry_of: None,
        idempotency: None,
        gave_up_ms: None,
    };
    let outcome = Outcome::Granted {
        status: 201,
        lease: lease.to_owned(),
        fence,
        ttl_ms: 500,
        count: 1,
        kind: "reentrant".to_owned(),
    };
    op(seq, seq, send, request, outcome)
}

/// An event lease A's watch told.
fn told(seq: usize, send: u64, event: &str, reason: Option<&str>) -> Op {
    let request = Request::Watch { lease: "a".into() };
    let outcome = Outcome::Told {
        event: event.to_owned(),
        reason: reason.map(str::to_owned),
    };
    op(seq, 0, send, request, outcome)
}

/// A write the resource accepted.
fn write(seq: usize, lease: &str, fence: u64, send: u64) -> Op {
    let request = Request::Resource {
        lease: lease.to_owned(),
        fence,
        write: true,
    };
    op(
        seq,
        0,
        send,
        request,
        Outcome::ResourceOk { wrote: Some(1) },
    )
}

/// Lease A (fence 10, TTL 500 ms) granted at 0 ms; at 100 ms the admin asks whoever holds
/// re-0 (A, or nobody: `asked`) to let go within 300 ms; A's watch says so at 102 ms.
fn revoked(asked: bool) -> Vec<Op> {
    let leases = if asked { vec!["a".to_owned()] } else { vec![] };
    let revoke = Request::Revoke {
        semaphore: false,
        grace_ms: 300,
    };
    vec![
        grant(0, "a", 10, 0),
        op(1, 9, 100_000, revoke, Outcome::Revoked { leases }),
        told(2, 102_000, "revocation_requested", Some("harness")),
    ]
}

/// A told `expiring` at 300 ms; renewed by a heartbeat sent at 320 ms, or not and then told
/// `lost` (expired) at 501 ms; it writes at 520 ms. Returns the writes flagged.
fn expiring(renewed: bool) -> usize {
    let mut ops = vec![grant(0, "a", 10, 0), told(1, 300_000, "expiring", None)];
    if renewed {
        let heartbeat = Request::Heartbeat {
            lease: "a".into(),
            ttl_ms: None,
            semaphore: false,
            multi: false,
        };
        let outcome = Outcome::Renewed {
            ttl_ms: 500,
            fence: 10,
        };
        ops.push(op(2, 0, 320_000, heartbeat, outcome));
    } else {
        ops.push(told(2, 501_000, "lost", Some("expired")));
    }
    ops.push(write(3, "a", 10, 520_000));
    super::check(&ops, &[], &[], 1_500).written_after_warning
}

/// Known histories this checker (and the holds' revocation cut) must judge as stated.
pub(super) fn self_checks() -> Vec<(&'static str, bool)> {
    // A ignores the revocation: evicted at the deadline (told at 401 ms), it writes at 450 ms.
    let mut ignored = revoked(true);
    ignored.push(told(3, 401_000, "lost", Some("revoked")));
    ignored.push(write(4, "a", 10, 450_000));
    // A releases at 150 ms; B is granted at 200 ms and writes.
    let mut honoured = revoked(true);
    let release = Request::Release {
        lease: "a".into(),
        all: true,
        mode: None,
        semaphore: false,
        idempotency: None,
    };
    let released = Outcome::Released {
        released: true,
        count: 0,
    };
    honoured.push(op(3, 0, 150_000, release, released));
    honoured.push(grant(4, "b", 11, 200_000));
    honoured.push(write(5, "b", 11, 250_000));
    // Nobody releases; B is granted at 420 ms, after the deadline but inside A's TTL: no
    // overlap when the revocation asked A, one when it asked nobody.
    let evicted = |asked: bool| {
        let mut ops = revoked(asked);
        ops.push(grant(3, "b", 11, 420_000));
        super::check(&ops, &[], &[], 1_500).overlaps
    };
    let ignored = super::check(&ignored, &[], &[], 1_500);
    let honoured = super::check(&honoured, &[], &[], 1_500);
    vec![
        (
            "a holder told revocation_requested that writes after its eviction: flagged",
            ignored.written_after_warning == 1 && ignored.revocations_enforced == 1,
        ),
        (
            "a holder told revocation_requested that releases in the grace: ok, honoured",
            honoured.written_after_warning == 0
                && honoured.revocations_honoured == 1
                && !honoured.failed(),
        ),
        (
            "a grant after a revocation's deadline, inside the revoked lease's TTL: no overlap",
            evicted(true) == 0,
        ),
        (
            "the same when the revocation did not ask that lease: an overlap",
            evicted(false) == 1,
        ),
        (
            "a holder told expiring that writes after its lease expired: flagged",
            expiring(false) == 1,
        ),
        (
            "a holder told expiring, renewed by a heartbeat sent after it, that writes: ok",
            expiring(true) == 0,
        ),
    ]
}
