//! Every state-changing function of `lua/` run twice with the same KEYS and ARGV, through its
//! Rust twin, straight against a real redis-server: redis-rs's cluster client re-sends a
//! command whose connection dropped, so a call whose reply was lost runs again, exactly as
//! sent (`lua/prelude.lua`, "Run twice"). The second run must leave the state the first left,
//! and answer what the use cases here read as the first answer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::locks::KeySpace;
use crate::locks::scripts::Script;
use crate::locks::scripts::acquire::{Acquire, AcquireReply, Op};
use crate::locks::scripts::evict::Evict;
use crate::locks::scripts::force_release::ForceRelease;
use crate::locks::scripts::leave::Leave;
use crate::locks::scripts::library::LIBRARY;
use crate::locks::scripts::release::{Release, ReleaseHow, ReleaseReply};
use crate::locks::scripts::renew::{Renew, RenewReply};
use crate::locks::scripts::semaphore_acquire::SemaphoreAcquire;
use crate::locks::scripts::semaphore_force_release::SemaphoreForceRelease;
use crate::locks::scripts::semaphore_limit::SemaphoreLimit;
use crate::locks::scripts::semaphore_release::SemaphoreRelease;
use crate::locks::scripts::semaphore_renew::SemaphoreRenew;
use crate::locks::scripts::sweep::Sweep;
use crate::locks::types::{
    AcquireRequest, HolderLabel, IdempotencyKey, LeaseKind, LeaseToken, LockDelay, LockName,
    PermitRequest, Resource, RwMode, RwPolicy, TtlPolicy, request_nonce,
};

/// How long an ended lease's record stays (ARGV[2]).
const TOMB_MS: u64 = 60_000;

/// A private redis-server on a Unix socket, with the function library loaded; killed on drop.
struct Lab {
    _dir: TempDir,
    _child: Child,
    conn: MultiplexedConnection,
}

impl Lab {
    async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lh-replay")
            .tempdir()
            .expect("temp dir");
        let socket: PathBuf = dir.path().join("r.sock");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server on PATH");
        let client = redis::Client::open(format!("redis+unix://{}", socket.display()).as_str())
            .expect("redis url");
        // redis-server has no readiness signal: its socket is polled until it answers.
        let mut conn = None;
        for _ in 0..400 {
            if let Ok(c) = client.get_multiplexed_async_connection().await {
                conn = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut conn = conn.expect("redis-server answers");
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&LIBRARY.text)
            .query_async::<()>(&mut conn)
            .await
            .expect("FUNCTION LOAD");
        Self {
            _dir: dir,
            _child: child,
            conn,
        }
    }

    /// The FCALL `Locks::call` sends for `script` on `name` (no deadline).
    fn fcall<S: Script>(name: &str, script: &S) -> redis::Cmd {
        let keys = KeySpace::new("").lock(&LockName::parse(name).expect("a lock name"));
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(LIBRARY.function(S::FILE))
            .arg(2)
            .arg(keys.lock())
            .arg(keys.state())
            .arg(0)
            .arg(TOMB_MS);
        script.args(&mut cmd);
        cmd
    }

    /// Sends `cmd` and returns the raw reply.
    async fn send(&self, cmd: &redis::Cmd) -> String {
        cmd.query_async(&mut self.conn.clone())
            .await
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        cmd.query_async(&mut self.conn.clone())
            .await
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }
}

/// Everything in Redis (every test has a server of its own): each key's type, absolute expiry
/// and contents, to compare the state after one run with the state after two.
async fn snapshot(lab: &Lab) -> BTreeMap<String, String> {
    let mut keys: Vec<String> = lab.query(redis::cmd("KEYS").arg("*")).await;
    keys.sort();
    let mut all = BTreeMap::new();
    for key in keys {
        let kind: String = lab.query(redis::cmd("TYPE").arg(&key)).await;
        let expires: i64 = lab.query(redis::cmd("PEXPIRETIME").arg(&key)).await;
        let mut read = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).clone(),
            // (Sorted: a hash's fields come in no set order.)
            "hash" => {
                let fields: BTreeMap<Vec<u8>, Vec<u8>> =
                    lab.query(redis::cmd("HGETALL").arg(&key)).await;
                all.insert(key, format!("hash expires {expires}: {fields:?}"));
                continue;
            }
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(),
            "stream" => redis::cmd("XRANGE").arg(&key).arg("-").arg("+").clone(),
            other => panic!("{key} is a {other}"),
        };
        let value: redis::Value = lab.query(&mut read).await;
        all.insert(key, format!("{kind} expires {expires}: {value:?}"));
    }
    all
}

