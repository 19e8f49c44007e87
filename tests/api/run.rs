//! `leasehold run` against a real server, with real processes and signals: the command gets
//! its lease (a lock or semaphore permits) and its exit code is run's; a busy lock runs nothing;
//! heartbeats keep the lease, and the command never runs on unguarded (a force release, a lease
//! that cannot be renewed, a killed run).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use serde_json::json;
use tokio::process::Child;

use crate::helpers::cli::{
    BIN, assert_lock_free, code, file, finish, has_ended, leasehold, output, pid_of, run_sh,
    stderr, temp_dir, until_ended, wait_for_file,
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

#[tokio::test]
async fn run_hands_the_command_its_lease_and_releases_it_after() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let seen = file(&dir, "env");
    let script = r#"echo "$LEASEHOLD_LOCK $LEASEHOLD_LEASE_ID $LEASEHOLD_FENCING_TOKEN" > "$1""#;

    let out = output(&mut run_sh(
        &app,
        &["--ttl", "60s"],
        "reports",
        script,
        &[&seen],
    ))
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert!(out.stderr.is_empty(), "quiet on success: {}", stderr(&out));
    let env = wait_for_file(&seen).await;
    let env: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(env.len(), 3, "{env:?}");
    assert_eq!(env[0], "reports");
    let first_fence: u64 = env[2].parse().expect("the lease's fencing token");
    let lease = app
        .get(&format!("/v1/locks/reports/leases/{}", env[1]))
        .await;
    lease.assert_status(200);
    assert_eq!(lease.body["state"], "released", "{}", lease.body);
    assert_eq!(lease.body["ttl_ms"], 60_000);
    assert_lock_free(&app, "reports").await;

    let out = output(&mut run_sh(&app, &[], "reports", script, &[&seen])).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let env = wait_for_file(&seen).await;
    let next_fence: u64 = env
        .split_whitespace()
        .nth(2)
        .and_then(|f| f.parse().ok())
        .expect("the next lease's fencing token");
    assert!(
        next_fence > first_fence,
        "the next run fences higher: {env}"
    );
}

