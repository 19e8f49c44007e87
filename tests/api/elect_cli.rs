//! The election subcommands against a real server, with real processes: `elect` runs its
//! command only while it leads (LEASEHOLD_TERM in its environment), a second `elect` waits in
//! line until the first's command exits and then runs with a higher term, an admin's end of
//! the term stops the command; `leader` prints the leader (a table, `--json`, exit 3 when
//! nobody leads); `observe --json` prints a line per change.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use crate::helpers::cli::{
    code, file, finish, has_ended, leasehold, leasehold_for_people, output, pid_of, stderr,
    stdout_json, temp_dir, wait_for_file,
};
use crate::helpers::{Reply, TestApp, spawn_app};

/// `leasehold elect [options] NAME --value VALUE -- sh -c SCRIPT sh ARGS..`.
fn elect_sh(
    app: &TestApp,
    name: &str,
    value: &str,
    script: &str,
    args: &[&std::path::Path],
) -> Command {
    let mut command = leasehold(app, "elect");
    command
        .args([
            "--ttl", "30s", "--value", value, name, "--", "sh", "-c", script, "sh",
        ])
        .args(args);
    command
}

async fn election(app: &TestApp, name: &str) -> Value {
    let reply = app.get(&format!("/v1/elections/{name}")).await;
    reply.assert_status(200);
    reply.body
}

/// Waits (bounded) until `n` candidates wait in line.
async fn until_waiting(app: &TestApp, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while election(app, name).await["candidates_waiting"] != n {
        assert!(Instant::now() < deadline, "{n} never waited in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn campaign(app: &TestApp, name: &str, value: &str) -> Reply {
    let url = app.url(&format!("/v1/elections/{name}/candidates"));
    app.send(
        app.http
            .post(url)
            .json(&json!({"value": value, "holder": "node-a"})),
    )
    .await
}

/// The term an `elect` command wrote, with its election and candidate id.
fn written_term(text: &str) -> (String, String, u64) {
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{text}");
    let term = words[2].parse().expect("LEASEHOLD_TERM is a number");
    (words[0].to_owned(), words[1].to_owned(), term)
}

const WRITE_TERM: &str =
    r#"echo "$LEASEHOLD_ELECTION $LEASEHOLD_CANDIDATE_ID $LEASEHOLD_TERM" > "$1""#;

#[tokio::test]
async fn elect_runs_the_command_while_it_leads_and_the_next_waits_for_it_with_a_higher_term() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (seen_a, go_a, seen_b) = (file(&dir, "a"), file(&dir, "go-a"), file(&dir, "b"));
    let script_a = format!(r#"{WRITE_TERM}; while [ ! -f "$2" ]; do sleep 0.05; done"#);
    let first = elect_sh(&app, "jobs", "10.0.0.1", &script_a, &[&seen_a, &go_a])
        .spawn()
        .expect("start the first elect");
    let (election_a, candidate_a, term_a) = written_term(&wait_for_file(&seen_a).await);
    assert_eq!(election_a, "jobs");
    let now = election(&app, "jobs").await;
    assert_eq!(now["leader"]["value"], "10.0.0.1", "{now}");
    assert_eq!(now["leader"]["candidate_id"], candidate_a.as_str());

    let second = elect_sh(
        &app,
        "jobs",
        "10.0.0.2",
        &format!("{WRITE_TERM}; exit 7"),
        &[&seen_b],
    )
    .spawn()
    .expect("start the second elect");
    until_waiting(&app, "jobs", 1).await;
    assert!(
        !seen_b.exists(),
        "the second command waits while the first leads"
    );

    std::fs::write(&go_a, "").expect("let the first command end");
    let out = finish(first).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let (_, candidate_b, term_b) = written_term(&wait_for_file(&seen_b).await);
    assert!(term_b > term_a, "{term_b} > {term_a}");
    assert_ne!(candidate_b, candidate_a);
    let out = finish(second).await;
    assert_eq!(
        code(&out),
        7,
        "elect exits with its command's code: {}",
        stderr(&out)
    );
    let after = election(&app, "jobs").await;
    assert_eq!(
        after["leader"],
        Value::Null,
        "resigned when the command exited: {after}"
    );
}

#[tokio::test]
async fn an_admin_ending_the_term_stops_elects_command() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let pid_file = file(&dir, "pid");
    let elect = elect_sh(
        &app,
        "ended",
        "a",
        r#"sleep 300 & echo $! > "$1"; wait"#,
        &[&pid_file],
    )
    .spawn()
    .expect("start elect");
    let grandchild: i32 = wait_for_file(&pid_file)
        .await
        .trim()
        .parse()
        .expect("a pid");
    let ended = app
        .admin(reqwest::Method::DELETE, "/v1/admin/elections/ended", None)
        .await;
    ended.assert_status(200);
    let started = Instant::now();
    let out = finish(elect).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped at once, not at the next heartbeat"
    );
    assert_ne!(code(&out), 0, "a command cut short is no success");
    assert!(has_ended(grandchild), "the whole group was stopped");
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
}

