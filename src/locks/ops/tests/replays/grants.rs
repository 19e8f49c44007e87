//! A grant run twice: a new lease, a grant after a wait, a reader, a fair ticket queued or
//! granted, a reentry, an Idempotency-Key's grant, permits.

use super::*;

#[tokio::test]
async fn a_new_lease_on_a_free_lock_run_twice_is_the_same_grant() {
    let lab = Lab::start().await;
    for kind in [
        LeaseKind::Reentrant,
        LeaseKind::Exclusive,
        LeaseKind::Fair,
        LeaseKind::Read,
        LeaseKind::Write,
    ] {
        let name = format!("free-{}", kind.as_str());
        let token = LeaseToken::generate();
        let cmd = acquire(&name, Op::New, &request(kind), &token, &request_nonce(), 0);
        let (first, second) = twice(&lab, &cmd).await;
        assert_same_grant(&first, &second);
    }
}

#[tokio::test]
async fn a_grant_after_a_wait_run_twice_is_the_same_grant() {
    // (A request that waited takes the general path: its wait goes into the history.)
    let lab = Lab::start().await;
    for kind in [LeaseKind::Reentrant, LeaseKind::Fair, LeaseKind::Write] {
        let name = format!("waited-{}", kind.as_str());
        let token = LeaseToken::generate();
        let cmd = acquire(&name, Op::New, &request(kind), &token, &request_nonce(), 1);
        let (first, second) = twice(&lab, &cmd).await;
        assert_same_grant(&first, &second);
    }
}

#[tokio::test]
async fn a_reader_joining_readers_run_twice_holds_one_level() {
    let lab = Lab::start().await;
    granted_lease(&lab, "shared", LeaseKind::Read).await;
    let token = LeaseToken::generate();
    let cmd = acquire(
        "shared",
        Op::New,
        &request(LeaseKind::Read),
        &token,
        &request_nonce(),
        0,
    );
    let (first, second) = twice(&lab, &cmd).await;
    assert_same_grant(&first, &second);
    let count = hget(&lab, "shared", &format!("{}:1", token.lease_id())).await;
    assert_eq!(count.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_fair_ticket_queued_twice_is_one_place_in_the_queue() {
    let lab = Lab::start().await;
    granted_lease(&lab, "line", LeaseKind::Fair).await;
    let token = LeaseToken::generate();
    let cmd = acquire(
        "line",
        Op::New,
        &request(LeaseKind::Fair),
        &token,
        &request_nonce(),
        0,
    );
    let (first, second) = twice(&lab, &cmd).await;
    let queued = |raw: &str| match AcquireReply::read(raw) {
        Ok(AcquireReply::Queued {
            lease_id,
            position,
            deadline_ms,
            new,
            holder,
            ..
        }) => (lease_id, position, deadline_ms, new, holder),
        other => panic!("not queued: {other:?}"),
    };
    assert_eq!(queued(&first), queued(&second));
    assert!(queued(&second).3, "still the call that queued it: {second}");
    let line: Vec<String> = lab
        .query(
            redis::cmd("LRANGE")
                .arg("redisson_lock_queue:{line}")
                .arg(0)
                .arg(-1),
        )
        .await;
    assert_eq!(line, [format!("{}:1", token.lease_id())]);
}

#[tokio::test]
async fn a_ticket_granted_on_its_poll_run_twice_is_the_same_grant() {
    let lab = Lab::start().await;
    let holder = granted_lease(&lab, "turn", LeaseKind::Fair).await;
    let ticket = LeaseToken::generate();
    let queued = lab
        .send(&acquire(
            "turn",
            Op::New,
            &request(LeaseKind::Fair),
            &ticket,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(queued.contains(r#""status":"queued""#), "{queued}");
    let gone = lab
        .send(&release(
            "turn",
            &holder,
            asked(false, None, &request_nonce()),
        ))
        .await;
    assert!(gone.contains(r#""status":"released""#), "{gone}");
    let poll = acquire("turn", Op::Poll, &reentry(), &ticket, &request_nonce(), 0);
    let (first, second) = twice(&lab, &poll).await;
    assert_same_grant(&first, &second);
    // Another poll (another request) is answered the grant as a replay, as before.
    let other = lab
        .send(&acquire(
            "turn",
            Op::Poll,
            &reentry(),
            &ticket,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(other.contains(r#""replayed":true"#), "{other}");
}

#[tokio::test]
async fn a_reentry_run_twice_counts_once() {
    let lab = Lab::start().await;
    for kind in [
        LeaseKind::Reentrant,
        LeaseKind::Fair,
        LeaseKind::Read,
        LeaseKind::Write,
    ] {
        let name = format!("again-{}", kind.as_str());
        let token = granted_lease(&lab, &name, kind).await;
        let cmd = acquire(&name, Op::Reenter, &reentry(), &token, &request_nonce(), 0);
        let (first, second) = twice(&lab, &cmd).await;
        assert_same_grant(&first, &second);
        assert!(second.contains(r#""reentry_count":2"#), "{second}");
    }
}

#[tokio::test]
async fn a_grant_with_an_idempotency_key_run_twice_is_its_first_answer_as_it_was() {
    let lab = Lab::start().await;
    let mut asked_for = request(LeaseKind::Reentrant);
    asked_for.idempotency = Some(IdempotencyKey::parse("k-1").expect("a key"));
    let token = LeaseToken::generate();
    let cmd = acquire("keyed", Op::New, &asked_for, &token, &request_nonce(), 0);
    let (first, second) = twice(&lab, &cmd).await;
    assert_eq!(first, second);
    // Another request with the key gets the first answer as a replay.
    let retry = LeaseToken::generate();
    let other = lab
        .send(&acquire(
            "keyed",
            Op::New,
            &asked_for,
            &retry,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(other.contains(r#""replayed":true"#), "{other}");
}

#[tokio::test]
async fn permits_taken_twice_are_taken_once() {
    let lab = Lab::start().await;
    // Permits left after the grant (the usual path), and none (a refusal, but for the grant).
    for (name, limit) in [("pool", 5), ("pair", 2)] {
        let token = LeaseToken::generate();
        let asked_for = permits(limit, 2);
        let cmd = Lab::fcall(
            name,
            &SemaphoreAcquire {
                request: &asked_for,
                id: token.lease_id(),
                token: &token,
                nonce: &request_nonce(),
            },
        );
        let (first, second) = twice(&lab, &cmd).await;
        assert_same_grant(&first, &second);
        let free: String = lab.query(redis::cmd("GET").arg(name)).await;
        assert_eq!(free, (limit - 2).to_string());
    }
}
