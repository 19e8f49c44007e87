//! The `leasehold` binary's client subcommands against a test server, and the processes they
//! start: commands blind to the environment's LEASEHOLD_* variables, bounded waits for their
//! exit and for the files their shell children write, and whether a process has ended.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::helpers::{TestApp, children};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold <subcommand> --server <the test server>`, blind to any LEASEHOLD_* variables of
/// the environment the tests run in, and killed if the test gives up on it or dies (when
/// started, as tests do, from the test's own thread: see `children`). `status` prints the
/// server's JSON (`--json`), as scripts ask for it.
pub(crate) fn leasehold(app: &TestApp, subcommand: &str) -> Command {
    let mut command = leasehold_for_people(app, subcommand);
    if subcommand == "status" {
        command.arg("--json");
    }
    command
}

/// `leasehold <subcommand> --server <the test server>` as a person types it (tables).
pub(crate) fn leasehold_for_people(app: &TestApp, subcommand: &str) -> Command {
    let mut command = Command::from(children::guarded(BIN));
    command
        .arg(subcommand)
        .arg("--server")
        .arg(app.url(""))
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_TOKEN")
        .env_remove("LEASEHOLD_HOLDER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// `leasehold run [options] NAME -- sh -c SCRIPT sh ARGS..`: the script sees ARGS as $1, $2...
pub(crate) fn run_sh(
    app: &TestApp,
    options: &[&str],
    lock: &str,
    script: &str,
    args: &[&Path],
) -> Command {
    let mut command = leasehold(app, "run");
    command
        .args(options)
        .args([lock, "--", "sh", "-c", script, "sh"])
        .args(args);
    command
}

/// Waits (bounded) for a process to exit and reads its output.
pub(crate) async fn finish(child: Child) -> Output {
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the process exits within 30 s")
        .expect("output")
}

pub(crate) async fn output(command: &mut Command) -> Output {
    finish(command.spawn().expect("start leasehold")).await
}

pub(crate) fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "leasehold died of a signal ({}); stderr: {}",
            output.status,
            stderr(output)
        )
    })
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn stdout_json(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().count(), 1, "one line of JSON: {text}");
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("stdout is not JSON: {text}"))
}

pub(crate) fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id().expect("running")).expect("pid"))
}

/// Waits (bounded) until the shell child has written a whole line to `path`.
pub(crate) async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} was not written within 10 s",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` has stopped running: gone, or a zombie nobody has reaped yet (an orphan is
/// reparented to init, and this machine's init does not reap).
pub(crate) fn has_ended(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

/// Waits up to 5 s for process `pid` to end; fails with `what` otherwise.
pub(crate) async fn until_ended(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !has_ended(pid) {
        assert!(Instant::now() < deadline, "{what} (pid {pid})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lh-cli")
        .tempdir()
        .expect("temp dir")
}

pub(crate) fn file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

pub(crate) async fn assert_lock_free(app: &TestApp, lock: &str) {
    let lock = app.inspect_lock(lock).await;
    lock.assert_status(200);
    assert_eq!(lock.body["held"], false, "{}", lock.body);
}
