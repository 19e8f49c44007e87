//! Heartbeats, a ticket left, an admin's force release, evictions, a semaphore's new limit, the
//! sweeper and the lock-delay calls, each run twice.

use super::*;

#[tokio::test]
async fn a_heartbeat_run_twice_is_harmless() {
    // Not made exact: a heartbeat run again extends the lease once more, from a little later,
    // and records one more `renewed` entry; the lease, its levels and its fence stay.
    let lab = Lab::start().await;
    let token = granted_lease(&lab, "beat", LeaseKind::Reentrant).await;
    let cmd = Lab::fcall(
        "beat",
        &Renew {
            lease: token.lease_id(),
            token: &token,
            ttl: None,
        },
    );
    let first = lab.send(&cmd).await;
    let second = lab.send(&cmd).await;
    let renewed = |raw: &str| match crate::locks::scripts::parse::<RenewReply>(raw) {
        Ok(RenewReply::Renewed {
            reentry_count,
            ttl_ms,
            fencing_token,
            ..
        }) => (reentry_count, ttl_ms, fencing_token),
        other => panic!("not renewed: {other:?}"),
    };
    assert_eq!(renewed(&first), renewed(&second));
    assert_eq!(renewed(&second).0, 1);
    let permitted = LeaseToken::generate();
    let asked_for = permits(2, 1);
    lab.send(&Lab::fcall(
        "beat-permits",
        &SemaphoreAcquire {
            request: &asked_for,
            id: permitted.lease_id(),
            token: &permitted,
            nonce: &request_nonce(),
        },
    ))
    .await;
    let cmd = Lab::fcall(
        "beat-permits",
        &SemaphoreRenew(Renew {
            lease: permitted.lease_id(),
            token: &permitted,
            ttl: None,
        }),
    );
    let first = lab.send(&cmd).await;
    let second = lab.send(&cmd).await;
    assert_eq!(renewed(&first), renewed(&second));
    let free: String = lab.query(redis::cmd("GET").arg("beat-permits")).await;
    assert_eq!(free, "1");
}

