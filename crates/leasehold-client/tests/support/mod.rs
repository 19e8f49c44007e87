//! A real Leasehold server for the client's tests, as the other clients' `test.sh` start one:
//! `leasehold serve` (its embedded Redis) on a free loopback port, with a private data dir and
//! an admin token, stopped when dropped. The binary: `$LEASEHOLD_BIN`, else the workspace's
//! `leasehold` of the same build as this test (beside its `deps/`, wherever the target dir is:
//! built by `cargo build --bin leasehold`, or by a workspace test run).

use std::path::PathBuf;
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
    dir: PathBuf,
    pub url: String,
}

impl Server {
    /// Starts a server (`--min-ttl-ms 300`, as the other clients' main one) and waits until it
    /// is ready.
    pub async fn start() -> Self {
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
        let log = std::fs::File::create(dir.join("log")).expect("a log file");
        let child = Command::new(&bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--min-ttl-ms", "300", "--data-dir"])
            .arg(dir.join("data"))
            .env("LEASEHOLD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the server starts");
        let mut server = Self {
            child,
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
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
