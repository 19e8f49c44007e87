//! `leasehold run` and the holder signals (issue 56): an operator's revocation reaches the
//! command as SIGTERM at once, long before its deadline; the command that then exits has its
//! lease released (an ordinary release), so the next holder need not wait for the deadline;
//! the same for a RedLock lease, and for a multilease when one member is revoked.
//! And whatever the command leaves running in its group when it exits (on its own, or on a
//! signal run forwarded) is stopped before the lease is released.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use nix::sys::signal::{Signal, kill};

use crate::helpers::cli::{
    assert_lock_free, code, file, finish, leasehold, pid_of, run_sh, stderr, temp_dir, until_ended,
    wait_for_file,
};
use crate::helpers::{TestApp, spawn_app};
use crate::matrix::kinds::with_nodes;

#[tokio::test]
async fn a_revocation_stops_the_command_at_once_and_the_lease_is_released() {
    let app = spawn_app().await;
    revocation_stops_the_command(&app, &["revoked-job"], "revoked-job").await;
    // Released at once, not at the deadline: the next holder gets it now.
    app.lease("revoked-job", json!({})).await;
}

/// The same for a RedLock lease (its watch tells the revocation as the nodes record it).
#[tokio::test]
async fn a_revocation_stops_a_command_holding_a_redlock_lease_at_once() {
    let (app, _nodes) = with_nodes().await;
    revocation_stops_the_command(&app, &["--kind", "redlock", "revoked-red"], "revoked-red").await;
    app.acquire("revoked-red", json!({"kind": "redlock"}))
        .await
        .assert_status(201);
}

/// The same for a multilease, when an operator revokes one of its member locks: the whole
/// lease is released, every member free at once.
#[tokio::test]
async fn a_revocation_of_one_member_stops_a_multilease_command() {
    let app = spawn_app().await;
    let target = ["--lock", "books", "--lock", "shelf"];
    revocation_stops_the_command(&app, &target, "shelf").await;
    app.lease("books", json!({})).await;
    app.lease("shelf", json!({})).await;
}

/// Runs a command under `leasehold run` with `target` (what to hold, and options), revokes
/// the lease holding `revoked` with a 30 s grace and sees the command stopped within 20 s,
/// run saying why and failing.
async fn revocation_stops_the_command(app: &TestApp, target: &[&str], revoked: &str) {
    let dir = temp_dir();
    let (ready, termed) = (file(&dir, "ready"), file(&dir, "termed"));
    let script =
        r#"trap 'echo term > "$2"; exit 0' TERM; echo ready > "$1"; while :; do sleep 0.01; done"#;
    let run = leasehold(app, "run")
        .args(["--ttl", "60s"])
        .args(target)
        .args(["--", "sh", "-c", script, "sh"])
        .args([&ready, &termed])
        .spawn()
        .expect("start leasehold run");
    wait_for_file(&ready).await;
    // Let the watch open (it starts with the command).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    app.admin(
        Method::POST,
        &format!("/v1/admin/locks/{revoked}/revoke"),
        Some(json!({"grace_ms": 30_000, "reason": "maintenance"})),
    )
    .await
    .assert_status(200);
    wait_for_file(&termed).await;
    let out = finish(run).await;
    let stopped = asked.elapsed();
    let said = stderr(&out);
    assert!(said.contains("maintenance"), "{said}");
    // Cut short: never a success, even when the command exits 0 on SIGTERM.
    assert_ne!(code(&out), 0, "{said}");
    assert!(
        stopped < Duration::from_secs(20),
        "stopped after {stopped:?}"
    );
    println!("run {target:?}: revocation asked -> command stopped and run ended: {stopped:?}");
}

/// The watch tells the revocation, and so does every heartbeat's answer after it (a 3 s TTL:
/// one a second while the command takes 2.5 s to stop): run says it once.
#[tokio::test]
async fn a_revocation_told_by_the_watch_and_the_heartbeats_is_said_once() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (ready, termed) = (file(&dir, "ready"), file(&dir, "termed"));
    let run = run_sh(
        &app,
        &["--ttl", "3s"],
        "told-once",
        r#"trap 'echo term > "$2"; sleep 2.5; exit 0' TERM; echo ready > "$1"; while :; do sleep 0.01; done"#,
        &[&ready, &termed],
    )
    .spawn()
    .expect("start leasehold run");
    wait_for_file(&ready).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.admin(
        Method::POST,
        "/v1/admin/locks/told-once/revoke",
        Some(json!({"grace_ms": 30_000, "reason": "maintenance"})),
    )
    .await
    .assert_status(200);
    wait_for_file(&termed).await;
    let said = stderr(&finish(run).await);
    assert_eq!(said.matches("asks us to let go").count(), 1, "{said}");
}

/// Starts `leasehold run` around `script`, which writes the pid of a background job it leaves
/// behind (its output detached, so that it holds none of run's pipes) to its first argument
/// and `ready` to its second; returns the run and that pid.
async fn run_leaving_a_job(lock: &str, script: &str) -> (TestApp, tokio::process::Child, i32) {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (pid_file, ready) = (file(&dir, "job.pid"), file(&dir, "ready"));
    let run = run_sh(&app, &["--ttl", "60s"], lock, script, &[&pid_file, &ready])
        .spawn()
        .expect("start leasehold run");
    wait_for_file(&ready).await;
    let pid = wait_for_file(&pid_file)
        .await
        .trim()
        .parse()
        .expect("a pid");
    (app, run, pid)
}

/// Waits for `run` to exit with `expected` (the command's code), then for the left-behind `job`
/// to have ended, and checks that `lock` is free.
async fn ends_with_nothing_left(
    (app, lock): (&TestApp, &str),
    run: tokio::process::Child,
    expected: i32,
    job: i32,
) {
    let out = finish(run).await;
    assert_eq!(
        code(&out),
        expected,
        "the command's code; stderr: {}",
        stderr(&out)
    );
    until_ended(job, "the job outlived the command and its lease").await;
    assert_lock_free(app, lock).await;
}

#[tokio::test]
async fn what_the_command_leaves_running_is_stopped_before_its_lease_is_released() {
    let (app, run, job) = run_leaving_a_job(
        "left-behind",
        r#"sleep 300 >/dev/null 2>&1 & echo $! > "$1"; echo ready > "$2"; exit 0"#,
    )
    .await;
    ends_with_nothing_left((&app, "left-behind"), run, 0, job).await;
}

#[tokio::test]
async fn a_forwarded_sigterm_leaves_nothing_of_the_command_running() {
    // The background job ignores SIGTERM (as one forked just as the signal arrived can miss
    // it): the forwarded SIGTERM ends the command, not the job.
    let (app, run, job) = run_leaving_a_job(
        "forwarded",
        r#"trap 'exit 42' TERM; (trap '' TERM; exec sleep 300) >/dev/null 2>&1 & echo $! > "$1"; echo ready > "$2"; wait"#,
    )
    .await;
    kill(pid_of(&run), Signal::SIGTERM).expect("SIGTERM");
    // The trap's code.
    ends_with_nothing_left((&app, "forwarded"), run, 42, job).await;
}
