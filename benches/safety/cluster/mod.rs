//! The processes under test: one `redis-server` (TCP, with the persistence a fault needs) and
//! several `leasehold serve` instances on it, each started, killed, frozen and restarted here.
//! One instance can live in a network namespace of its own, joined to the host by a veth
//! pair, so that a partition between it and Redis is a pair of iptables rules. In Sentinel
//! mode ([`ha`]) the master has replicas and Sentinels; in Cluster mode ([`shards`]) a Redis
//! Cluster takes the one `redis-server`'s place.
//!
//! Everything is torn down on drop: children killed, the namespace, veth and rules deleted.
//! The children also die with the harness when it is killed and drops nothing (see [`guarded`]).

mod ha;
mod netns;
mod proxy;
mod shards;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

pub use self::ha::{HaPlan, Return};
pub use self::netns::can_partition;
use self::netns::{Netns, sh};
pub use self::shards::ShardPlan;

pub const ADMIN_TOKEN: &str = "safety-harness-admin-token-0123456789";

/// The instances' `--min-replica-acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// One while a shard has a replica that could be promoted, none while it has none.
    Auto,
    Count(u32),
}

impl Acks {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim() {
            "auto" => Some(Self::Auto),
            n => n.parse().ok().map(Self::Count),
        }
    }

    /// Replicas a grant waits for on a shard with `replicas` replicas left.
    pub fn required(self, replicas: usize) -> usize {
        match self {
            Self::Auto => replicas.min(1),
            Self::Count(n) => n as usize,
        }
    }
}

/// When a failover's replica took over, and when the failed node was back (as a replica).
#[derive(Debug, Clone, Copy)]
pub struct Promotion {
    pub promoted: Instant,
    pub rejoined: Instant,
}

impl std::fmt::Display for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

/// How Redis keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// AOF, fsync before every reply: nothing acknowledged is lost.
    AofAlways,
    /// AOF, fsync once a second: a power loss loses up to the last second.
    AofEverysec,
    /// Nothing: a restart starts empty.
    None,
}

/// The base URLs of the instances, shared with the clients; `None` while an instance is down.
#[derive(Debug, Default)]
pub struct Targets {
    urls: RwLock<Vec<Option<String>>>,
}

impl Targets {
    pub fn url(&self, i: usize) -> Option<String> {
        self.urls.read().ok()?.get(i).cloned().flatten()
    }

    pub fn len(&self) -> usize {
        self.urls.read().map(|u| u.len()).unwrap_or(0)
    }

    fn set(&self, i: usize, url: Option<String>) {
        if let Ok(mut urls) = self.urls.write() {
            if urls.len() <= i {
                urls.resize(i + 1, None);
            }
            urls[i] = url;
        }
    }
}

/// `program`, killed (SIGKILL) when the harness dies however it dies: killed with SIGKILL, the
/// harness drops nothing, and its redis-server and instances would run on. Not SIGTERM, which
/// a child frozen by a fault (SIGSTOP) would hold until thawed. The kernel signals the child
/// when the thread that started it ends: the harness starts children from the runtime's
/// threads, which live as long as the process.
fn guarded(program: impl AsRef<OsStr>) -> Command {
    Command::from(leasehold::parent_death::command(program.as_ref(), "KILL"))
}

struct RedisProc {
    child: Option<Child>,
    port: u16,
    binds: Vec<String>,
    persistence: Persistence,
    dir: PathBuf,
    /// A replica of the master on this port (Sentinel mode).
    replica_of: Option<u16>,
    /// Sentinel mode: connect out from this loopback address (`bind-source-addr`), so that
    /// the partition fault can cut the data nodes and Sentinels off one node while the
    /// instances (from 127.0.0.1) still reach it. (Cluster mode: each node its own.)
    source_addr: Option<&'static str>,
    /// Cluster mode: a cluster node with this `cluster-node-timeout` (ms).
    cluster_node_timeout_ms: Option<u64>,
    /// Cluster mode: the port the node tells clients and peers (its proxy's), if not its own.
    announce_port: Option<u16>,
}

impl RedisProc {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn aof_incr_file(&self) -> Option<PathBuf> {
        let dir = self.dir.join("appendonlydir");
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .max()
    }

    async fn start(&mut self) -> anyhow::Result<()> {
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

    async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }
}

