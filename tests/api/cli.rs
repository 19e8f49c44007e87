//! The shell subcommands against a real server: the scripting commands' acquire → heartbeat →
//! status → release round trip (locks and semaphore permits), `--quiet`, `hold` (until Ctrl-C,
//! around a shell), `ls`, `status` tables, completions, help that matches the server, and the
//! API key they send.

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use serde_json::{Value, json};

use crate::helpers::cli::{
    BIN, assert_lock_free, code, file, finish, leasehold, leasehold_for_people, output, pid_of,
    stderr, stdout_json, temp_dir, wait_for_file,
};
use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Waits (bounded) until the lock `name` is held, and returns its inspection.
async fn held(app: &TestApp, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = app.inspect_lock(name).await;
        if lock.body["held"] == true {
            return lock.body;
        }
        assert!(Instant::now() < deadline, "{name} was never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An executable shell script in `dir`, to stand in for `$SHELL`.
fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> std::path::PathBuf {
    let path = file(dir, name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[tokio::test]
async fn scripts_acquire_heartbeat_inspect_and_release() {
    let app = spawn_app().await;

    let out = output(leasehold(&app, "acquire").args([
        "--ttl",
        "60s",
        "--holder",
        "deploy.sh",
        "deploy",
    ]))
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let lease = stdout_json(&out);
    assert_eq!(lease["holder"], "deploy.sh");
    assert!(lease["fencing_token"].as_u64().is_some_and(|f| f > 0));
    let id = lease["lease_id"].as_str().expect("lease_id").to_owned();
    let token = lease["token"].as_str().expect("token").to_owned();

    let out = output(leasehold(&app, "acquire").args(["--token-only", "deploy"])).await;
    assert_eq!(code(&out), 75, "held by the script");
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("lock_held"),
        "stderr: {}",
        stderr(&out)
    );

    let out = output(
        leasehold(&app, "heartbeat")
            .env("LEASEHOLD_TOKEN", &token)
            .args(["deploy", &id]),
    )
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let renewal = stdout_json(&out);
    assert_eq!(renewal["lease_id"], id.as_str());
    assert_eq!(renewal["ttl_ms"], 60_000);

    let out = output(leasehold(&app, "status").arg("deploy")).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(stdout_json(&out)["holders"][0]["lease_id"], id.as_str());
    let out = output(leasehold(&app, "status").args(["deploy", &id])).await;
    assert_eq!(stdout_json(&out)["state"], "held");

    let out = output(leasehold(&app, "release").args(["--token", &token, "deploy", &id])).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(stdout_json(&out)["released"], true);
    let out = output(leasehold(&app, "status").args(["deploy", &id])).await;
    assert_eq!(stdout_json(&out)["state"], "released");

    let out = output(
        leasehold(&app, "heartbeat")
            .env("LEASEHOLD_TOKEN", &token)
            .args(["deploy", &id]),
    )
    .await;
    assert_eq!(code(&out), 1);
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("lease_lost"),
        "stderr: {}",
        stderr(&out)
    );

    let out = output(leasehold(&app, "status").arg("never-taken")).await;
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("lock_not_found"),
        "stderr: {}",
        stderr(&out)
    );

    let out = output(leasehold(&app, "acquire").args(["--token-only", "deploy"])).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.starts_with("lht_") && printed.lines().count() == 1,
        "just the token: {printed}"
    );
}

