//! A `redis-server` child of the harness: its config (persistence, replication, Cluster),
//! start, `kill -9` and signals.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Child;

use super::{Persistence, guarded};

/// One `redis-server` child: the standalone Redis, a Sentinel-mode data node or Sentinel, a
/// Cluster node, or a RedLock node.
pub(super) struct RedisProc {
    pub(super) child: Option<Child>,
    pub(super) port: u16,
    pub(super) binds: Vec<String>,
    pub(super) persistence: Persistence,
    pub(super) dir: PathBuf,
    /// A replica of the master on this port (Sentinel mode).
    pub(super) replica_of: Option<u16>,
    /// Sentinel mode: connect out from this loopback address (`bind-source-addr`), so that
    /// the partition fault can cut the data nodes and Sentinels off one node while the
    /// instances (from 127.0.0.1) still reach it. (Cluster mode: each node its own.)
    pub(super) source_addr: Option<&'static str>,
    /// Cluster mode: a cluster node with this `cluster-node-timeout` (ms).
    pub(super) cluster_node_timeout_ms: Option<u64>,
    /// Cluster mode: the port the node tells clients and peers (its proxy's), if not its own.
    pub(super) announce_port: Option<u16>,
}

impl RedisProc {
    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(super) fn aof_incr_file(&self) -> Option<PathBuf> {
        let dir = self.dir.join("appendonlydir");
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .max()
    }

    pub(super) async fn start(&mut self) -> anyhow::Result<()> {
        let mut cmd = guarded("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .args(&self.binds)
            .arg("--protected-mode")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--auto-aof-rewrite-percentage", "0"])
            .args(["--logfile", "redis.log"]);
        if let Some(master) = self.replica_of {
            cmd.args(["--replicaof", "127.0.0.1"])
                .arg(master.to_string());
        }
        if let Some(addr) = self.source_addr {
            cmd.args(["--bind-source-addr", addr])
                .args(["--replica-announce-ip", "127.0.0.1"]);
        }
        if let Some(timeout) = self.cluster_node_timeout_ms {
            // Its peers and clients are told 127.0.0.1 (not the source address it connects
            // from); nodes.conf in its directory keeps its identity across a restart.
            cmd.args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .arg("--cluster-node-timeout")
                .arg(timeout.to_string())
                .args(["--cluster-announce-ip", "127.0.0.1"]);
            if let Some(port) = self.announce_port {
                cmd.arg("--cluster-announce-port")
                    .arg(port.to_string())
                    .arg("--cluster-announce-bus-port")
                    .arg((u32::from(self.port) + 10_000).to_string());
            }
        }
        // Replicas link at once instead of after the 5 s default.
        cmd.args(["--repl-diskless-sync-delay", "0"]);
        match self.persistence {
            Persistence::AofAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
            Persistence::AofEverysec => {
                cmd.args(["--appendonly", "yes", "--appendfsync", "everysec"])
            }
            Persistence::None => cmd.args(["--appendonly", "no"]),
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.child = Some(
            cmd.spawn()
                .context("cannot start redis-server (are redis-server and setpriv installed?)")?,
        );
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING")
                    .query_async::<()>(&mut conn)
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!(
            "redis-server did not answer within 10 s; see {}",
            self.dir.display()
        )
    }

    pub(super) async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    pub(super) fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }
}
