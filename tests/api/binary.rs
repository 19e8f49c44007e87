//! The `leasehold` binary itself: embedded Redis by default, clean shutdown, clear failures.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::helpers::serve::{
    Serve, acquire, assert_held, eventually, http_client, private_dir, redis_servers_in,
    serve_command, terminate,
};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

#[tokio::test]
async fn serve_runs_its_own_redis_with_persistence_and_stops_it() {
    let data = private_dir();
    let http = http_client();

    let serve = Serve::start(data.path());
    let first = acquire(&http, &serve, "jobs").await;
    let first_fence = first["fencing_token"].as_u64().expect("a fencing token");
    let lease_token = first["token"].as_str().expect("token").to_owned();
    let heartbeat = http
        .post(serve.url(&format!(
            "/v1/locks/jobs/leases/{}/heartbeat",
            first["lease_id"].as_str().expect("id")
        )))
        .bearer_auth(&lease_token)
        .send()
        .await
        .expect("heartbeat");
    assert_eq!(heartbeat.status(), 200);
    let token = admin_token_of(data.path());
    assert!(data.path().join("redis.sock").exists());
    embedded_redis_never_evicts(data.path()).await;
    let addr = serve.addr.clone();
    let healthcheck = || {
        Command::new(BIN)
            .args(["healthcheck", "--listen", &addr])
            .status()
    };
    assert!(
        healthcheck().expect("run healthcheck").success(),
        "healthcheck of a live server"
    );
    let log = serve.log.clone();
    let status = serve.terminate();
    assert!(status.success(), "exit status {status}");
    let log = log.lock().expect("log").clone();
    assert!(
        log.contains("request_id"),
        "debug logs were captured:\n{log}"
    );
    assert!(
        !log.contains(token.trim()) && log.contains("admin-token"),
        "the admin token's path is printed, never the token:\n{log}"
    );
    assert!(
        !log.contains(&lease_token[4..]),
        "a lease token reached the log"
    );
    // redis-server removes its socket when it shuts down cleanly.
    assert!(
        !data.path().join("redis.sock").exists(),
        "the child redis-server was stopped"
    );

    // The AOF kept the lock and its fencing counter across the restart.
    let serve = Serve::start(data.path());
    assert_held(&http, &serve, "jobs").await;
    let lock: Value = http
        .get(serve.url("/v1/locks/jobs"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(lock["fencing_counter"], first_fence);
    let other = acquire(&http, &serve, "other").await["fencing_token"].as_u64();
    assert!(
        other.is_some_and(|f| f > first_fence),
        "fences follow the clock: {other:?}"
    );
    assert!(serve.terminate().success());
}

/// The admin token `leasehold serve` wrote in `data`, whose file only its user may read.
fn admin_token_of(data: &Path) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let token = std::fs::read_to_string(data.join("admin-token")).expect("admin token file");
    assert!(token.trim().starts_with("lha_"));
    let mode = std::fs::metadata(data.join("admin-token"))
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the admin token file is the user's alone"
    );
    token
}

/// The embedded Redis stops taking writes when full instead of evicting held locks.
async fn embedded_redis_never_evicts(data: &Path) {
    let mut redis = redis::Client::open(format!(
        "redis+unix://{}",
        data.join("redis.sock").display()
    ))
    .expect("url")
    .get_multiplexed_async_connection()
    .await
    .expect("connect");
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory*")
        .query_async(&mut redis)
        .await
        .expect("config");
    let policy: std::collections::HashMap<_, _> = policy
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    assert_eq!(policy["maxmemory-policy"], "noeviction");
    assert_eq!(policy["maxmemory"], (512u64 << 20).to_string());
}

#[tokio::test]
async fn a_killed_server_takes_its_redis_with_it_and_a_restart_waits_for_that() {
    let data = private_dir();
    let http = http_client();
    let mut first = Serve::start(data.path());
    acquire(&http, &first, "jobs").await;
    let old = redis_servers_in(data.path());
    assert_eq!(old.len(), 1, "one embedded redis-server: {old:?}");
    // Frozen, the child cannot act on the SIGTERM its parent's death sends it until it is
    // let go on: meanwhile a new server on the same data dir must not start a second Redis
    // on the same AOF.
    kill(old[0], Signal::SIGSTOP).expect("SIGSTOP");
    first.child.kill().expect("SIGKILL leasehold");
    first.child.wait().expect("reap leasehold");
    let dir = data.path().to_owned();
    let second = std::thread::spawn(move || Serve::start(&dir));
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        redis_servers_in(data.path()),
        old,
        "no second redis-server while the first one lives"
    );
    assert!(
        !second.is_finished(),
        "the new server waits for the data dir"
    );
    kill(old[0], Signal::SIGCONT).expect("SIGCONT");
    eventually("the orphaned redis-server exits on its own", || {
        !redis_servers_in(data.path()).contains(&old[0])
    });
    let second = second.join().expect("the new server started");
    assert!(
        second
            .log
            .lock()
            .expect("log")
            .contains("the data dir is locked"),
        "the wait was logged"
    );
    // Nothing was lost: the first server's lease is still there, from the AOF the first Redis
    // finished before it exited.
    assert_held(&http, &second, "jobs").await;
    assert_eq!(redis_servers_in(data.path()).len(), 1);
    assert!(second.terminate().success());
    assert!(redis_servers_in(data.path()).is_empty());
}

