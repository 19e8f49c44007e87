//! `leasehold run` against a real server, with real processes and signals: the command gets
//! its lease (a lock, semaphore permits, or several locks as one multilease) and its exit code
//! is run's; a busy lock runs nothing; a run waiting for a lock and interrupted leaves no
//! waiter. How run keeps the command guarded is in `supervision`.

mod supervision;

use nix::sys::signal::{Signal, kill};
use serde_json::json;

use crate::helpers::cli::{
    BIN, assert_lock_free, code, file, finish, leasehold, output, pid_of, run_sh, stderr, temp_dir,
    wait_for_file,
};
use crate::helpers::spawn_app;

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