struct InstanceProc {
    child: Option<Child>,
    in_netns: bool,
    log: PathBuf,
}

/// Redis and the Leasehold instances of one run.
pub struct Cluster {
    binary: PathBuf,
    redis: RedisProc,
    instances: Vec<InstanceProc>,
    netns: Option<Netns>,
    partitioned: bool,
    /// Sentinel mode: the replicas and Sentinels (`redis` is always the current master).
    ha: Option<ha::Ha>,
    /// Cluster mode: the cluster's nodes (`redis` is then never started).
    shards: Option<shards::Shards>,
    /// RedLock's nodes (the instances get `--redlock-nodes`): independent masters without
    /// persistence, restarted empty by the redlock-node-kill fault.
    redlock: Vec<RedisProc>,
    pub targets: Arc<Targets>,
    /// AOF incr-file sizes sampled over time, to cut the last second off as a power loss would.
    aof_sizes: Vec<(Instant, u64)>,
}

/// A free TCP port on loopback (probed; good enough for a harness that owns the machine).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// What keeps the lock state: one Redis, a master with replicas and Sentinels, or a Redis
/// Cluster.
#[derive(Debug, Clone, Copy)]
pub enum RedisMode {
    Standalone,
    Sentinel(HaPlan),
    Cluster(ShardPlan),
}

impl Cluster {
    /// Starts Redis with `persistence` (or the Sentinel or Cluster setup `mode` names),
    /// `instances` Leasehold instances on loopback, and (with `partitionable`) one more
    /// inside a network namespace; `redlock_nodes` RedLock nodes beside them.
    #[allow(clippy::too_many_arguments)] // One per part of the setup.
    pub async fn start(
        dir: &Path,
        binary: &Path,
        persistence: Persistence,
        instances: usize,
        partitionable: bool,
        tag: u32,
        mode: RedisMode,
        redlock_nodes: usize,
    ) -> anyhow::Result<Self> {
        let ha_plan = match mode {
            RedisMode::Sentinel(plan) => Some(plan),
            _ => None,
        };
        std::fs::create_dir_all(dir)?;
        let netns = if partitionable {
            Some(Netns::create(tag)?)
        } else {
            None
        };
        let mut binds = vec!["127.0.0.1".to_owned()];
        if let Some(ns) = &netns {
            binds.push(ns.host_ip.clone());
        }
        let mut redis = RedisProc {
            child: None,
            port: free_port()?,
            binds,
            persistence,
            dir: dir.to_owned(),
            replica_of: None,
            source_addr: ha_plan.map(|_| ha::SOURCE_ADDR),
            cluster_node_timeout_ms: None,
            announce_port: None,
        };
        let shards = match mode {
            RedisMode::Cluster(plan) => Some(shards::Shards::start(dir, plan).await?),
            _ => {
                redis.start().await?;
                None
            }
        };
        let ha = match ha_plan {
            Some(plan) => Some(ha::Ha::start(dir, &redis, plan).await?),
            None => None,
        };
        let mut redlock = Vec::new();
        for n in 0..redlock_nodes {
            let node_dir = dir.join(format!("redlock-{n}"));
            std::fs::create_dir_all(&node_dir)?;
            let mut node = RedisProc {
                child: None,
                port: free_port()?,
                binds: redis.binds.clone(),
                persistence: Persistence::None,
                dir: node_dir,
                replica_of: None,
                source_addr: None,
                cluster_node_timeout_ms: None,
                announce_port: None,
            };
            node.start().await?;
            redlock.push(node);
        }
        let mut cluster = Self {
            binary: binary.to_owned(),
            redis,
            instances: Vec::new(),
            netns,
            partitioned: false,
            ha,
            shards,
            redlock,
            targets: Arc::new(Targets::default()),
            aof_sizes: Vec::new(),
        };
        for i in 0..instances {
            cluster.instances.push(InstanceProc {
                child: None,
                in_netns: false,
                log: dir.join(format!("leasehold-{i}.log")),
            });
        }
        if cluster.netns.is_some() {
            let i = cluster.instances.len();
            cluster.instances.push(InstanceProc {
                child: None,
                in_netns: true,
                log: dir.join(format!("leasehold-{i}-netns.log")),
            });
        }
        for i in 0..cluster.instances.len() {
            cluster.start_instance(i).await?;
        }
        Ok(cluster)
    }