#[tokio::test]
async fn scripts_take_permits_and_heartbeat_and_release_them() {
    let app = spawn_app().await;
    let out = output(leasehold(&app, "acquire").args([
        "--semaphore",
        "2",
        "--permits",
        "2",
        "--holder",
        "batch",
        "gpus",
    ]))
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let lease = stdout_json(&out);
    assert_eq!(lease["permits"], 2);
    assert_eq!(lease["holder"], "batch");
    let (id, token) = (
        lease["lease_id"].as_str().expect("id").to_owned(),
        lease["token"].as_str().expect("token").to_owned(),
    );
    // No permit left: busy, and --quiet says nothing about it.
    let out =
        output(leasehold(&app, "acquire").args(["--semaphore", "2", "--quiet", "gpus"])).await;
    assert_eq!(code(&out), 75);
    assert!(out.stderr.is_empty(), "quiet: {}", stderr(&out));

    let out = output(
        leasehold(&app, "heartbeat")
            .env("LEASEHOLD_TOKEN", &token)
            .args(["gpus", &id]),
    )
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let out = output(leasehold(&app, "status").args(["gpus", &id])).await;
    assert_eq!(stdout_json(&out)["state"], "held");
    let out = output(
        leasehold(&app, "release")
            .env("LEASEHOLD_TOKEN", &token)
            .args(["gpus", &id]),
    )
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(app.get("/v1/semaphores/gpus").await.body["used"], 0);
}

#[tokio::test]
async fn status_tables_show_holders_and_busy_semaphores() {
    let app = spawn_app().await;
    let lease = app
        .lease("deploy", json!({"ttl_ms": 60_000, "holder": "ci@runner"}))
        .await;
    let out = output(leasehold_for_people(&app, "status").arg("deploy")).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("lock deploy: held, reentrant"), "{text}");
    assert!(
        text.contains("HOLDER") && text.contains("ci@runner"),
        "{text}"
    );
    assert!(text.contains(&lease.id) && text.contains(&lease.fencing_token.to_string()));

    let out = output(leasehold_for_people(&app, "status").args(["deploy", &lease.id])).await;
    let text = stdout(&out);
    assert!(text.contains("state         held"), "{text}");

    app.permits(
        "pool",
        json!({"limit": 2, "permits": 2, "holder": "trainer"}),
    )
    .await;
    let out = output(leasehold_for_people(&app, "status").arg("pool")).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("semaphore pool: 2 of 2 permits in use, 0 free"),
        "a busy semaphore is not free: {text}"
    );
    assert!(text.contains("trainer"), "{text}");
    let out = output(leasehold(&app, "status").arg("pool")).await;
    assert_eq!(stdout_json(&out)["used"], 2);

    let out = output(leasehold_for_people(&app, "status").arg("never-taken")).await;
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("lock_not_found"), "{}", stderr(&out));
}

#[tokio::test]
async fn ls_lists_the_live_names() {
    let app = spawn_app().await;
    app.lease("etl:daily", json!({"holder": "cron@db1"})).await;
    app.permits("etl:slots", json!({"limit": 5, "permits": 2}))
        .await;
    app.lease("web", json!({})).await;

    let out = output(leasehold_for_people(&app, "ls").arg("etl:")).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two names: {text}");
    assert!(lines[0].starts_with("NAME"), "{text}");
    assert!(lines[1].starts_with("etl:daily") && lines[1].contains("cron@db1"));
    assert!(lines[2].starts_with("etl:slots") && lines[2].contains("2/5 permits"));

    let out = output(leasehold(&app, "ls").arg("--json")).await;
    let page = stdout_json(&out);
    assert_eq!(page["locks"].as_array().map(Vec::len), Some(3), "{page}");
}

#[tokio::test]
async fn hold_keeps_the_lock_until_ctrl_c() {
    let app = spawn_app().await;
    let hold = leasehold(&app, "hold")
        .args(["--ttl", "1500ms", "maintenance"])
        .spawn()
        .expect("start leasehold hold");
    let lock = held(&app, "maintenance").await;
    // Past its TTL: the heartbeats keep it.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let still = app.inspect_lock("maintenance").await;
    assert_eq!(
        still.body["holders"][0]["lease_id"],
        lock["holders"][0]["lease_id"]
    );

    kill(pid_of(&hold), Signal::SIGINT).expect("SIGINT");
    let out = finish(hold).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("holding maintenance"),
        "{}",
        stderr(&out)
    );
    assert_lock_free(&app, "maintenance").await;
}

