//! A multilease's record and an Idempotency-Key's claim, written or ended twice.

use super::*;

/// The FCALL `Locks::call_record` sends for a multilease's record (or claim) at `key`.
fn record_fcall(
    key: &str,
    script: &crate::locks::scripts::multilease::Multilease<'_>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(LIBRARY.function("multilease"))
        .arg(2)
        .arg(key)
        .arg(key)
        .arg(0)
        .arg(TOMB_MS);
    script.args(&mut cmd);
    cmd
}

#[tokio::test]
async fn a_multileases_record_written_or_ended_twice_is_written_or_ended_once() {
    use crate::locks::scripts::multilease::{MultiOp, Multilease};
    let lab = Lab::start().await;
    let id = LeaseToken::generate().lease_id();
    let key = KeySpace::new("").multilease(id);
    let body = r#"{"members":[],"holder":null,"metadata":null}"#;
    let put = Multilease {
        id,
        op: MultiOp::Put {
            ttl_ms: 30_000,
            body,
        },
    };
    let (first, second) = twice(&lab, &record_fcall(&key, &put)).await;
    assert!(first.starts_with(r#"{"status":"put""#), "{first}");
    let record = |reply: &str| reply.split(r#","now_ms""#).next().unwrap_or("").to_owned();
    assert_eq!(
        record(&first),
        record(&second),
        "the same record, answered the same"
    );
    let end = Multilease {
        id,
        op: MultiOp::End {
            state: "released",
            member: "",
        },
    };
    let (first, second) = twice(&lab, &record_fcall(&key, &end)).await;
    assert!(first.starts_with(r#"{"status":"ended""#), "{first}");
    // Run again, it finds the end it made (the use case reads both as ended).
    assert!(second.starts_with(r#"{"status":"lost""#), "{second}");
    assert!(second.contains(r#""state":"released""#), "{second}");
}

#[tokio::test]
async fn an_idempotency_claim_made_twice_hands_back_the_same_token() {
    use crate::locks::scripts::multilease::{MultiOp, Multilease};
    let lab = Lab::start().await;
    let key = IdempotencyKey::parse("retry-me").expect("a key");
    let token = LeaseToken::generate();
    let sealed = key.seal(&token);
    let claim = Multilease {
        id: token.lease_id(),
        op: MultiOp::Claim {
            keep_ms: 60_000,
            fingerprint: "fp",
            sealed: &sealed,
        },
    };
    let claim_key = KeySpace::new("").multilease_claim(&key.digest_hex());
    let (first, second) = twice(&lab, &record_fcall(&claim_key, &claim)).await;
    assert_eq!(first, r#"{"status":"new"}"#);
    // The second run finds the claim: the request goes on with the token it sealed.
    assert!(second.contains(&sealed), "{second}");
}