#[tokio::test]
async fn run_exits_with_the_commands_exit_code() {
    let app = spawn_app().await;
    let out = output(&mut run_sh(&app, &[], "exits", "exit 7", &[])).await;
    assert_eq!(code(&out), 7, "stderr: {}", stderr(&out));
    assert_lock_free(&app, "exits").await;

    let out = output(
        leasehold(&app, "run")
            .args(["exits", "--", "/nonexistent/command"])
            .arg("arg"),
    )
    .await;
    assert_eq!(code(&out), 127, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent/command"));
    assert_lock_free(&app, "exits").await;
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
async fn run_interrupted_while_waiting_leaves_no_waiter_behind() {
    let app = spawn_app().await;
    let holder = app
        .lease("busy", json!({"ttl_ms": 60_000, "holder": "someone"}))
        .await;
    let dir = temp_dir();
    let ran = file(&dir, "ran");
    let run = run_sh(
        &app,
        &["--wait", "30s"],
        "busy",
        r#"echo ran > "$1""#,
        &[&ran],
    )
    .spawn()
    .expect("start leasehold run");
    app.wait_for_waiters(1).await;

    kill(pid_of(&run), Signal::SIGINT).expect("SIGINT");
    let out = finish(run).await;
    assert_eq!(code(&out), 130, "128 + SIGINT; stderr: {}", stderr(&out));
    app.wait_for_waiters(0).await;
    assert!(!ran.exists(), "the command never ran");
    let lock = app.inspect_lock("busy").await;
    assert_eq!(lock.body["holders"][0]["lease_id"], holder.id.as_str());
}

#[tokio::test]
async fn run_waits_for_the_lock_then_runs() {
    let app = spawn_app().await;
    let holder = app.lease("queue", json!({"ttl_ms": 60_000})).await;
    let dir = temp_dir();
    let seen = file(&dir, "fence");
    let run = run_sh(
        &app,
        &["--wait", "30s"],
        "queue",
        r#"echo "$LEASEHOLD_FENCING_TOKEN" > "$1""#,
        &[&seen],
    )
    .spawn()
    .expect("start leasehold run");
    app.wait_for_waiters(1).await;
    app.release(&holder, true).await.assert_status(200);

    let out = finish(run).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let fence: u64 = wait_for_file(&seen)
        .await
        .trim()
        .parse()
        .expect("a fencing token");
    assert!(
        fence > holder.fencing_token,
        "the waiter fences above the holder"
    );
    assert_lock_free(&app, "queue").await;
}

#[tokio::test]
async fn run_not_acquired_exits_75_without_running_the_command() {
    let app = spawn_app().await;
    app.lease("nightly", json!({"ttl_ms": 60_000, "holder": "cron@db1"}))
        .await;
    let dir = temp_dir();
    let ran = file(&dir, "ran");

    let out = output(&mut run_sh(
        &app,
        &[],
        "nightly",
        r#"echo ran > "$1""#,
        &[&ran],
    ))
    .await;
    assert_eq!(code(&out), 75, "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("cron@db1"),
        "says who holds it: {}",
        stderr(&out)
    );

    let out = output(&mut run_sh(
        &app,
        &["--wait", "300ms", "--conflict-exit-code", "9"],
        "nightly",
        r#"echo ran > "$1""#,
        &[&ran],
    ))
    .await;
    assert_eq!(code(&out), 9, "stderr: {}", stderr(&out));
    assert!(!ran.exists(), "the command never ran");
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
async fn run_on_a_semaphore_takes_permits_and_names_its_holder() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (ready, go) = (file(&dir, "ready"), file(&dir, "go"));
    let run = run_sh(
        &app,
        &["--semaphore", "3", "--permits", "2", "--ttl", "60s"],
        "pool",
        r#"echo "$LEASEHOLD_LEASE_ID" > "$1"; while [ ! -e "$2" ]; do sleep 0.02; done"#,
        &[&ready, &go],
    )
    .env("USER", "alice")
    .spawn()
    .expect("start leasehold run");
    let id = wait_for_file(&ready).await.trim().to_owned();
    let pool = app.get("/v1/semaphores/pool").await;
    pool.assert_status(200);
    assert_eq!(pool.body["used"], 2, "{}", pool.body);
    assert_eq!(pool.body["limit"], 3);
    let holder = &pool.body["holders"][0];
    assert_eq!(holder["lease_id"], id.as_str());
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    assert_eq!(holder["holder"], format!("alice@{host}"));
    assert_eq!(holder["metadata"]["host"], host.as_str());
    assert_eq!(holder["metadata"]["pid"], pid_of(&run).as_raw());
    let command = holder["metadata"]["command"].as_str().expect("command");
    assert!(command.starts_with("sh -c "), "{command}");

    std::fs::write(&go, "").expect("go");
    let out = finish(run).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let pool = app.get("/v1/semaphores/pool").await;
    assert_eq!(pool.body["used"], 0, "the permits came back: {}", pool.body);
}

#[tokio::test]
async fn quiet_runs_say_nothing_when_the_lock_is_busy() {
    let app = spawn_app().await;
    app.lease("cron-job", json!({"ttl_ms": 60_000, "holder": "other"}))
        .await;
    let out = output(&mut run_sh(&app, &["--quiet"], "cron-job", "true", &[])).await;
    assert_eq!(code(&out), 75);
    assert!(out.stderr.is_empty(), "quiet: {}", stderr(&out));
    let out = output(&mut run_sh(&app, &[], "cron-job", "true", &[])).await;
    assert_eq!(code(&out), 75);
    assert!(stderr(&out).contains("other"), "{}", stderr(&out));
}

/// Milliseconds since the epoch, as `date +%s%3N` writes them.
fn epoch_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
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

#[test]
fn run_help_documents_the_exit_codes() {
    let output = std::process::Command::new(BIN)
        .args(["run", "--help"])
        .output()
        .expect("run leasehold");
    let help = String::from_utf8_lossy(&output.stdout);
    for text in [
        "--conflict-exit-code",
        "--kill-grace",
        "--wait",
        "LEASEHOLD_SERVER",
        "75",
        "128+N",
        "127",
    ] {
        assert!(help.contains(text), "--help lacks {text}:\n{help}");
    }
}

#[tokio::test]
async fn run_with_several_locks_holds_them_all_as_one_multilease() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let seen = file(&dir, "env");
    // While the command runs, both locks are held by one multilease.
    let script =
        r#"echo "$LEASEHOLD_LOCK $LEASEHOLD_LEASE_ID $LEASEHOLD_FENCING_TOKENS" > "$1"; sleep 1"#;
    let mut command = leasehold(&app, "run");
    command
        .args(["--ttl", "60s", "--lock", "ledger", "--lock", "stock", "--"])
        .args(["sh", "-c", script, "sh"])
        .arg(&seen);
    let run = command.spawn().expect("start leasehold run");
    let env = wait_for_file(&seen).await;
    let env: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(env.len(), 3, "{env:?}");
    assert_eq!(env[0], "ledger,stock");
    let tokens: Vec<&str> = env[2].split(',').collect();
    assert!(
        tokens.len() == 2 && tokens[0].starts_with("ledger=") && tokens[1].starts_with("stock="),
        "{env:?}"
    );
    for lock in ["ledger", "stock"] {
        let view = app.inspect_lock(lock).await;
        assert_eq!(
            view.body["holders"][0]["multilease"]["lease_id"], env[1],
            "{}",
            view.body
        );
    }
    let out = finish(run).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_lock_free(&app, "ledger").await;
    assert_lock_free(&app, "stock").await;
    let shown = app.get(&format!("/v1/multileases/{}", env[1])).await;
    assert_eq!(shown.body["state"], "released", "{}", shown.body);
    // A busy member: nothing runs, nothing is kept, exit 75.
    let busy = app.lease("stock", json!({"ttl_ms": 60_000})).await;
    let out =
        output(leasehold(&app, "run").args(["--lock", "ledger", "--lock", "stock", "--", "true"]))
            .await;
    assert_eq!(code(&out), 75, "stderr: {}", stderr(&out));
    assert_lock_free(&app, "ledger").await;
    app.release(&busy, true).await.assert_status(200);
}
