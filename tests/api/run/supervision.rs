//! `leasehold run` supervises its command: heartbeats keep the lease past its TTL, and the
//! command never runs on unguarded: a force release (told by the watch, long before the
//! TTL), a lease that cannot be renewed, or a killed run stops it (its whole process group),
//! and a SIGTERM to run reaches it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use tokio::process::Child;

use crate::helpers::cli::{
    assert_lock_free, code, file, finish, has_ended, pid_of, run_sh, stderr, temp_dir, until_ended,
    wait_for_file,
};
use crate::helpers::{ADMIN_TOKEN, TestApp, next_event, spawn_app};

/// Starts `leasehold run --ttl 60s` on `lock` around `script`, which writes a pid to its
/// first argument (a file in `dir`); returns the run and that pid once written.
async fn run_recording_pid(
    app: &TestApp,
    lock: &str,
    script: &str,
    dir: &tempfile::TempDir,
) -> (Child, i32) {
    let pid_file = file(dir, "recorded.pid");
    let run = run_sh(app, &["--ttl", "60s"], lock, script, &[&pid_file])
        .spawn()
        .expect("start leasehold run");
    let pid = wait_for_file(&pid_file)
        .await
        .trim()
        .parse()
        .expect("a pid");
    (run, pid)
}

/// Milliseconds since the epoch, as `date +%s%3N` writes them.
fn epoch_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

#[tokio::test]
async fn a_force_release_stops_the_whole_process_group_long_before_the_ttl() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (run, grandchild) =
        run_recording_pid(&app, "guarded", r#"sleep 300 & echo $! > "$1"; wait"#, &dir).await;
    assert!(!has_ended(grandchild), "the grandchild runs");

    let forced_at = Instant::now();
    app.force_release("guarded", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let out = finish(run).await;
    let took = forced_at.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "stopped {took:?} after the force-release, with 60 s of TTL left"
    );
    assert_eq!(
        code(&out),
        143,
        "sh died of SIGTERM; stderr: {}",
        stderr(&out)
    );
    let err = stderr(&out);
    assert!(err.contains("lease lost"), "stderr: {err}");
    assert!(err.contains("SIGTERM"), "stderr: {err}");
    // The signal reached the whole group; the grandchild's death is asynchronous to ours.
    until_ended(grandchild, "the grandchild survived").await;
}

#[tokio::test]
async fn a_killed_run_takes_its_command_with_it() {
    let app = spawn_app().await;
    let dir = temp_dir();
    // (`exec`: the command is the process `run` started, which is what the kernel signals.)
    let (mut run, command) =
        run_recording_pid(&app, "orphaned", r#"echo $$ > "$1"; exec sleep 300"#, &dir).await;
    assert!(!has_ended(command), "the command runs");

    // Killed, `run` can neither heartbeat nor stop the command: the command must not run on
    // unguarded (the lease runs out in 60 s, and then someone else may hold the lock).
    run.kill().await.expect("SIGKILL leasehold run");
    until_ended(command, "the command outlived its guard").await;
}

#[tokio::test]
async fn a_sigterm_to_run_reaches_the_command() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (marker, ready) = (file(&dir, "term"), file(&dir, "ready"));
    let run = run_sh(
        &app,
        &["--ttl", "60s"],
        "forwarding",
        r#"trap 'echo term > "$1"; exit 42' TERM; sleep 300 & echo ready > "$2"; wait"#,
        &[&marker, &ready],
    )
    .spawn()
    .expect("start leasehold run");
    wait_for_file(&ready).await;

    kill(pid_of(&run), Signal::SIGTERM).expect("SIGTERM");
    let out = finish(run).await;
    assert_eq!(code(&out), 42, "the trap's code; stderr: {}", stderr(&out));
    assert_eq!(wait_for_file(&marker).await, "term\n");
    assert_lock_free(&app, "forwarding").await;
}

