//! The bench's own redis-server (Unix socket) and `leasehold serve` process (this build's
//! binary), both stopped (and killed if this process dies first) at the end.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Child;

pub const ADMIN_TOKEN: &str = "election-bench-admin-token-0123456789";

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// p50 / p90 / p99 / max of durations, in ms.
pub fn percentiles(mut d: Vec<Duration>) -> String {
    if d.is_empty() {
        return "no samples".to_owned();
    }
    d.sort_unstable();
    let pick = |q: f64| d[((d.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples)",
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0),
        d.len()
    )
}

pub struct Server {
    pub base: String,
    pub pid: u32,
    child: Child,
    redis: Child,
    _dir: tempfile::TempDir,
}

impl Server {
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("r.sock");
        let redis = tokio::process::Command::from(leasehold::parent_death::command(
            "redis-server".as_ref(),
            "KILL",
        ))
        .args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
        let url = format!("redis+unix://{}", socket.display());
        let started = Instant::now();
        while redis::Client::open(url.as_str())?.get_connection().is_err() {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A free port (the bind is let go just before the server takes it).
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let listen = format!("127.0.0.1:{port}");
        let child = tokio::process::Command::from(leasehold::parent_death::command(
            env!("CARGO_BIN_EXE_leasehold").as_ref(),
            "KILL",
        ))
        .args(["serve", "--listen", &listen, "--redis-url", &url])
        .args([
            "--allow-anonymous",
            "--admin-token",
            ADMIN_TOKEN,
            "--min-ttl-ms",
            "100",
        ])
        // Every observer is the same anonymous caller here.
        .args(["--max-streams-per-client", "100000"])
        .args(["--log-format", "json"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
        // setpriv execs the server in its place: the child's pid is the server's.
        let pid = child.id().ok_or_else(|| anyhow::anyhow!("no server pid"))?;
        let base = format!("http://{listen}");
        let http = leasehold::client::http_builder().build()?;
        let started = Instant::now();
        while http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "leasehold did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            base,
            pid,
            child,
            redis,
            _dir: dir,
        })
    }

    /// The server's resident memory, in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no VmRSS for the server"))
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = self.redis.kill().await;
    }
}
