//! Every state-changing function of `lua/` run twice with the same KEYS and ARGV, through its
//! Rust twin, straight against a real redis-server: redis-rs's cluster client re-sends a
//! command whose connection dropped, so a call whose reply was lost runs again, exactly as
//! sent (`lua/prelude.lua`, "Run twice"). The second run must leave the state the first left,
//! and answer what the use cases here read as the first answer.

mod cost;
mod grants;
mod records;
mod releases;
mod upkeep;

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
