//! The checkers' self-check (`--self-check`): known histories, each judged as stated.

use super::{FaultWindow, check};
use crate::history::{Echo, Family, Op, Outcome, Request};

/// Known histories run through the checkers (`--self-check`): each must be judged as stated,
/// so a checker that stops seeing a violation, or starts seeing one that is not, shows here.
/// Returns (history, passed) pairs.
pub fn self_check() -> Vec<(&'static str, bool)> {
    let mut judged_histories = super::recovery::self_checks();
    judged_histories.extend(super::elections::self_checks());
    judged_histories.extend(super::warnings::self_checks());
    judged_histories.extend(super::liveness::self_checks());
    judged_histories.extend(lost_answers());
    judged_histories.extend(replies_and_reentries());
    judged_histories.extend(failovers_and_failed_releases());
    judged_histories.extend(levels_and_fences());
    judged_histories
}

fn lease(id: &str) -> String {
    id.to_owned()
}

/// An op on reentrant lock `re-0`.
fn op(seq: usize, client: usize, send: u64, recv: u64, request: Request, outcome: Outcome) -> Op {
    Op {
        seq,
        client,
        instance: 0,
        name: "re-0".to_owned(),
        family: Family::Reentrant,
        send,
        recv,
        request,
        outcome,
        echo: None,
    }
}

/// A new lease (`None`) or a reentry of one, for 500 ms.
fn acquire(reentry_of: Option<String>) -> Request {
    Request::Acquire {
        kind: "reentrant",
        ttl_ms: Some(500),
        wait_ms: 0,
        reentry_of,
        idempotency: None,
        gave_up_ms: None,
    }
}

/// Lease `id` granted with fence 10, `count` levels held.
fn granted(id: &str, count: u64, status: u16) -> Outcome {
    Outcome::Granted {
        status,
        lease: id.to_owned(),
        fence: 10,
        ttl_ms: 500,
        count,
        kind: "reentrant".to_owned(),
    }
}

/// Lease B, another client's, granted with fence 11.
fn granted_b() -> Outcome {
    Outcome::Granted {
        status: 201,
        lease: lease("b"),
        fence: 11,
        ttl_ms: 500,
        count: 1,
        kind: "reentrant".to_owned(),
    }
}

/// A release of one level of lease `id`.
fn release(id: &str) -> Request {
    Request::Release {
        lease: lease(id),
        all: false,
        mode: None,
        semaphore: false,
        idempotency: None,
    }
}

fn failed() -> Outcome {
    Outcome::Failed {
        status: Some(503),
        what: "redis_unavailable".to_owned(),
    }
}

fn one_left() -> Outcome {
    Outcome::Released {
        released: false,
        count: 1,
    }
}

/// Lease A granted (at 0-1 ms) and re-entered (at 2-3 ms): 2 levels.
fn entered_twice() -> Vec<Op> {
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
}

/// A crash that lost the last second of Redis's writes, at 5-8 ms.
fn crash() -> FaultWindow {
    FaultWindow {
        what: "redis-crash-aof-everysec".to_owned(),
        start: 5_000,
        end: 8_000,
        data_loss: true,
        loss_throughout: false,
        exempt: true,
        answers_in_time: false,
        refuses_new: false,
        served_from: None,
    }
}

fn judged(ops: &[Op]) -> usize {
    check(ops, &[], &[], 1_500).overlaps
}

/// Lease A (one level) released at 6-10 ms, answered 410 (the release ran, and its re-sent
/// second run found the lease gone); lease B granted at 8-9 ms, after the release was sent.
fn released_lost() -> Vec<Op> {
    vec![
        op(0, 0, 0, 1_000, acquire(None), granted("a", 1, 201)),
        op(
            1,
            0,
            6_000,
            10_000,
            release("a"),
            Outcome::Lost {
                status: 410,
                code: "lease_lost".to_owned(),
            },
        ),
        op(2, 1, 8_000, 9_000, acquire(None), granted_b()),
    ]
}