    pub fn redis_url(&self) -> String {
        self.redis.url()
    }

    /// Cluster mode: every node's `host:port` (the Redisson-layout sessions' seeds).
    pub fn cluster_nodes(&self) -> Option<Vec<String>> {
        self.shards.as_ref().map(shards::Shards::addrs)
    }

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

    /// How many RedLock nodes the run has.
    pub fn redlock_count(&self) -> usize {
        self.redlock.len()
    }

    /// `kill -9` of RedLock node `n`; it stays down until [`Self::restart_redlock_node`].
    pub async fn kill_redlock_node(&mut self, n: usize) {
        self.redlock[n].kill9().await;
    }

    /// Starts RedLock node `n` again, empty (it has no persistence).
    pub async fn restart_redlock_node(&mut self, n: usize) -> anyhow::Result<()> {
        self.redlock[n].start().await
    }

    pub fn signal_redis(&self, signal: Signal) {
        self.redis.signal(signal);
    }

    /// Notes the AOF's current size (call every ~100 ms while a power-loss fault may come).
    pub fn sample_aof(&mut self) {
        if let Some(size) = self
            .redis
            .aof_incr_file()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
        {
            self.aof_sizes.push((Instant::now(), size));
            if self.aof_sizes.len() > 200 {
                self.aof_sizes.drain(..100);
            }
        }
    }

    /// `kill -9` of Redis; with `lose_last_second`, the AOF is cut back to its size of a
    /// second ago first, as a power loss under `appendfsync everysec` would leave it. Then
    /// Redis starts again on the same port and directory.
    pub async fn crash_redis(&mut self, lose_last_second: bool) -> anyhow::Result<()> {
        self.redis.kill9().await;
        if lose_last_second && let Some(file) = self.redis.aof_incr_file() {
            let cutoff = Instant::now() - Duration::from_secs(1);
            let size = self
                .aof_sizes
                .iter()
                .rev()
                .find(|(at, _)| *at <= cutoff)
                .map_or(0, |(_, size)| *size);
            let f = std::fs::OpenOptions::new().write(true).open(&file)?;
            if f.metadata()?.len() > size {
                f.set_len(size)?;
            }
        }
        self.aof_sizes.clear();
        self.redis.start().await
    }

    /// Drops (or restores) every packet between the namespaced instance and Redis.
    pub fn partition(&mut self, on: bool) -> anyhow::Result<()> {
        let Some(ns) = &self.netns else {
            bail!("no namespaced instance")
        };
        if on == self.partitioned {
            return Ok(());
        }
        for rule in ns.rules(self.redis.port) {
            let action = if on { "-I" } else { "-D" };
            let mut args = vec!["iptables", action];
            args.extend(rule.iter().map(String::as_str));
            sh(&args)?;
        }
        self.partitioned = on;
        Ok(())
    }

    /// Sets Redis's `maxmemory` (bytes; 0: none) under `noeviction`: 1 makes it full.
    pub async fn set_redis_maxmemory(&self, bytes: u64) -> anyhow::Result<()> {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction")
            .arg("maxmemory")
            .arg(bytes)
            .query_async::<()>(&mut self.redis_conn().await?)
            .await?;
        Ok(())
    }

    /// A connection to Redis for the harness itself (Redisson-layout client, CLIENT KILL).
    pub async fn redis_conn(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        Ok(redis::Client::open(self.redis.url())?
            .get_multiplexed_async_connection()
            .await?)
    }

    /// Stops everything (also done on drop, without waiting).
    pub async fn stop(mut self) {
        for i in 0..self.instances.len() {
            self.signal_instance(i, Signal::SIGCONT);
            self.kill_instance(i).await;
        }
        self.redis.signal(Signal::SIGCONT);
        self.redis.kill9().await;
        for node in &mut self.redlock {
            node.kill9().await;
        }
        if let Some(ha) = self.ha.take() {
            ha.stop().await;
        }
        if let Some(shards) = self.shards.take() {
            shards.stop().await;
        }
        let _ = self.partition(false);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.partitioned {
            let _ = self.partition(false);
        }
        if let Some(shards) = &mut self.shards {
            shards.heal();
        }
        if let Some(ns) = &self.netns {
            ns.teardown();
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