#[tokio::test]
async fn heartbeats_keep_the_lease_past_its_ttl() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let dir = temp_dir();
    let go = file(&dir, "go");
    // TTL 1.5 s: the command outlives it several times over.
    let run = run_sh(
        &app,
        &["--ttl", "1500ms"],
        "long-job",
        r#"while [ ! -e "$1" ]; do sleep 0.05; done"#,
        &[&go],
    )
    .spawn()
    .expect("start leasehold run");
    let acquired = next_event(&mut events, "acquired").await;
    for _ in 0..4 {
        let renewed = next_event(&mut events, "renewed").await;
        assert_eq!(renewed["lease_id"], acquired["lease_id"]);
    }
    let lock = app.inspect_lock("long-job").await;
    assert_eq!(lock.body["holders"][0]["lease_id"], acquired["lease_id"]);

    std::fs::write(&go, "").expect("write go");
    let out = finish(run).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert!(
        out.stderr.is_empty(),
        "no heartbeat failed: {}",
        stderr(&out)
    );
    assert_lock_free(&app, "long-job").await;
}

#[tokio::test]
async fn an_unrenewable_lease_stops_the_command_before_it_expires() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let dir = temp_dir();
    let (died, ready) = (file(&dir, "died-at-ms"), file(&dir, "ready"));
    let run = run_sh(
        &app,
        &["--ttl", "6s"],
        "frozen",
        r#"trap 'date +%s%3N > "$1"; exit 3' TERM; sleep 300 & echo ready > "$2"; wait"#,
        &[&died, &ready],
    )
    .spawn()
    .expect("start leasehold run");
    wait_for_file(&ready).await;
    let renewed = next_event(&mut events, "renewed").await;

    // A frozen Redis: every heartbeat now fails (503 after the server's Redis timeout).
    app.redis.signal(Signal::SIGSTOP);
    let out = finish(run).await;
    app.redis.signal(Signal::SIGCONT);

    assert_eq!(code(&out), 3, "the trap's code; stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("could not renew"), "stderr: {err}");
    // The lease lasts at least until the last renewal Redis made (its clock is ours: same
    // machine) plus the TTL; the command must have ended before that.
    let mut expires_at_ms = renewed["at_ms"].as_u64().expect("at_ms") + 6_000;
    while let Ok(event) = events.try_recv() {
        if event["type"] == "renewed" {
            expires_at_ms = expires_at_ms.max(event["at_ms"].as_u64().expect("at_ms") + 6_000);
        }
    }
    let died_at_ms: u64 = wait_for_file(&died)
        .await
        .trim()
        .parse()
        .expect("milliseconds");
    assert!(
        died_at_ms < expires_at_ms,
        "the command ended {} ms after the lease expired",
        died_at_ms - expires_at_ms
    );
}

#[tokio::test]
async fn a_force_release_reaches_the_command_through_the_watch() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (ready, termed) = (file(&dir, "ready"), file(&dir, "termed-at"));
    let run = run_sh(
        &app,
        &["--ttl", "60s"],
        "watched-job",
        r#"trap 'date +%s%3N > "$2"; exit 3' TERM; echo ready > "$1"; while :; do sleep 0.01; done"#,
        &[&ready, &termed],
    )
    .spawn()
    .expect("start leasehold run");
    wait_for_file(&ready).await;
    // Let the watch open (it starts with the command); heartbeats come only every 20 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let forced_at = epoch_ms();
    app.force_release("watched-job", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let out = finish(run).await;
    assert_eq!(code(&out), 3, "the trap's code; stderr: {}", stderr(&out));
    let termed_at: u128 = wait_for_file(&termed)
        .await
        .trim()
        .parse()
        .expect("milliseconds");
    // A figure for the record (the shell's `sleep 0.01` loop adds up to 10 ms), not a timed
    // assertion; that it stopped long before the 60 s TTL is what the user relies on.
    println!(
        "run latency: force-release sent -> SIGTERM trapped by the command: {} ms",
        termed_at.saturating_sub(forced_at)
    );
    assert!(termed_at.saturating_sub(forced_at) < 20_000);
}