/// Lease A (one level) renewed at 6-10 ms, answered 410; lease B granted at 8-9 ms, after the
/// heartbeat was sent. A lone lease's heartbeat changes nothing when it finds the lease gone,
/// so A held until the 410 came: an overlap. A multilease's heartbeat (`multi`) that finds
/// another member gone gives A back first (found by the smoke tier, replicas-stalled acks 0: a
/// member force-released, the next heartbeat 410 arriving 14 µs after B's grant).
fn heartbeat_lost(multi: bool) -> usize {
    let mut ops = released_lost();
    ops[1].request = Request::Heartbeat {
        lease: lease("a"),
        ttl_ms: None,
        semaphore: false,
        multi,
    };
    judged(&ops)
}

fn lost_answers() -> Vec<(&'static str, bool)> {
    // A new lease answered with 2 levels: its grant ran twice.
    let granted_twice = vec![op(0, 0, 0, 1_000, acquire(None), granted("a", 2, 201))];
    vec![
        (
            "a release of the last level answered 410: the hold ended when it was sent, no overlap",
            judged(&released_lost()) == 0,
        ),
        (
            "a lone lease's heartbeat answered 410 after another grant: an overlap",
            heartbeat_lost(false) == 1,
        ),
        (
            "a multilease's heartbeat answered 410 gave the member back: no overlap",
            heartbeat_lost(true) == 0,
        ),
        (
            "a new lease granted with two levels: a semantic violation (its grant ran twice)",
            check(&granted_twice, &[], &[], 1_500).semantic == 1,
        ),
    ]
}

/// Lease A granted to client 0 on re-0, then re-entered; the reentry's answer names `lock`
/// (and, with `stranger`, another client's holder): a reply meant for another request when it
/// is not re-0's and client 0's.
fn echoed(lock: &str, stranger: bool) -> usize {
    let mut ops = entered_twice();
    for o in &mut ops {
        o.echo = Some(Echo {
            lock: Some("re-0".to_owned()),
            lease: Some("a".to_owned()),
            holder: Some("c0".to_owned()),
        });
    }
    ops[1].echo = Some(Echo {
        lock: Some(lock.to_owned()),
        lease: Some("a".to_owned()),
        holder: Some(if stranger { "c7" } else { "c0" }.to_owned()),
    });
    check(&ops, &[], &[], 1_500).mismatched_replies
}

fn replies_and_reentries() -> Vec<(&'static str, bool)> {
    // Lease A at 2 levels, then one more reentry answered with 4: it ran twice (a call re-sent
    // after its reply was lost).
    let mut doubled = entered_twice();
    doubled.push(op(
        2,
        0,
        4_000,
        5_000,
        acquire(Some(lease("a"))),
        granted("a", 4, 200),
    ));
    vec![
        (
            "a reply that names another lock than asked: a reply for another request",
            echoed("re-1", false) == 1,
        ),
        (
            "a reply that names another client's holder: a reply for another request",
            echoed("re-0", true) == 1,
        ),
        (
            "replies that name what was asked: none for another request",
            echoed("re-0", false) == 0,
        ),
        (
            "a reentry that added two levels: a semantic violation (it ran twice)",
            check(&doubled, &[], &[], 1_500).semantic == 1,
        ),
    ]
}

/// A failover: lease A granted (at 2-3 s) by the old master after the window began, lease B
/// granted by the new master (at 2.2-2.3 s) while A's TTL runs: an overlap, excused only when
/// the window may lose grants throughout (fewer acks than replicas).
fn across_failover(loss_throughout: bool) -> usize {
    let failover = FaultWindow {
        what: "sentinel-failover".to_owned(),
        start: 1_000_000,
        end: 4_000_000,
        data_loss: loss_throughout,
        loss_throughout,
        exempt: true,
        answers_in_time: false,
        refuses_new: false,
        served_from: None,
    };
    let split_brain = vec![
        op(
            0,
            0,
            2_000_000,
            2_001_000,
            acquire(None),
            granted("a", 1, 201),
        ),
        op(1, 1, 2_200_000, 2_201_000, acquire(None), granted_b()),
    ];
    check(&split_brain, std::slice::from_ref(&failover), &[], 1_500).overlaps
}

