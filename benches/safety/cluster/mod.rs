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
mod instances;
mod netns;
mod proxy;
mod redis_proc;
mod shards;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::bail;
use nix::sys::signal::Signal;
use tokio::process::Command;

pub use self::ha::{HaPlan, Return};
use self::instances::InstanceProc;
pub use self::netns::can_partition;
use self::netns::{Netns, sh};
use self::redis_proc::RedisProc;
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

/// Polls `check` every 50 ms until it holds; fails after `limit` with what it last said.
async fn wait_until<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if started.elapsed() > limit {
            bail!("timed out waiting for {what}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// As [`wait_until`], for a check that says only whether it holds.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_until(limit, what, || {
        let holds = check();
        async move {
            if holds.await {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        }
    })
    .await
}
