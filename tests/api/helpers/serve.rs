//! A `leasehold serve` process of the real binary, for the tests of the binary itself: started
//! on a data dir of its own (the embedded Redis), its logs kept, stopped with SIGTERM or
//! killed; and the redis-server processes it leaves.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::children;
use super::cli::BIN;

/// A `leasehold serve` process on an ephemeral port, with JSON logs on stderr.
pub struct Serve {
    pub child: Child,
    pub addr: String,
    /// Everything the server logged so far.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Serve {
    pub fn start(data_dir: &std::path::Path) -> Self {
        Self::start_with(data_dir, &[])
    }

    /// [`Serve::start`] with more flags (`--redis-url ...`, say).
    pub fn start_with(data_dir: &std::path::Path, args: &[&str]) -> Self {
        let mut command = serve_command(data_dir);
        command.args(args);
        command.env("RUST_LOG", "debug");
        // (Not from this thread: a test starts a server from a thread that ends before it.)
        let mut child = children::spawn(command).expect("start leasehold");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let addr = loop {
            let Some(line) = lines.next() else {
                panic!(
                    "leasehold exited before listening:\n{}",
                    log.lock().expect("log")
                );
            };
            let line = line.expect("line");
            log.lock().expect("log").push_str(&format!("{line}\n"));
            if let Ok(entry) = serde_json::from_str::<Value>(&line)
                && entry["message"] == "leasehold is listening"
            {
                break entry["addr"].as_str().expect("addr").to_owned();
            }
        };
        // Keep draining stderr so the child never blocks on a full pipe.
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().expect("log").push_str(&format!("{line}\n"));
            }
        });
        Self { child, addr, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
        terminate(&mut self.child, Duration::from_secs(15))
    }
}

/// `leasehold serve` on an ephemeral port and `data_dir`, JSON logs on a piped stderr, with
/// nothing from this environment (no Redis URL, no admin token); killed when the test process
/// dies (see `children` for the thread to start it from).
pub fn serve_command(data_dir: &std::path::Path) -> Command {
    let mut command = children::guarded(BIN);
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--data-dir",
        ])
        .arg(data_dir)
        .env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Sends SIGTERM and waits up to `within` for the process to exit.
pub fn terminate(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "leasehold did not stop on SIGTERM within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data dir as `serve` wants one: this user's, closed to others (0700).
pub fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    tempfile::Builder::new()
        .prefix("lh-data")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("temp dir")
}

pub fn http_client() -> reqwest::Client {
    leasehold::client::http_builder()
        .build()
        .expect("an HTTP client")
}

pub async fn acquire(http: &reqwest::Client, serve: &Serve, lock: &str) -> Value {
    let reply = http
        .post(serve.url(&format!("/v1/locks/{lock}/leases")))
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await
        .expect("request");
    assert_eq!(reply.status(), 201);
    reply.json().await.expect("json")
}

/// A new lease on `lock` is refused: a lease taken before a restart survived it.
pub async fn assert_held(http: &reqwest::Client, serve: &Serve, lock: &str) {
    let reply = http
        .post(serve.url(&format!("/v1/locks/{lock}/leases")))
        .send()
        .await
        .expect("request");
    assert_eq!(reply.status(), 409, "{lock} is still held");
}

/// The live redis-server processes whose command line names `dir` (the embedded one shows its
/// socket there); zombies (already exited) have no command line.
pub fn redis_servers_in(dir: &std::path::Path) -> Vec<Pid> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            (cmdline.starts_with("redis-server") && cmdline.contains(&dir))
                .then(|| Pid::from_raw(pid))
        })
        .collect()
}

/// Waits up to 10 s for `check`.
pub fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