/// Runs `cmd` twice in a row, as a retry of a command whose reply was lost does. Returns both
/// replies, after checking that the second run left everything as the first did.
async fn twice(lab: &Lab, cmd: &redis::Cmd) -> (String, String) {
    let first = lab.send(cmd).await;
    let after_one = snapshot(lab).await;
    let second = lab.send(cmd).await;
    let after_two = snapshot(lab).await;
    assert_state_eq(&after_one, &after_two, &first, &second);
    (first, second)
}

fn assert_state_eq(
    one: &BTreeMap<String, String>,
    two: &BTreeMap<String, String>,
    first: &str,
    second: &str,
) {
    for key in one.keys().chain(two.keys()) {
        assert_eq!(
            one.get(key),
            two.get(key),
            "the second run changed {key}\nfirst answer:  {first}\nsecond answer: {second}"
        );
    }
}

fn policy() -> TtlPolicy {
    TtlPolicy {
        default_ms: 30_000,
        min_ms: 1,
        max_ms: 3_600_000,
    }
}

fn request(kind: LeaseKind) -> AcquireRequest {
    AcquireRequest {
        ttl: Some(policy().default_ttl()),
        holder: Some(HolderLabel::parse("worker-1").expect("a label")),
        metadata: None,
        kind: Some(kind),
        policy: RwPolicy::ReadersFirst,
        idempotency: None,
        lock_delay: None,
    }
}

/// A reentry's request: the lease's own kind and TTL.
fn reentry() -> AcquireRequest {
    AcquireRequest {
        ttl: None,
        holder: None,
        metadata: None,
        kind: None,
        policy: RwPolicy::ReadersFirst,
        idempotency: None,
        lock_delay: None,
    }
}

fn permits(limit: u32, permits: u32) -> PermitRequest {
    PermitRequest {
        ttl: policy().default_ttl(),
        holder: Some(HolderLabel::parse("trainer").expect("a label")),
        metadata: None,
        limit,
        permits,
        idempotency: None,
    }
}

/// The FCALL of one attempt (`Locks::attempt`) for lease `token`, as request `nonce`.
fn acquire(
    name: &str,
    op: Op,
    request: &AcquireRequest,
    token: &LeaseToken,
    nonce: &str,
    arrived_ms: u64,
) -> redis::Cmd {
    Lab::fcall(
        name,
        &Acquire {
            op,
            request,
            id: token.lease_id(),
            token,
            liveness_ms: 60_000,
            arrived_ms,
            nonce,
        },
    )
}

fn release(name: &str, token: &LeaseToken, how: ReleaseHow<'_>) -> redis::Cmd {
    Lab::fcall(
        name,
        &Release {
            lease: token.lease_id(),
            token,
            how,
        },
    )
}

fn asked<'a>(all: bool, mode: Option<RwMode>, nonce: &'a str) -> ReleaseHow<'a> {
    ReleaseHow::Asked {
        all,
        mode,
        idempotency: None,
        nonce,
    }
}

/// What the Rust side makes of a grant (`ops::attempt::grant`), and whether it would show
/// the token (a grant not marked replayed, of a new lease or a ticket).
fn granted(raw: &str) -> (String, bool) {
    let (g, new_lease) = match AcquireReply::read(raw) {
        Ok(AcquireReply::Acquired(g)) => (g, true),
        Ok(AcquireReply::Reentered(g)) => (g, false),
        other => panic!("not a grant: {other:?} from {raw}"),
    };
    let shows_token = !g.replayed && g.sealed.is_none();
    let grant = super::super::attempt::grant(g, None, new_lease, None).expect("a grant");
    (format!("{grant:?}"), shows_token)
}

/// A grant answered twice must be the same grant to the Rust side: same lease, fence, count,
/// TTL and expiry, not marked replayed (so the token is shown, the event published once).
fn assert_same_grant(first: &str, second: &str) {
    let (one, shown) = granted(first);
    let (two, shown_again) = granted(second);
    assert!(shown, "{first}");
    assert_eq!(one, two, "\nfirst:  {first}\nsecond: {second}");
    assert_eq!(shown, shown_again, "{second}");
}

async fn hget(lab: &Lab, key: &str, field: &str) -> Option<String> {
    lab.query(redis::cmd("HGET").arg(key).arg(field)).await
}

