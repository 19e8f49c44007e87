//! A real Leasehold server for the client's tests, as the other clients' `test.sh` start one:
//! `leasehold serve` (its embedded Redis) on a free loopback port, with a private data dir and
//! an admin token, stopped when dropped. The binary: `$LEASEHOLD_BIN`, else the workspace's
//! `leasehold` of the same build as this test (beside its `deps/`, wherever the target dir is:
//! built by `cargo build --bin leasehold`, or by a workspace test run). A server with RedLock
//! nodes runs three `redis-server`s of its own (as `clients/redlock-nodes.sh` starts them for
//! the other clients), `redis-server` from the PATH.

#![allow(dead_code, reason = "each test binary uses a part of this module only")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_client::{ApiKey, Client, ClientOptions};

/// The admin token the server is started with.
const ADMIN_TOKEN: &str = "leasehold-client-tests-admin-token";

/// The `leasehold` binary beside this test's own `deps/` folder (`<target>/<profile>/`).
fn same_build() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("a test runs from <target>/<profile>/deps/");
    profile.join("leasehold")
}

pub struct Server {
    child: Child,
    /// The RedLock nodes (none without `--redlock-nodes`).
    nodes: Nodes,
    dir: PathBuf,
    pub url: String,
}

impl Server {
    /// Starts a server (`--min-ttl-ms 300`, as the other clients' main one) and waits until it
    /// is ready.
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// [`start`](Self::start) with three RedLock nodes of its own (`"kind": "redlock"`), each a
    /// `redis-server` on a Unix socket in its data dir.
    pub async fn start_redlock() -> Self {
        Self::start_with(true).await
    }

    async fn start_with(redlock: bool) -> Self {
        let bin = std::env::var_os("LEASEHOLD_BIN").map_or_else(same_build, PathBuf::from);
        assert!(
            bin.is_file(),
            "no server binary at {}: set LEASEHOLD_BIN, or run `cargo build --bin leasehold`",
            bin.display()
        );
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!("leasehold-rs.{}.{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a data dir");
        let nodes = if redlock {
            Nodes::start(&dir)
        } else {
            Nodes(Vec::new())
        };
        let log = std::fs::File::create(dir.join("log")).expect("a log file");
        let mut command = Command::new(&bin);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--min-ttl-ms", "300", "--data-dir"])
            .arg(dir.join("data"));
        if !nodes.0.is_empty() {
            command.args(["--redlock-nodes", &nodes.urls(&dir).join(",")]);
        }
        let child = command
            .env("LEASEHOLD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the server starts");
        let mut server = Self {
            child,
            nodes,
            dir,
            url: String::new(),
        };
        server.url = server.ready().await;
        server
    }

    /// The address the server logged it listens on, once `/readyz` answers 200.
    async fn ready(&mut self) -> String {
        let http = leasehold_client::http_builder().build().expect("http");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the server exited ({status}): {}", self.log());
            }
            let addr = self.log().lines().find_map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).ok()?;
                let listening = record["message"].as_str()?.contains("listening");
                listening.then(|| record["addr"].as_str().map(str::to_owned))?
            });
            if let Some(addr) = addr {
                let url = format!("http://{addr}");
                let ready = http.get(format!("{url}/readyz")).send().await;
                if ready.is_ok_and(|r| r.status() == 200) {
                    return url;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the server was not ready within 30 s: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    pub fn client(&self) -> Client {
        Client::new(self.url.parse().expect("url")).expect("client")
    }

    /// A client that sends the admin token as its key.
    pub fn admin(&self) -> Client {
        let options = ClientOptions {
            api_key: Some(ADMIN_TOKEN.parse::<ApiKey>().expect("a key")),
            ..ClientOptions::default()
        };
        Client::with_options(self.url.parse().expect("url"), &options).expect("client")
    }
}

impl Drop for Server {
    /// Stops the server with SIGTERM (it stops its embedded Redis then), SIGKILL after 10 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The nodes after the server, which would otherwise log each one as lost.
        self.nodes.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// RedLock's three independent masters: `redis-server`s on Unix sockets in the server's dir,
/// with no persistence and no TCP port.
struct Nodes(Vec<Child>);

impl Nodes {
    fn socket(dir: &Path, i: usize) -> PathBuf {
        dir.join(format!("redlock-{i}.sock"))
    }

    /// Starts them and waits until each listens.
    fn start(dir: &Path) -> Self {
        let mut nodes = Self(Vec::new());
        for i in 1..=3 {
            let log = std::fs::File::create(dir.join(format!("redlock-{i}.log"))).expect("a log");
            let node = Command::new("redis-server")
                .args(["--port", "0", "--unixsocket"])
                .arg(Self::socket(dir, i))
                .args([
                    "--unixsocketperm",
                    "700",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(dir)
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts (is it installed?)");
            nodes.0.push(node);
        }
        let start = Instant::now();
        for i in 1..=3 {
            while !Self::socket(dir, i).exists() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "redis-server {i} did not listen within 10 s"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        nodes
    }

    /// Their URLs, for `--redlock-nodes`.
    fn urls(&self, dir: &Path) -> Vec<String> {
        (1..=self.0.len())
            .map(|i| format!("redis+unix://{}", Self::socket(dir, i).display()))
            .collect()
    }

    fn stop(&mut self) {
        for mut node in self.0.drain(..) {
            let _ = node.kill();
            let _ = node.wait();
        }
    }
}

impl Drop for Nodes {
    /// Also when the server failed to start: no `redis-server` outlives the test.
    fn drop(&mut self) {
        self.stop();
    }
}