#[tokio::test]
async fn leader_prints_a_table_or_the_json_and_exits_3_when_nobody_leads() {
    let app = spawn_app().await;
    let out = output(leasehold_for_people(&app, "leader").arg("nobody")).await;
    assert_eq!(code(&out), 3, "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nobody leads"));

    campaign(&app, "led", "10.0.0.9:80")
        .await
        .assert_status(201);
    let out = output(leasehold_for_people(&app, "leader").arg("led")).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    for text in ["election led: led, term", "LEADER", "10.0.0.9:80", "node-a"] {
        assert!(table.contains(text), "{text} in:\n{table}");
    }
    let out = output(leasehold(&app, "leader").args(["--json", "led"])).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let json = stdout_json(&out);
    assert_eq!(json["leader"]["value"], "10.0.0.9:80", "{json}");
    assert_eq!(json["election"], "led");
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .expect("read")
        .expect("observe goes on");
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON line: {line}"))
}

#[tokio::test]
async fn observe_json_prints_a_line_per_change_until_ctrl_c() {
    let app = spawn_app().await;
    let mut observe = leasehold(&app, "observe")
        .args(["--json", "watched"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start observe");
    let mut lines = BufReader::new(observe.stdout.take().expect("stdout")).lines();
    let first = next_line(&mut lines).await;
    assert_eq!(first["event"], "vacant", "{first}");

    let led = campaign(&app, "watched", "one").await;
    led.assert_status(201);
    let term = led.body["term"].as_u64().expect("a term");
    let line = next_line(&mut lines).await;
    assert_eq!(line["event"], "leader", "{line}");
    assert_eq!(
        (line["term"].as_u64(), &line["value"]),
        (Some(term), &json!("one"))
    );
    assert!(line["id"].is_string(), "each line has its id: {line}");

    let location = led.header("location").expect("a Location").to_owned();
    let token = led.str("token");
    let put = app
        .http
        .put(app.url(&format!("{location}/value")))
        .bearer_auth(&token)
        .json(&json!({"value": "two"}));
    app.send(put).await.assert_status(200);
    let line = next_line(&mut lines).await;
    assert_eq!(
        (line["term"].as_u64(), &line["value"]),
        (Some(term), &json!("two"))
    );

    let resign = app.http.delete(app.url(&location)).bearer_auth(&token);
    app.send(resign).await.assert_status(200);
    let line = next_line(&mut lines).await;
    assert_eq!(line["event"], "vacant", "{line}");
    assert_eq!(line["term"].as_u64(), Some(term));

    kill(pid_of(&observe), Signal::SIGINT).expect("Ctrl-C");
    let out = finish(observe).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
}

#[test]
fn help_lists_the_election_subcommands() {
    let out = std::process::Command::new(crate::helpers::cli::BIN)
        .arg("--help")
        .output()
        .expect("run leasehold");
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["elect", "leader", "observe"] {
        assert!(help.contains(word), "--help lacks {word}:\n{help}");
    }
    let out = std::process::Command::new(crate::helpers::cli::BIN)
        .args(["help", "elect"])
        .output()
        .expect("run leasehold");
    let help = String::from_utf8_lossy(&out.stdout);
    for text in ["--value <VALUE>", "LEASEHOLD_TERM", "Exit codes"] {
        assert!(help.contains(text), "help elect lacks {text}:\n{help}");
    }
}