#[test]
fn a_stop_while_waiting_for_a_locked_data_dir_ends_the_wait() {
    let data = private_dir();
    // The dir's lock held elsewhere, as by the redis-server of a server that died.
    let lock = std::fs::File::create(data.path().join("leasehold.lock")).expect("lock file");
    lock.try_lock().expect("take the data dir's lock");
    let mut child = serve_command(data.path())
        .env("RUST_LOG", "info")
        .spawn()
        .expect("start leasehold");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let waiting = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("the data dir is locked"));
    assert!(waiting, "the server said it waits for the lock");
    std::thread::spawn(move || for _ in lines {});

    // Without a look at the stop, the wait would run its 10 s and end in "in use" (exit 1).
    let status = terminate(&mut child, Duration::from_secs(8));
    assert!(status.success(), "a stop, not a failure: {status}");
    assert!(redis_servers_in(data.path()).is_empty());
}

#[test]
fn serve_without_redis_server_says_how_to_install_it() {
    let data = private_dir();
    let output = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env("PATH", data.path())
        .env_remove("LEASEHOLD_REDIS_URL")
        .output()
        .expect("run leasehold");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().expect("an error line");
    assert!(
        last.contains("apt-get install redis-server"),
        "stderr: {stderr}"
    );
    assert!(last.contains("--redis-url"), "stderr: {stderr}");
}

#[test]
fn help_documents_every_flag_and_its_env_var() {
    let output = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run leasehold");
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen",
        "--redis-url",
        "--default-ttl-ms",
        "--min-ttl-ms",
        "--max-ttl-ms",
        "--max-wait-ms",
        "--admin-token",
        "--data-dir",
        "LEASEHOLD_REDIS_URL",
        "LEASEHOLD_ADMIN_TOKEN",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[tokio::test]
async fn every_log_line_of_a_request_carries_its_request_id() {
    let data = private_dir();
    let serve = Serve::start(data.path());
    let http = http_client();
    // Settle: the subscriber connects and the function library is loaded, each logged by its
    // own task in either order; then only our request runs.
    let ready = |serve: &Serve| {
        let log = serve.log.lock().expect("log");
        log.contains("subscribed to expiries") && log.contains("loaded the Lua function library")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready(&serve) {
        assert!(
            std::time::Instant::now() < deadline,
            "startup did not finish:\n{}",
            serve.log.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let start = serve.log.lock().expect("log").len();
    let request_id = "req-7f3a9c0e-log-test";
    let reply = http
        .post(serve.url("/v1/locks/logged/leases"))
        .header("x-request-id", request_id)
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await
        .expect("request");
    assert_eq!(reply.status(), 201);
    assert_eq!(reply.headers()["x-request-id"], request_id);
    let lease: Value = reply.json().await.expect("json");
    let token = lease["token"].as_str().expect("token").to_owned();
    // The trace layer logs the response before the client gets it; wait for stderr to drain.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let log = serve.log.lock().expect("log")[start..].to_owned();
        if log.contains("finished processing request") {
            break log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no response log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let lines: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    // Background tasks (the expiry sweeper, the subscriber, the clock, the publisher) log on
    // their own schedule and belong to no request: a line of theirs may fall in the window.
    let background = |line: &Value| {
        line["target"].as_str().is_some_and(|t| {
            [
                "leasehold::locks::feed::sweeper",
                "leasehold::events",
                "leasehold::locks::clock",
                "leasehold::locks::publisher",
            ]
            .contains(&t)
        })
    };
    let lines: Vec<Value> = lines.into_iter().filter(|l| !background(l)).collect();
    assert!(lines.len() >= 2, "{lines:?}");
    for line in &lines {
        assert_eq!(
            line["span"]["request_id"], request_id,
            "a log line of the request lacks its id: {line}"
        );
        assert!(
            !line.to_string().contains(&token[4..]),
            "token logged: {line}"
        );
    }
    assert!(serve.terminate().success());
}

#[test]
fn a_data_dir_others_may_enter_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let data = private_dir();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let output = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_ADMIN_TOKEN")
        .output()
        .expect("run leasehold");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chmod 700"), "{stderr}");
    assert!(
        !data.path().join("admin-token").exists(),
        "nothing was written there"
    );
}

#[tokio::test]
async fn the_admin_token_can_come_from_a_file() {
    use std::io::Write as _;
    let data = private_dir();
    let secret = data.path().join("secret");
    let mut file = std::fs::File::create(&secret).expect("create");
    writeln!(file, "from-a-file-0123456789").expect("write");
    let mut child = serve_command(data.path())
        .arg("--admin-token-file")
        .arg(&secret)
        .spawn()
        .expect("start");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("a line").expect("line");
        if let Ok(entry) = serde_json::from_str::<Value>(&line)
            && entry["message"] == "leasehold is listening"
        {
            break entry["addr"].as_str().expect("addr").to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let http = http_client();
    http.post(format!("http://{addr}/v1/locks/stuck/leases"))
        .send()
        .await
        .expect("acquire");
    let forced = http
        .delete(format!("http://{addr}/v1/admin/locks/stuck"))
        .bearer_auth("from-a-file-0123456789")
        .send()
        .await
        .expect("force release");
    assert_eq!(forced.status(), 200);
    assert!(
        !data.path().join("admin-token").exists(),
        "no token was generated"
    );
    let _ = kill(
        Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        Signal::SIGTERM,
    );
    let _ = child.wait();
}

#[test]
fn the_startup_log_says_where_the_dashboard_is() {
    let data = private_dir();
    let serve = Serve::start(data.path());
    let log = serve.log.lock().expect("log").clone();
    let listening = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|entry| entry["message"] == "leasehold is listening")
        .expect("the listening line");
    assert_eq!(listening["dashboard"], format!("http://{}/", serve.addr));
}
