//! Redisson's ports to other languages: node-redisson (from the npm registry, installed by
//! `node-redisson/install.sh` into the target dir) writes its holder field as
//! `<client uuid>:<lock uuid>`, not Java's `<uuid>:<thread number>`. Leasehold treats its lock
//! as a Redisson lock: it and Leasehold exclude each other and wake each other's waiters.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::helpers::{RedisServer, TestApp, spawn_app};

/// node-redisson's lock, driven by `node-redisson/port.js` (one command, lines in and out).
struct Port {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Port {
    async fn start(redis: &RedisServer, args: &[&str]) -> Self {
        let dir = install();
        let mut command = tokio::process::Command::from(crate::helpers::children::guarded("node"));
        command
            .arg(dir.join("port.js"))
            .arg(redis.socket())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start node");
        let stdout = child.stdout.take().expect("stdout");
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line the port prints, within 15 s.
    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(15), self.lines.next_line())
            .await
            .expect("node-redisson answers in time")
            .expect("read")
            .expect("node-redisson printed a line (its errors are on stderr)")
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
    }

    async fn exited(mut self) {
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("node-redisson exits")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
}

/// The port installed (once per target dir; `install.sh` is idempotent and serialises
/// concurrent runs).
fn install() -> PathBuf {
    let dest = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-redisson");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/api/redisson/node-redisson/install.sh"
    );
    let status = std::process::Command::new("bash")
        .arg(script)
        .arg(&dest)
        .status()
        .expect("run install.sh");
    assert!(status.success(), "installing node-redisson: {status}");
    dest
}

/// Waits until `n` clients listen on the lock's unlock channel.
async fn listeners(app: &TestApp, name: &str, n: i64) {
    let mut conn = app.redis.conn().await;
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await
            .expect("PUBSUB NUMSUB");
        if count >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nobody listens on {channel}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_node_redisson_holder_excludes_leasehold_and_its_unlock_wakes_our_waiter() {
    let app = spawn_app().await;
    let mut port = Port::start(&app.redis, &["hold", "jobs"]).await;
    let line = port.line().await;
    let field = line.strip_prefix("held ").expect("held");
    // Not Java's `<uuid>:<thread number>`.
    let (_, thread) = field.split_once(':').expect("<uuid>:<uuid>");
    assert_eq!(thread.len(), 36, "{field}");

    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(refused.body["holder_id"], field);
    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["kind"], "foreign");
    assert_eq!(lock.body["holders"][0]["holder_id"], field);
    assert_eq!(lock.body["holders"][0]["reentry_count"], 1);

    // Its watchdog lease lasts 30 s: the waiter is woken by the unlock message.
    let waiter = app.spawn_waiter("jobs", 20_000);
    app.wait_for_waiters(1).await;
    port.send("unlock").await;
    assert_eq!(port.line().await, "unlocked");
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by node-redisson's unlock message")
        .expect("task");
    granted.assert_status(201);
    port.exited().await;
}

#[tokio::test]
async fn a_leasehold_holder_excludes_node_redisson_and_our_release_wakes_it() {
    let app = spawn_app().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 30_000})).await;
    let mut port = Port::start(&app.redis, &["wait", "jobs", "20000"]).await;
    assert_eq!(port.line().await, "waiting");
    listeners(&app, "jobs", 1).await;
    app.release(&lease, false).await.assert_status(200);
    let line = port.line().await;
    let waited: u64 = line
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("node-redisson got the lock, not {line}"))
        .parse()
        .expect("ms");
    assert!(
        waited < 10_000,
        "woken by our unlock message, not its 30 s TTL: {waited} ms"
    );
    assert_eq!(port.line().await, "unlocked");
    port.exited().await;
    app.acquire("jobs", json!({})).await.assert_status(201);
}

/// Hashes of other programs whose fields merely contain a colon stay foreign: a field needs a
/// UUID before the colon, or a number after it, and every value must be a count.
#[tokio::test]
async fn colon_fields_of_other_programs_stay_foreign() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    for (key, field, value) in [
        ("hits", "page:home", "5"),
        (
            "sessions",
            "6f1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60:ann",
            "ann@example.com",
        ),
    ] {
        redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .query_async::<()>(&mut conn)
            .await
            .expect("HSET");
        let reply = app.acquire(key, json!({})).await;
        reply.assert_problem(409, "kind_conflict");
        assert_eq!(reply.body["held_as"], "foreign");
        let waiting = app.acquire_with(key, 2_000, json!({}), None).await;
        waiting.assert_problem(409, "kind_conflict");
    }
}
