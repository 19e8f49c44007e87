//! What elections promise beyond what their leases show (two leaders at once is an overlap,
//! a term that does not grow is a fence regression; see `exclusion.rs` and `fencing.rs`):
//!
//! - **Every observer sees every term, in order.** Each observer stream (resumed with
//!   `Last-Event-ID` after each drop) is told terms that never go back, and every term a
//!   candidate was granted between the first and the last term a stream was told of is among
//!   those it was told: a stream that skips one, or a resumed stream that does not fill its
//!   gap, shows here. A `resync` (the server saying terms may be missing) counts as a skip
//!   unless Redis lost data (the terms log with it) or a failover was under way (a master
//!   being cut off may have shown a term it could not replicate); after one, the stream's
//!   order starts again.
//! - **No candidate is granted after it left.** Once a candidate left the line, resigned or
//!   was told it is out (410), no answer grants it the lead.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Report, Violation};
use crate::history::{Family, Op, Outcome, Request};

/// Per name: the terms candidates were granted, with the op that first granted each.
fn granted_terms(ops: &[Op]) -> HashMap<&str, BTreeMap<u64, usize>> {
    let mut terms: HashMap<&str, BTreeMap<u64, usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if op.family != Family::Election {
            continue;
        }
        if let (Request::Acquire { .. } | Request::Poll { .. }, Outcome::Granted { fence, .. }) =
            (&op.request, &op.outcome)
        {
            terms
                .entry(op.name.as_str())
                .or_default()
                .entry(*fence)
                .or_insert(i);
        }
    }
    terms
}

pub(super) fn elections(
    ops: &[Op],
    data_loss: &dyn Fn(u64, u64) -> bool,
    after_failover: &dyn Fn(u64) -> bool,
    report: &mut Report,
) {
    let resync_excused = |at: u64| data_loss(0, at) || after_failover(at);
    observers(ops, data_loss, &resync_excused, report);
    granted_after_leaving(ops, report);
}

/// One stretch of one observer stream, in the order it was told.
#[derive(Default)]
struct Stretch {
    events: Vec<usize>,
    told: BTreeSet<u64>,
}

fn observers(
    ops: &[Op],
    data_loss: &dyn Fn(u64, u64) -> bool,
    resync_excused: &dyn Fn(u64) -> bool,
    report: &mut Report,
) {
    let granted = granted_terms(ops);
    report.election_terms = granted.values().map(BTreeMap::len).sum();
    // (name, observer, stream) -> stretches split by resyncs.
    let mut streams: BTreeMap<(&str, usize, u64), Vec<Stretch>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let (
            Request::Observe {
                observer, stream, ..
            },
            Outcome::Seen { event, term, .. },
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        report.observed_events += 1;
        let stretches = streams
            .entry((op.name.as_str(), *observer, *stream))
            .or_insert_with(|| vec![Stretch::default()]);
        if event == "resync" {
            report.observer_resyncs += 1;
            if !resync_excused(op.recv) {
                report.observer_skips += 1;
                report.violations.push(Violation {
                    what: "observer told to resync",
                    detail: format!(
                        "{}: observer {observer} was told terms may be missing, with no Redis \
                         data loss to explain it",
                        op.name
                    ),
                    slice: stream_slice(ops, stretches, i),
                });
            }
            stretches.push(Stretch::default());
            continue;
        }
        let highest = stretches.last().and_then(|s| s.told.last().copied());
        if let Some(highest) = highest
            && *term < highest
            && !data_loss(0, op.recv)
        {
            report.observer_disorder += 1;
            report.violations.push(Violation {
                what: "observer told terms out of order",
                detail: format!(
                    "{}: observer {observer} was told term {term} ({event}) after term {highest}",
                    op.name
                ),
                slice: stream_slice(ops, stretches, i),
            });
        }
        let Some(current) = stretches.last_mut() else {
            continue;
        };
        current.events.push(i);
        // A leader's term, or a vacancy after term T (T was told, or is where it started;
        // 0: the election had no term yet, so every term after must be told).
        current.told.insert(*term);
    }
    for ((name, observer, _), stretches) in &streams {
        let Some(terms) = granted.get(name) else {
            continue;
        };
        for stretch in stretches {
            let (Some(&lo), Some(&hi)) = (stretch.told.first(), stretch.told.last()) else {
                continue;
            };
            if hi <= lo + 1 {
                continue;
            }
            let Some(&last) = stretch.events.last() else {
                continue;
            };
            for (&term, &grant) in terms.range(lo + 1..hi) {
                if stretch.told.contains(&term) || data_loss(ops[grant].send, ops[last].recv) {
                    continue;
                }
                report.observer_skips += 1;
                let mut slice = vec![ops[grant].clone()];
                slice.extend(stretch.events.iter().map(|&e| ops[e].clone()));
                report.violations.push(Violation {
                    what: "observer skipped a term",
                    detail: format!(
                        "{name}: observer {observer} was told terms {lo}..{hi} but not term \
                         {term}, granted to {}",
                        ops[grant].lease().unwrap_or("?")
                    ),
                    slice,
                });
            }
        }
    }
}