#[tokio::test]
async fn a_ticket_left_twice_answers_left_both_times() {
    let lab = Lab::start().await;
    granted_lease(&lab, "queue", LeaseKind::Fair).await;
    let ticket = LeaseToken::generate();
    let queued = lab
        .send(&acquire(
            "queue",
            Op::New,
            &request(LeaseKind::Fair),
            &ticket,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(queued.contains(r#""status":"queued""#), "{queued}");
    let nonce = request_nonce();
    let cmd = Lab::fcall(
        "queue",
        &Leave {
            ticket: ticket.lease_id(),
            token: &ticket,
            nonce: &nonce,
        },
    );
    let (first, second) = twice(&lab, &cmd).await;
    assert!(first.starts_with(r#"{"status":"left""#), "{first}");
    assert_eq!(first, second);
}

/// Two admin replies that say the same (holders may be listed with their members in another
/// order).
fn assert_same_json(first: &str, second: &str) {
    let one: serde_json::Value = serde_json::from_str(first).expect("JSON");
    let two: serde_json::Value = serde_json::from_str(second).expect("JSON");
    assert_eq!(one, two, "\nfirst:  {first}\nsecond: {second}");
}

#[tokio::test]
async fn a_force_release_run_again_removes_nobody_who_came_after() {
    let lab = Lab::start().await;
    for kind in [LeaseKind::Reentrant, LeaseKind::Read] {
        let name = format!("stuck-{}", kind.as_str());
        granted_lease(&lab, &name, kind).await;
        if kind == LeaseKind::Read {
            granted_lease(&lab, &name, kind).await;
        }
        let nonce = request_nonce();
        let cmd = Lab::fcall(
            &name,
            &ForceRelease {
                by: "ops",
                reason: "stuck",
                clear: false,
                nonce: &nonce,
            },
        );
        let first = lab.send(&cmd).await;
        assert!(
            first.starts_with(r#"{"status":"force_released""#),
            "{first}"
        );
        let next = granted_lease(&lab, &name, kind).await;
        let before = snapshot(&lab).await;
        let second = lab.send(&cmd).await;
        assert_state_eq(&before, &snapshot(&lab).await, &first, &second);
        assert_same_json(&first, &second);
        assert!(
            hget(&lab, &name, &format!("{}:1", next.lease_id()))
                .await
                .is_some()
        );
    }
    // Run again right away, too.
    granted_lease(&lab, "stuck-again", LeaseKind::Reentrant).await;
    let nonce = request_nonce();
    let cmd = Lab::fcall(
        "stuck-again",
        &ForceRelease {
            by: "ops",
            reason: "",
            clear: false,
            nonce: &nonce,
        },
    );
    let (first, second) = twice(&lab, &cmd).await;
    assert_same_json(&first, &second);
}

#[tokio::test]
async fn an_eviction_at_a_revocations_deadline_waits_for_it_by_redis_clock() {
    let lab = Lab::start().await;
    let lease = granted_lease(&lab, "revoked", LeaseKind::Reentrant).await;
    let (secs, micros): (u64, u64) = lab.query(&mut redis::cmd("TIME")).await;
    let now_ms = secs * 1000 + micros / 1000;
    let evict = |not_before: u64| {
        Lab::fcall(
            "revoked",
            &Evict {
                lease: lease.lease_id(),
                resource: Resource::Lock,
                by: "ops",
                reason: "revoked",
                nonce: "",
                not_before: Some(crate::locks::Timestamp(not_before)),
            },
        )
    };
    // An instance whose estimate of Redis's clock runs ahead wakes before the deadline:
    // nothing is removed, and Redis says how long is left.
    let early = lab.send(&evict(now_ms + 60_000)).await;
    assert!(
        early.starts_with(r#"{"status":"too_early","wait_ms":"#),
        "{early}"
    );
    let left: serde_json::Value = serde_json::from_str(&early).expect("JSON");
    assert!(left["wait_ms"].as_u64() > Some(59_000), "{early}");
    let field = format!("{}:1", lease.lease_id());
    assert_eq!(hget(&lab, "revoked", &field).await.as_deref(), Some("1"));
    // At (or after) the deadline it is evicted.
    let done = lab.send(&evict(now_ms)).await;
    assert!(done.starts_with(r#"{"status":"force_released""#), "{done}");
    assert_eq!(hget(&lab, "revoked", &field).await, None);
}

#[tokio::test]
async fn an_eviction_run_twice_answers_as_it_did() {
    let lab = Lab::start().await;
    let stays = granted_lease(&lab, "readers", LeaseKind::Read).await;
    let evicted = granted_lease(&lab, "readers", LeaseKind::Read).await;
    let permitted = LeaseToken::generate();
    let asked_for = permits(4, 2);
    lab.send(&Lab::fcall(
        "slots",
        &SemaphoreAcquire {
            request: &asked_for,
            id: permitted.lease_id(),
            token: &permitted,
            nonce: &request_nonce(),
        },
    ))
    .await;
    for (name, lease, resource) in [
        ("readers", &evicted, Resource::Lock),
        ("slots", &permitted, Resource::Semaphore),
    ] {
        let nonce = request_nonce();
        let cmd = Lab::fcall(
            name,
            &Evict {
                lease: lease.lease_id(),
                resource,
                by: "ops",
                reason: "dead",
                nonce: &nonce,
                not_before: None,
            },
        );
        let (first, second) = twice(&lab, &cmd).await;
        assert!(
            first.starts_with(r#"{"status":"force_released""#),
            "{first}"
        );
        assert_same_json(&first, &second);
    }
    let held = hget(&lab, "readers", &format!("{}:1", stays.lease_id())).await;
    assert_eq!(held.as_deref(), Some("1"));
    let free: String = lab.query(redis::cmd("GET").arg("slots")).await;
    assert_eq!(free, "4");
}

#[tokio::test]
async fn a_semaphores_force_release_and_new_limit_run_twice_answer_as_they_did() {
    let lab = Lab::start().await;
    let asked_for = permits(4, 3);
    let token = LeaseToken::generate();
    lab.send(&Lab::fcall(
        "farm",
        &SemaphoreAcquire {
            request: &asked_for,
            id: token.lease_id(),
            token: &token,
            nonce: &request_nonce(),
        },
    ))
    .await;
    let nonce = request_nonce();
    let cmd = Lab::fcall(
        "farm",
        &SemaphoreLimit {
            limit: 6,
            by: "ops",
            nonce: &nonce,
        },
    );
    let (first, second) = twice(&lab, &cmd).await;
    assert_same_json(&first, &second);
    assert!(first.contains(r#""previous":4"#), "{first}");
    let nonce = request_nonce();
    for clear in [false, true] {
        let cmd = Lab::fcall(
            "farm",
            &SemaphoreForceRelease(ForceRelease {
                by: "ops",
                reason: "",
                clear,
                nonce: &nonce,
            }),
        );
        let (first, second) = twice(&lab, &cmd).await;
        assert!(
            first.starts_with(r#"{"status":"force_released""#),
            "{first}"
        );
        assert_same_json(&first, &second);
        if !clear {
            let free: String = lab.query(redis::cmd("GET").arg("farm")).await;
            assert_eq!(free, "6");
        }
    }
}

#[tokio::test]
async fn a_sweep_run_twice_records_each_expiry_once() {
    let lab = Lab::start().await;
    granted_lease(&lab, "lapsed", LeaseKind::Reentrant).await;
    // The lock's hash goes, as when its TTL runs out with nobody looking.
    lab.query::<()>(redis::cmd("DEL").arg("lapsed")).await;
    let (first, second) = twice(&lab, &Lab::fcall("lapsed", &Sweep)).await;
    assert!(first.contains(r#""expired":1"#), "{first}");
    assert!(second.contains(r#""expired":0"#), "{second}");
}

/// A lease with a lock-delay: its grant (every kind), the refusal while the name is in its
/// delay, a force release and an eviction that start it, and a release that ends it, each run
/// twice, change what one run does.
#[tokio::test]
async fn lock_delay_calls_run_twice_change_what_one_run_does() {
    let lab = Lab::start().await;
    let delayed = |kind| AcquireRequest {
        lock_delay: LockDelay::parse(5_000, 60_000).expect("within the cap"),
        ..request(kind)
    };
    for kind in [
        LeaseKind::Reentrant,
        LeaseKind::Exclusive,
        LeaseKind::Fair,
        LeaseKind::Read,
        LeaseKind::Write,
    ] {
        let name = format!("delayed-{}", kind.as_str());
        let token = LeaseToken::generate();
        let cmd = acquire(&name, Op::New, &delayed(kind), &token, &request_nonce(), 0);
        let (first, second) = twice(&lab, &cmd).await;
        assert_same_grant(&first, &second);
        let delay: Option<String> = lab
            .query(redis::cmd("GET").arg(format!("{{{name}}}:leasehold:delay")))
            .await;
        assert_eq!(delay.as_deref(), Some("5000"), "{name}");

        // Taken away by an admin: the delay runs from now, and refuses the next lease.
        let nonce = request_nonce();
        let evict = Lab::fcall(
            &name,
            &Evict {
                lease: token.lease_id(),
                resource: Resource::Lock,
                by: "ops",
                reason: "",
                nonce: &nonce,
                not_before: None,
            },
        );
        let (first, second) = twice(&lab, &evict).await;
        assert_same_json(&first, &second);
        let next = LeaseToken::generate();
        let cmd = acquire(&name, Op::New, &request(kind), &next, &request_nonce(), 0);
        let (first, second) = twice(&lab, &cmd).await;
        // (A fair request takes its place in the queue through the delay.)
        let refusal = if kind == LeaseKind::Fair {
            r#""status":"queued""#
        } else {
            r#""delayed":true"#
        };
        assert!(first.contains(refusal), "{first}");
        assert!(second.contains(refusal), "{second}");
    }

    // A force release starts it too; a release ends it.
    let held = LeaseToken::generate();
    let grant = acquire(
        "forced",
        Op::New,
        &delayed(LeaseKind::Reentrant),
        &held,
        &request_nonce(),
        0,
    );
    lab.send(&grant).await;
    let nonce = request_nonce();
    let force = Lab::fcall(
        "forced",
        &ForceRelease {
            by: "ops",
            reason: "",
            clear: false,
            nonce: &nonce,
        },
    );
    let (first, second) = twice(&lab, &force).await;
    assert_same_json(&first, &second);
    let released = LeaseToken::generate();
    let grant = acquire(
        "released",
        Op::New,
        &delayed(LeaseKind::Write),
        &released,
        &request_nonce(),
        0,
    );
    lab.send(&grant).await;
    let nonce = request_nonce();
    twice(
        &lab,
        &release("released", &released, asked(false, None, &nonce)),
    )
    .await;
    let exists: bool = lab
        .query(redis::cmd("EXISTS").arg("{released}:leasehold:delay"))
        .await;
    assert!(!exists, "a release ends the delay");
}
