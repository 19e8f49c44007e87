//! The checkers' self-check (`--self-check`): known histories, each judged as stated.

use super::{FaultWindow, check};
use crate::history::{Echo, Family, Op, Outcome, Request};

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
        echo: None,
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
        loss_throughout: false,
        exempt: true,
        answers_in_time: false,
        refuses_new: false,
        served_from: None,
    };
    let semantic = |windows: &[FaultWindow]| check(&level_gone, windows, &[], 1_500).semantic;
    // Lease A granted with fence 10 (0-1 ms); its heartbeat at 9-10 ms answers fence 12 (A
    // granted again under its id: a crash lost the first grant, which a retried campaign
    // made again from its surviving place in line).
    let fence_changed = |windows: &[FaultWindow]| {
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
    };
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
    // A failover: lease A granted (at 2-3 s) by the old master after the window began,
    // lease B granted by the new master (at 2.2-2.3 s) while A's TTL runs: an overlap,
    // excused only when the window may lose grants throughout (fewer acks than replicas).
    let failover = |loss_throughout: bool| FaultWindow {
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
        op(
            1,
            1,
            2_200_000,
            2_201_000,
            acquire(None),
            Outcome::Granted {
                status: 201,
                lease: lease("b"),
                fence: 11,
                ttl_ms: 500,
                count: 1,
                kind: "reentrant".to_owned(),
            },
        ),
    ];
    let across_failover =
        |w: FaultWindow| check(&split_brain, std::slice::from_ref(&w), &[], 1_500).overlaps;
    // Lease A granted to client 0 on re-0, then re-entered; the reentry's answer names
    // `lock` (and, with `stranger`, another client's holder): a reply meant for another
    // request when it is not re-0's and client 0's.
    let echoed = |lock: &str, stranger: bool| {
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
    };
    // Lease A at 2 levels, then one more reentry answered with 4: it ran twice (a call
    // re-sent after its reply was lost).
    let mut doubled = entered_twice();
    doubled.push(op(
        2,
        0,
        4_000,
        5_000,
        acquire(Some(lease("a"))),
        granted("a", 4, 200),
    ));
    // Lease A (one level) released at 6-10 ms, answered 410 (the release ran, and its re-sent
    // second run found the lease gone); lease B granted at 8-9 ms, after the release was sent.
    let released_lost = vec![
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
        op(
            2,
            1,
            8_000,
            9_000,
            acquire(None),
            Outcome::Granted {
                status: 201,
                lease: lease("b"),
                fence: 11,
                ttl_ms: 500,
                count: 1,
                kind: "reentrant".to_owned(),
            },
        ),
    ];
    // Lease A (one level) renewed at 6-10 ms, answered 410; lease B granted at 8-9 ms, after
    // the heartbeat was sent. A lone lease's heartbeat changes nothing when it finds the lease
    // gone, so A held until the 410 came: an overlap. A multilease's heartbeat (`multi`) that
    // finds another member gone gives A back first (found by the smoke tier, replicas-stalled
    // acks 0: a member force-released, the next heartbeat 410 arriving 14 µs after B's grant).
    let heartbeat_lost = |multi: bool| {
        let mut ops = released_lost.clone();
        ops[1].request = Request::Heartbeat {
            lease: lease("a"),
            ttl_ms: None,
            semaphore: false,
            multi,
        };
        check(&ops, &[], &[], 1_500).overlaps
    };
    // A new lease answered with 2 levels: its grant ran twice.
    let granted_twice = vec![op(0, 0, 0, 1_000, acquire(None), granted("a", 2, 201))];
    let mut judged_histories = super::recovery::self_checks();
    judged_histories.extend(super::elections::self_checks());
    judged_histories.extend(super::warnings::self_checks());
    judged_histories.extend(super::liveness::self_checks());
    judged_histories.extend([
        (
            "a release of the last level answered 410: the hold ended when it was sent, no overlap",
            judged(&released_lost) == 0,
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
        (
            "two grants inside a failover with acks from every replica: an overlap",
            across_failover(failover(false)) == 1,
        ),
        (
            "the same with fewer acks than replicas (the promoted replica may lack A): excused",
            across_failover(failover(true)) == 0,
        ),
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
        (
            "a lease's fence changed between two of its answers: a fence violation",
            fence_changed(&[]) == 1,
        ),
        (
            "the same, higher, across a Redis data loss (its grant made again): excused",
            fence_changed(std::slice::from_ref(&crash)) == 0,
        ),
    ]);
    judged_histories
}
