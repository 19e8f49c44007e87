//! A release run twice: of the lease, of one level, of every level or one mode, after the
//! next holder came; a rollback, an Idempotency-Key's release, permits given back.

use super::*;

#[tokio::test]
async fn a_release_run_twice_answers_released_both_times() {
    let lab = Lab::start().await;
    // The usual release of each kind (the fixed fields' and the shared one's early paths).
    for kind in [
        LeaseKind::Reentrant,
        LeaseKind::Fair,
        LeaseKind::Read,
        LeaseKind::Write,
    ] {
        let name = format!("done-{}", kind.as_str());
        let token = granted_lease(&lab, &name, kind).await;
        let nonce = request_nonce();
        let (first, second) =
            twice(&lab, &release(&name, &token, asked(false, None, &nonce))).await;
        assert!(first.starts_with(r#"{"status":"released""#), "{first}");
        assert_eq!(first, second);
    }
    // A reader among readers (the general path).
    granted_lease(&lab, "among", LeaseKind::Read).await;
    let token = granted_lease(&lab, "among", LeaseKind::Read).await;
    let nonce = request_nonce();
    let (first, second) = twice(&lab, &release("among", &token, asked(false, None, &nonce))).await;
    assert!(first.starts_with(r#"{"status":"released""#), "{first}");
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_release_of_one_level_run_twice_releases_one_level() {
    let lab = Lab::start().await;
    for kind in [LeaseKind::Reentrant, LeaseKind::Read, LeaseKind::Write] {
        let name = format!("level-{}", kind.as_str());
        let token = granted_lease(&lab, &name, kind).await;
        let again = lab
            .send(&acquire(
                &name,
                Op::Reenter,
                &reentry(),
                &token,
                &request_nonce(),
                0,
            ))
            .await;
        assert!(again.contains(r#""reentry_count":2"#), "{again}");
        let nonce = request_nonce();
        let cmd = release(&name, &token, asked(false, None, &nonce));
        let (first, second) = twice(&lab, &cmd).await;
        assert_eq!(first, second);
        assert!(
            matches!(
                ReleaseReply::read(&second),
                Ok(ReleaseReply::StillHeld {
                    reentry_count: 1,
                    replayed: false,
                    ..
                })
            ),
            "{second}"
        );
        // The next release (another request) lets the last level go.
        let last = lab
            .send(&release(
                &name,
                &token,
                asked(false, None, &request_nonce()),
            ))
            .await;
        assert!(last.starts_with(r#"{"status":"released""#), "{last}");
    }
}

#[tokio::test]
async fn a_release_of_every_level_or_one_mode_run_twice_answers_as_it_did() {
    let lab = Lab::start().await;
    let token = granted_lease(&lab, "deep", LeaseKind::Reentrant).await;
    for _ in 0..2 {
        lab.send(&acquire(
            "deep",
            Op::Reenter,
            &reentry(),
            &token,
            &request_nonce(),
            0,
        ))
        .await;
    }
    let nonce = request_nonce();
    let (first, second) = twice(&lab, &release("deep", &token, asked(true, None, &nonce))).await;
    assert!(first.starts_with(r#"{"status":"released""#), "{first}");
    assert_eq!(first, second);
    // A writer that also reads lets its write hold go: still held, as a reader.
    let token = granted_lease(&lab, "downgrade", LeaseKind::Write).await;
    let mut read = reentry();
    read.kind = Some(LeaseKind::Read);
    let joined = lab
        .send(&acquire(
            "downgrade",
            Op::Reenter,
            &read,
            &token,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(joined.contains(r#""reentry_count":2"#), "{joined}");
    let nonce = request_nonce();
    let cmd = release(
        "downgrade",
        &token,
        asked(false, Some(RwMode::Write), &nonce),
    );
    let (first, second) = twice(&lab, &cmd).await;
    assert!(first.starts_with(r#"{"status":"still_held""#), "{first}");
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_release_run_again_after_the_next_holder_came_leaves_it_alone() {
    let lab = Lab::start().await;
    for kind in [LeaseKind::Reentrant, LeaseKind::Read] {
        let name = format!("next-{}", kind.as_str());
        let token = granted_lease(&lab, &name, kind).await;
        let cmd = release(&name, &token, asked(false, None, &request_nonce()));
        let first = lab.send(&cmd).await;
        // The next holder takes the lock before the call runs again.
        let next = granted_lease(&lab, &name, LeaseKind::Write).await;
        let before = snapshot(&lab).await;
        let second = lab.send(&cmd).await;
        assert_state_eq(&before, &snapshot(&lab).await, &first, &second);
        assert_eq!(first, second);
        let held = hget(&lab, &name, &format!("{}:1:write", next.lease_id())).await;
        assert_eq!(held.as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn a_rollback_run_twice_rolls_back_nothing_else() {
    let lab = Lab::start().await;
    for kind in [LeaseKind::Reentrant, LeaseKind::Read] {
        let name = format!("gone-{}", kind.as_str());
        let token = LeaseToken::generate();
        let nonce = request_nonce();
        let grant = lab
            .send(&acquire(&name, Op::New, &request(kind), &token, &nonce, 0))
            .await;
        assert!(grant.starts_with(r#"{"status":"acquired""#), "{grant}");
        let cmd = release(&name, &token, ReleaseHow::Rollback { nonce: &nonce });
        let first = lab.send(&cmd).await;
        assert!(first.contains(r#""client_gone""#), "{first}");
        let next = granted_lease(&lab, &name, kind).await;
        let before = snapshot(&lab).await;
        let second = lab.send(&cmd).await;
        assert_state_eq(&before, &snapshot(&lab).await, &first, &second);
        assert_eq!(first, second);
        let held = hget(&lab, &name, &format!("{}:1", next.lease_id())).await;
        assert!(held.is_some(), "{name}: the next lease still holds");
    }
}

#[tokio::test]
async fn a_release_with_an_idempotency_key_run_twice_is_its_first_answer_as_it_was() {
    let lab = Lab::start().await;
    let token = granted_lease(&lab, "keyed-release", LeaseKind::Reentrant).await;
    let key = IdempotencyKey::parse("r-1").expect("a key");
    let nonce = request_nonce();
    let how = ReleaseHow::Asked {
        all: false,
        mode: None,
        idempotency: Some(&key),
        nonce: &nonce,
    };
    let (first, second) = twice(&lab, &release("keyed-release", &token, how)).await;
    assert!(first.starts_with(r#"{"status":"released""#), "{first}");
    assert_eq!(first, second);
}

#[tokio::test]
async fn permits_given_back_twice_are_given_back_once() {
    let lab = Lab::start().await;
    let asked_for = permits(3, 2);
    for rollback in [false, true] {
        let token = LeaseToken::generate();
        let grant_nonce = request_nonce();
        let grant = lab
            .send(&Lab::fcall(
                "gpus",
                &SemaphoreAcquire {
                    request: &asked_for,
                    id: token.lease_id(),
                    token: &token,
                    nonce: &grant_nonce,
                },
            ))
            .await;
        assert!(grant.starts_with(r#"{"status":"acquired""#), "{grant}");
        let nonce = request_nonce();
        let how = if rollback {
            ReleaseHow::Rollback {
                nonce: &grant_nonce,
            }
        } else {
            asked(false, None, &nonce)
        };
        let cmd = Lab::fcall(
            "gpus",
            &SemaphoreRelease {
                lease: token.lease_id(),
                token: &token,
                how,
            },
        );
        let (first, second) = twice(&lab, &cmd).await;
        assert!(first.starts_with(r#"{"status":"released""#), "{first}");
        assert_eq!(first, second);
        let free: String = lab.query(redis::cmd("GET").arg("gpus")).await;
        assert_eq!(free, "3");
    }
}
