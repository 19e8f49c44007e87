//! The Leasehold instances under test: each started (`leasehold serve` on loopback, or in the
//! partition's network namespace) with its log followed for its address, killed, frozen.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Child;

use super::{ADMIN_TOKEN, Cluster, guarded};

/// One `leasehold serve` child and where its log goes.
pub(super) struct InstanceProc {
    pub(super) child: Option<Child>,
    pub(super) in_netns: bool,
    pub(super) log: PathBuf,
}

impl Cluster {
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    pub async fn start_instance(&mut self, i: usize) -> anyhow::Result<()> {
        let inst = &mut self.instances[i];
        let (listen, redis_url) = match (&self.netns, inst.in_netns) {
            (Some(ns), true) => (
                format!("{}:0", ns.ns_ip),
                format!("redis://{}:{}", ns.host_ip, self.redis.port),
            ),
            _ => ("127.0.0.1:0".to_owned(), self.redis.url()),
        };
        let mut cmd = match (&self.netns, inst.in_netns) {
            (Some(ns), true) => {
                let mut c = guarded("ip");
                c.args(["netns", "exec", &ns.name]).arg(&self.binary);
                c
            }
            _ => guarded(&self.binary),
        };
        cmd.args(["serve", "--listen", &listen]);
        match (&self.ha, &self.shards) {
            (Some(ha), _) => cmd.args(ha.serve_args(i)),
            (None, Some(shards)) => cmd.args(shards.serve_args()),
            (None, None) => cmd.args(["--redis-url", &redis_url]),
        };
        if !self.redlock.is_empty() {
            let host = match (&self.netns, inst.in_netns) {
                (Some(ns), true) => ns.host_ip.clone(),
                _ => "127.0.0.1".to_owned(),
            };
            let nodes: Vec<String> = self
                .redlock
                .iter()
                .map(|n| format!("redis://{host}:{}", n.port))
                .collect();
            cmd.args(["--redlock-nodes", &nodes.join(",")]);
        }
        cmd.args(["--log-format", "json", "--min-ttl-ms", "100"])
            .args(["--ticket-timeout-ms", "1000", "--admin-token", ADMIN_TOKEN])
            // The clients call without a key; the instance in the partition's namespace
            // listens on a non-loopback address, where anonymous callers need this.
            .arg("--allow-anonymous")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("cannot start leasehold serve")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log_path = inst.log.clone();
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut addr_tx = Some(addr_tx);
            let mut lines = BufReader::new(stderr).lines();
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .ok();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line
                    .split("\"addr\":\"")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    && let Some(tx) = addr_tx.take()
                {
                    let _ = tx.send(addr.to_owned());
                }
                if let Some(log) = log.as_mut() {
                    use std::io::Write as _;
                    let _ = writeln!(log, "{line}");
                }
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(20), addr_rx)
            .await
            .ok()
            .and_then(Result::ok)
            .with_context(|| format!("instance {i} did not start; see {}", inst.log.display()))?;
        inst.child = Some(child);
        let url = format!("http://{addr}");
        wait_ready(&url).await?;
        self.targets.set(i, Some(url));
        Ok(())
    }

    /// `kill -9` of one instance; it stays down until [`Self::start_instance`].
    pub async fn kill_instance(&mut self, i: usize) {
        self.targets.set(i, None);
        if let Some(mut child) = self.instances[i].child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// SIGSTOP or SIGCONT to one instance: it keeps its connections and answers nothing.
    pub fn signal_instance(&self, i: usize, signal: Signal) {
        if let Some(pid) = self.instances[i].child.as_ref().and_then(Child::id) {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }
}

/// Waits until `url/readyz` answers 200 (Redis reachable, subscriber connected).
async fn wait_ready(url: &str) -> anyhow::Result<()> {
    let http = leasehold::client::http_builder()
        .build()
        .expect("an HTTP client");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = http
            .get(format!("{url}/readyz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("{url} did not become ready")
}