fn stream_slice(ops: &[Op], stretches: &[Stretch], at: usize) -> Vec<Op> {
    let mut slice: Vec<Op> = stretches
        .iter()
        .flat_map(|s| s.events.iter().map(|&e| ops[e].clone()))
        .collect();
    slice.push(ops[at].clone());
    slice
}

/// A candidate granted the lead by an answer sent after it had left the line, resigned, or
/// been told it was out.
fn granted_after_leaving(ops: &[Op], report: &mut Report) {
    let mut left_at: HashMap<&str, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if op.family != Family::Election {
            continue;
        }
        let Some(id) = op.lease() else { continue };
        let gone = matches!(
            (&op.request, &op.outcome),
            (Request::Leave { .. }, Outcome::Left)
                | (Request::Release { .. }, Outcome::Released { .. })
                | (
                    Request::Poll { .. } | Request::Heartbeat { .. },
                    Outcome::Lost { .. }
                )
        );
        if gone {
            left_at.entry(id).or_insert(i);
            continue;
        }
        if let Outcome::Granted { fence, .. } = &op.outcome
            && let Some(&l) = left_at.get(id)
            && op.send > ops[l].recv
        {
            report.granted_after_leaving += 1;
            report.violations.push(Violation {
                what: "candidate granted after it left",
                detail: format!(
                    "{}: candidate {id} was granted term {fence} after it was out",
                    op.name
                ),
                slice: vec![ops[l].clone(), op.clone()],
            });
        }
    }
}

/// Known election histories (see `self_check.rs`): term 2 granted between terms 1 and 3;
/// observer streams told 1, 2, 3 (none), 1, 3 (a skip), 1, 3 after a resumed gap filled
/// (none), 3 then 2 (out of order); a candidate granted after it left (one).
pub fn self_checks() -> Vec<(&'static str, bool)> {
    vec![
        (
            "an observer told terms 1, 2, 3: none skipped, none out of order",
            observed(&[(1, None), (2, None), (3, None)])
                .violations
                .is_empty(),
        ),
        (
            "an observer told terms 1 and 3, term 2 granted between: a skipped term",
            observed(&[(1, None), (3, None)]).observer_skips == 1,
        ),
        (
            "a resumed observer whose gap was filled (1, then 2 and 3 after resuming): none",
            observed(&[(1, None), (2, Some("1-0")), (3, Some("1-0"))])
                .violations
                .is_empty(),
        ),
        (
            "an observer told term 3, then term 2: out of order",
            observed(&[(3, None), (2, None)]).observer_disorder == 1,
        ),
        (
            "a candidate granted after it left the line: granted after leaving",
            left_then_granted().granted_after_leaving == 1,
        ),
    ]
}

/// An op on election `el-0`, answered 1 ms after it was sent.
fn op(seq: usize, client: usize, send: u64, request: Request, outcome: Outcome) -> Op {
    Op {
        seq,
        client,
        instance: 0,
        name: "el-0".to_owned(),
        family: Family::Election,
        send,
        recv: send + 1_000,
        request,
        outcome,
        echo: None,
    }
}

fn campaign() -> Request {
    Request::Acquire {
        kind: "election",
        ttl_ms: Some(500),
        wait_ms: 0,
        reentry_of: None,
        idempotency: None,
        gave_up_ms: None,
    }
}

fn granted(id: &str, term: u64) -> Outcome {
    Outcome::Granted {
        status: 201,
        lease: id.to_owned(),
        fence: term,
        ttl_ms: 500,
        count: 1,
        kind: "election".to_owned(),
    }
}

/// Terms 1, 2 and 3 granted a second apart, then an observer stream told `told` (term, and
/// the `Last-Event-ID` it was resumed from).
fn observed(told: &[(u64, Option<&str>)]) -> Report {
    let mut ops = vec![
        op(0, 0, 0, campaign(), granted("a", 1)),
        op(1, 1, 1_000_000, campaign(), granted("b", 2)),
        op(2, 2, 2_000_000, campaign(), granted("c", 3)),
    ];
    for (k, &(term, resumed)) in told.iter().enumerate() {
        let seq = ops.len();
        ops.push(op(
            seq,
            10_000,
            2_500_000 + k as u64 * 1_000,
            Request::Observe {
                observer: 0,
                stream: 1,
                resumed_from: resumed.map(str::to_owned),
            },
            Outcome::Seen {
                event: "leader".to_owned(),
                id: Some(format!("{term}-0")),
                term,
                value: None,
            },
        ));
    }
    let mut report = Report::default();
    elections(&ops, &|_, _| false, &|_| false, &mut report);
    report
}

/// A candidate queued, then left the line, then granted by a poll.
fn left_then_granted() -> Report {
    let ticket = || "d".to_owned();
    let ops = vec![
        op(0, 0, 0, campaign(), Outcome::Queued { ticket: ticket() }),
        op(
            1,
            0,
            10_000,
            Request::Leave { ticket: ticket() },
            Outcome::Left,
        ),
        op(
            2,
            0,
            20_000,
            Request::Poll {
                ticket: ticket(),
                wait_ms: 0,
            },
            granted("d", 4),
        ),
    ];
    let mut report = Report::default();
    elections(&ops, &|_, _| false, &|_| false, &mut report);
    report
}