#[tokio::test]
async fn hold_ends_at_once_when_the_lease_is_lost() {
    let app = spawn_app().await;
    let hold = leasehold(&app, "hold")
        .args(["--ttl", "60s", "fragile"])
        .spawn()
        .expect("start leasehold hold");
    held(&app, "fragile").await;
    app.force_release("fragile", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let out = finish(hold).await;
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("lease lost"), "{}", stderr(&out));
}

#[tokio::test]
async fn hold_shell_runs_the_shell_under_the_lock() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let seen = file(&dir, "seen");
    let shell = script(
        &dir,
        "shell",
        r#"echo "$LEASEHOLD_LOCK $LEASEHOLD_FENCING_TOKEN" > "$SEEN"; exit 4"#,
    );
    let out = output(
        leasehold(&app, "hold")
            .args(["--shell", "--quiet", "console"])
            .env("SHELL", &shell)
            .env("SEEN", &seen),
    )
    .await;
    assert_eq!(code(&out), 4, "the shell's code; stderr: {}", stderr(&out));
    assert!(out.stderr.is_empty(), "quiet: {}", stderr(&out));
    let text = wait_for_file(&seen).await;
    assert!(text.starts_with("console "), "{text}");
    assert_lock_free(&app, "console").await;

    // A lost lease hangs the shell up (interactive shells ignore SIGTERM).
    let (ready, hup) = (file(&dir, "ready"), file(&dir, "hup"));
    let shell = script(
        &dir,
        "waiting-shell",
        r#"trap 'echo hup > "$HUP"; exit 9' HUP; echo ready > "$READY"; while :; do sleep 0.02; done"#,
    );
    let hold = leasehold(&app, "hold")
        .args(["--shell", "console"])
        .env("SHELL", &shell)
        .env("READY", &ready)
        .env("HUP", &hup)
        .spawn()
        .expect("start leasehold hold --shell");
    wait_for_file(&ready).await;
    app.force_release("console", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let out = finish(hold).await;
    assert_eq!(code(&out), 9, "the trap's code; stderr: {}", stderr(&out));
    assert_eq!(wait_for_file(&hup).await, "hup\n");
}

#[test]
fn completions_and_help_match_the_commands() {
    let out = std::process::Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .expect("run leasehold");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for word in ["_leasehold", "hold", "--semaphore", "completions"] {
        assert!(text.contains(word), "the bash completion lacks {word}");
    }
    let out = std::process::Command::new(BIN)
        .args(["help", "run"])
        .output()
        .expect("run leasehold");
    let help = String::from_utf8_lossy(&out.stdout);
    for text in [
        "--semaphore <N>",
        "--permits <K>",
        "--quiet",
        "user@host",
        "not_reentrant",
    ] {
        assert!(help.contains(text), "help run lacks {text}:\n{help}");
    }
    assert!(
        help.contains("the server takes every one"),
        "help run says every kind works:\n{help}"
    );
}

#[tokio::test]
async fn ls_and_status_send_the_api_key_and_see_its_tenant_only() {
    let app = spawn_app().await;
    let (_, secret) = app
        .create_key(json!({"name": "cli", "tenant": "a", "roles": ["client", "reader"]}))
        .await;
    app.with_key(&secret).lease("a-job", json!({})).await;
    app.with_key(ADMIN_TOKEN)
        .lease("default-job", json!({}))
        .await;

    let out = output(
        leasehold(&app, "ls")
            .arg("--json")
            .env("LEASEHOLD_API_KEY", &secret),
    )
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let names: Vec<Value> = stdout_json(&out)["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(names, [json!("a-job")], "tenant a's locks only");

    let out = output(
        leasehold(&app, "status")
            .arg("a-job")
            .env("LEASEHOLD_API_KEY", &secret),
    )
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(stdout_json(&out)["held"], true);

    // Keys exist now, so a CLI without one is refused, and says why.
    let out = output(leasehold(&app, "ls").env_remove("LEASEHOLD_API_KEY")).await;
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("api_key_required"),
        "{}",
        stderr(&out)
    );
}