/// Lease A: granted, re-entered (2 levels), one level released (1 left), then a release of
/// the last level fails (503: it may have happened), and lease B is granted 100 ms later,
/// within A's TTL. `partial`: whether the one-level release came first.
fn failed_release(partial: bool) -> Vec<Op> {
    let mut ops = entered_twice();
    if partial {
        ops.push(op(2, 0, 4_000, 5_000, release("a"), one_left()));
    }
    let n = ops.len();
    ops.push(op(n, 0, 6_000, 2_006_000, release("a"), failed()));
    ops.push(op(n + 1, 1, 100_000, 101_000, acquire(None), granted_b()));
    ops
}

fn failovers_and_failed_releases() -> Vec<(&'static str, bool)> {
    vec![
        (
            "two grants inside a failover with acks from every replica: an overlap",
            across_failover(false) == 1,
        ),
        (
            "the same with fewer acks than replicas (the promoted replica may lack A): excused",
            across_failover(true) == 0,
        ),
        (
            "a failed release of a lease's last level may have ended it: no overlap",
            judged(&failed_release(true)) == 0,
        ),
        (
            "a failed release of one of two levels leaves the lease held: an overlap",
            judged(&failed_release(false)) == 1,
        ),
    ]
}

/// Lease A re-entered (2 levels), then a release of one level that let the lock go: what
/// Redis answers when it lost the re-entry (a crash that cut its last second of writes).
fn level_gone(windows: &[FaultWindow]) -> usize {
    let mut ops = entered_twice();
    ops.push(op(
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
    check(&ops, windows, &[], 1_500).semantic
}

/// Lease A granted with fence 10 (0-1 ms); its heartbeat at 9-10 ms answers fence 12 (A
/// granted again under its id: a crash lost the first grant, which a retried campaign made
/// again from its surviving place in line).
fn fence_changed(windows: &[FaultWindow]) -> usize {
    let beat = op(
        1,
        0,
        9_000,
        10_000,
        Request::Heartbeat {
            lease: lease("a"),
            ttl_ms: None,
            semaphore: false,
            multi: false,
        },
        Outcome::Renewed {
            ttl_ms: 500,
            fence: 12,
        },
    );
    let history = vec![
        op(0, 0, 0, 1_000, acquire(None), granted("a", 1, 201)),
        beat,
    ];
    check(&history, windows, &[], 1_500).fence_regressions
}

/// Lease A re-entered (2 levels), one level released with an Idempotency-Key (at 4-5 ms,
/// renewing A for its 500 ms), the release retried with the same key at 300-301 ms (the first
/// answer again: no renewal), and lease B granted at 600-601 ms, after A's TTL. Found by the
/// full tier (seed 1, subscriber-drop), which counted the retry as a renewal.
fn replayed_release() -> Vec<Op> {
    let keyed_release = || Request::Release {
        lease: lease("a"),
        all: false,
        mode: None,
        semaphore: false,
        idempotency: Some("k".to_owned()),
    };
    let mut ops = entered_twice();
    ops.push(op(2, 0, 4_000, 5_000, keyed_release(), one_left()));
    ops.push(op(3, 0, 300_000, 301_000, keyed_release(), one_left()));
    ops.push(op(4, 1, 600_000, 601_000, acquire(None), granted_b()));
    ops
}

fn levels_and_fences() -> Vec<(&'static str, bool)> {
    vec![
        (
            "a release of one of two levels that let the lock go: a semantic violation",
            level_gone(&[]) == 1,
        ),
        (
            "the same across a Redis data loss (the re-entry may be what Redis lost): excused",
            level_gone(&[crash()]) == 0,
        ),
        (
            "a release retried with its Idempotency-Key renews nothing: no overlap after the TTL",
            judged(&replayed_release()) == 0,
        ),
        (
            "a lease's fence changed between two of its answers: a fence violation",
            fence_changed(&[]) == 1,
        ),
        (
            "the same, higher, across a Redis data loss (its grant made again): excused",
            fence_changed(&[crash()]) == 0,
        ),
    ]
}
