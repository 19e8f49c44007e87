//! Liveness after a failover: every name is served again (a lease granted or renewed on
//! it) within [`SERVED_WITHIN_US`] of the moment its shard can serve it, the promotion (or,
//! when the instances' acks cannot be met without the failed node, its return). A shard
//! that refuses its names after a failover until someone restarts a node shows here; the
//! other liveness checks allow 503s in a fault window and would not see it.

use std::collections::{BTreeMap, BTreeSet};

use super::{FaultWindow, Report, Violation};
use crate::history::{Family, Op, Outcome, Request};

/// How soon after a promotion every name must be served again.
pub const SERVED_WITHIN_US: u64 = 10_000_000;

pub(super) fn served_again(ops: &[Op], windows: &[FaultWindow], report: &mut Report) {
    let names: BTreeSet<&str> = ops
        .iter()
        .filter(|o| o.instance != usize::MAX)
        .map(|o| o.name.as_str())
        .collect();
    let last = ops.iter().map(|o| o.recv).max().unwrap_or(0);
    for w in windows {
        let Some(from) = w.served_from else {
            continue;
        };
        let until = from + SERVED_WITHIN_US;
        if last < until {
            // The run ended first (the faults hold it open, so only a broken run does).
            report.violations.push(Violation {
                what: "not served again",
                detail: format!(
                    "{}: the history ends {} ms after names had to be served again, before the \
                     {} ms the check needs",
                    w.what,
                    last.saturating_sub(from) / 1000,
                    SERVED_WITHIN_US / 1000
                ),
                slice: Vec::new(),
            });
            continue;
        }
        for name in &names {
            let on_name = || ops.iter().filter(move |o| o.name == *name);
            let served = on_name().any(|o| {
                o.recv >= from
                    && o.recv <= until
                    && matches!(o.outcome, Outcome::Granted { .. } | Outcome::Renewed { .. })
            });
            if served {
                continue;
            }
            // What it was answered meanwhile, to say why.
            let mut answers: BTreeMap<String, usize> = BTreeMap::new();
            let mut slice = Vec::new();
            for o in on_name().filter(|o| o.recv >= from && o.recv <= until) {
                *answers.entry(answer(&o.outcome)).or_default() += 1;
                if slice.len() < 5 {
                    slice.push(o.clone());
                }
            }
            report.not_served_again += 1;
            report.violations.push(Violation {
                what: "not served again",
                detail: format!(
                    "{name}: no lease granted or renewed in the {} ms after {} (from {} ms into \
                     the run); answered {answers:?}",
                    SERVED_WITHIN_US / 1000,
                    w.what,
                    from / 1000
                ),
                slice,
            });
        }
    }
}

/// An outcome in a word or two, for the detail.
fn answer(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed {
            status: Some(s),
            what,
        } => format!("{s} {what}"),
        Outcome::Failed { status: None, what } => what.clone(),
        Outcome::Refused { status, code } | Outcome::Lost { status, code } => {
            format!("{status} {code}")
        }
        other => format!("{other:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

/// Known histories for `--self-check`: a name refused for the whole 10 s after a promotion
/// (and granted only later) is not served again; one granted within them is.
pub(super) fn self_checks() -> Vec<(&'static str, bool)> {
    let op = |seq, name: &str, send: u64, outcome| Op {
        seq,
        client: seq,
        instance: 0,
        name: name.to_owned(),
        family: Family::Reentrant,
        send,
        recv: send + 1_000,
        request: Request::Acquire {
            kind: "reentrant",
            ttl_ms: Some(500),
            wait_ms: 0,
            reentry_of: None,
            idempotency: None,
            gave_up_ms: None,
        },
        outcome,
        echo: None,
    };
    let granted = |lease: &str| Outcome::Granted {
        status: 201,
        lease: lease.to_owned(),
        fence: 10,
        ttl_ms: 500,
        count: 1,
        kind: "reentrant".to_owned(),
    };
    let refused = || Outcome::Failed {
        status: Some(503),
        what: "not_replicated".to_owned(),
    };
    // A failover promoted a replica at 1 s. re-0 is granted at 2 s; re-1 is refused at 3, 6
    // and 9 s and granted at `late` s.
    let history = |late: u64| {
        vec![
            op(0, "re-0", 2_000_000, granted("a")),
            op(1, "re-1", 3_000_000, refused()),
            op(2, "re-1", 6_000_000, refused()),
            op(3, "re-1", 9_000_000, refused()),
            op(4, "re-1", late * 1_000_000, granted("b")),
            op(5, "re-0", 13_000_000, granted("c")),
        ]
    };
    let window = FaultWindow {
        what: "cluster-failover".to_owned(),
        start: 0,
        end: 1_500_000,
        data_loss: false,
        loss_throughout: false,
        exempt: true,
        answers_in_time: false,
        refuses_new: false,
        served_from: Some(1_000_000),
    };
    let judged = |late| {
        let mut report = Report::default();
        served_again(&history(late), std::slice::from_ref(&window), &mut report);
        report.not_served_again
    };
    vec![
        (
            "a name refused for 10 s after a promotion, granted only at 12 s: not served again",
            judged(12) == 1,
        ),
        (
            "the same name granted at 10 s: served again",
            judged(10) == 0,
        ),
    ]
}