/// A lease on `name` granted to a request of its own (not the one under test).
async fn granted_lease(lab: &Lab, name: &str, kind: LeaseKind) -> LeaseToken {
    let token = LeaseToken::generate();
    let reply = lab
        .send(&acquire(
            name,
            Op::New,
            &request(kind),
            &token,
            &request_nonce(),
            0,
        ))
        .await;
    assert!(reply.starts_with(r#"{"status":"acquired""#), "{reply}");
    token
}

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

/// Redis's `usec_per_call` of FCALL in `INFO commandstats`, and how many calls it counts.
async fn fcall_cost(lab: &Lab) -> (f64, u64) {
    let info: String = lab.query(redis::cmd("INFO").arg("commandstats")).await;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:"))
        .unwrap_or_default();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("0")
            .to_owned()
    };
    (
        field("usec_per_call").parse().unwrap_or(0.0),
        field("calls").parse().unwrap_or(0),
    )
}

/// What one call of each usual function costs Redis (µs, `INFO commandstats`): a new lease on
/// a free lock of each kind and its release, and a semaphore's permit. Not a check: run it
/// by hand (`--ignored --nocapture`) before and after a change to those paths.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn usual_calls_cost() {
    const NAMES: usize = 500;
    const ROUNDS: usize = 7;
    let lab = Lab::start().await;
    let policy = TtlPolicy {
        default_ms: 30_000,
        min_ms: 1,
        max_ms: 3_600_000,
    };
    let mut out = BTreeMap::<String, Vec<f64>>::new();
    for kind in [LeaseKind::Reentrant, LeaseKind::Read, LeaseKind::Semaphore] {
        let request = AcquireRequest {
            ttl: Some(policy.default_ttl()),
            holder: None,
            metadata: None,
            kind: Some(kind),
            policy: RwPolicy::ReadersFirst,
            idempotency: None,
            lock_delay: None,
        };
        let permits = PermitRequest {
            ttl: policy.default_ttl(),
            holder: None,
            metadata: None,
            limit: 4,
            permits: 1,
            idempotency: None,
        };
        // Round 0 warms every name up (its state hash exists, as a used name's does).
        for round in 0..=ROUNDS {
            let tokens: Vec<LeaseToken> = (0..NAMES).map(|_| LeaseToken::generate()).collect();
            let nonce = request_nonce();
            let name = |i: usize| format!("cost-{}-{i}", kind.as_str());
            lab.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT")).await;
            for (i, token) in tokens.iter().enumerate() {
                let cmd = if kind == LeaseKind::Semaphore {
                    Lab::fcall(
                        &name(i),
                        &SemaphoreAcquire {
                            request: &permits,
                            id: token.lease_id(),
                            token,
                            nonce: &nonce,
                        },
                    )
                } else {
                    Lab::fcall(
                        &name(i),
                        &Acquire {
                            op: Op::New,
                            request: &request,
                            id: token.lease_id(),
                            token,
                            liveness_ms: 0,
                            arrived_ms: 0,
                            nonce: &nonce,
                        },
                    )
                };
                let reply = lab.send(&cmd).await;
                assert!(reply.contains("\"acquired\""), "{reply}");
            }
            let (acquire, _) = fcall_cost(&lab).await;
            lab.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT")).await;
            for (i, token) in tokens.iter().enumerate() {
                let nonce = request_nonce();
                let how = ReleaseHow::Asked {
                    all: false,
                    mode: None,
                    idempotency: None,
                    nonce: &nonce,
                };
                let cmd = if kind == LeaseKind::Semaphore {
                    Lab::fcall(
                        &name(i),
                        &SemaphoreRelease {
                            lease: token.lease_id(),
                            token,
                            how,
                        },
                    )
                } else {
                    Lab::fcall(
                        &name(i),
                        &Release {
                            lease: token.lease_id(),
                            token,
                            how,
                        },
                    )
                };
                let reply = lab.send(&cmd).await;
                assert!(reply.contains("\"released\""), "{reply}");
            }
            let (release, _) = fcall_cost(&lab).await;
            if round > 0 {
                out.entry(format!("{} acquire", kind.as_str()))
                    .or_default()
                    .push(acquire);
                out.entry(format!("{} release", kind.as_str()))
                    .or_default()
                    .push(release);
            }
        }
    }
    for (what, mut runs) in out {
        runs.sort_by(f64::total_cmp);
        println!(
            "{what}: median {:.2} us per call (runs {runs:.2?})",
            runs[runs.len() / 2]
        );
    }
}

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
