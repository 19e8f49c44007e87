//! Sentinel mode for the harness: the master (`Cluster::redis`), its replicas and three
//! Sentinels, all `redis-server` on loopback, and the failovers the HA faults cause. The
//! instances follow the Sentinels (`--redis-sentinel`) and wait for `acks` replicas.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use tokio::process::Child;

use super::{Cluster, Promotion, RedisProc, free_port, guarded};

/// The name the Sentinels monitor the master under.
pub const MASTER_NAME: &str = "safety";
/// Where the data nodes and Sentinels connect from (the instances connect from
/// 127.0.0.1): the partition fault drops what goes between it and the master.
pub const SOURCE_ADDR: &str = "127.0.0.2";

/// What a Sentinel-mode run starts.
#[derive(Debug, Clone, Copy)]
pub struct HaPlan {
    pub replicas: usize,
    pub sentinels: usize,
    /// `--min-replica-acks` of the instances.
    pub acks: super::Acks,
    /// The instances follow the Sentinels; `false`: instance 0 stays on the first master's
    /// address (`--redis-url`), as a client that never follows a failover, while the others
    /// follow (to show what the faults catch).
    pub follow: bool,
}

struct SentinelProc {
    child: Option<Child>,
    port: u16,
}

pub(super) struct Ha {
    /// The first master's port.
    first_master: u16,
    replicas: Vec<RedisProc>,
    sentinels: Vec<SentinelProc>,
    plan: HaPlan,
}

impl Ha {
    /// Starts the replicas of `master` (linked when this returns) and the Sentinels (which
    /// have seen every replica when this returns).
    pub(super) async fn start(
        dir: &Path,
        master: &RedisProc,
        plan: HaPlan,
    ) -> anyhow::Result<Self> {
        let mut replicas = Vec::new();
        for i in 0..plan.replicas {
            let node_dir = dir.join(format!("replica-{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let mut replica = RedisProc {
                child: None,
                port: free_port()?,
                binds: vec!["127.0.0.1".to_owned()],
                persistence: master.persistence,
                dir: node_dir,
                replica_of: Some(master.port),
                source_addr: Some(SOURCE_ADDR),
                cluster_node_timeout_ms: None,
                announce_port: None,
            };
            replica.start().await?;
            replicas.push(replica);
        }
        for replica in &replicas {
            wait_for(Duration::from_secs(20), "a replica to link", || async {
                info(replica.port, "replication")
                    .await
                    .contains("master_link_status:up")
            })
            .await?;
        }
        // Acknowledging on the master's side too: after a diskless sync the master streams
        // nothing to a replica (so WAIT cannot count it) until its first ack, up to a
        // second later. A write every replica acknowledged says they are there.
        // (Short WAITs, each well within the connection's response timeout.)
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
        let mut conn = redis::Client::open(master.url())?
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .context("connect to the master")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            redis::cmd("SET")
                .arg("safety:linked")
                .arg(1)
                .query_async::<()>(&mut conn)
                .await
                .context("SET on the master")?;
            let acked: usize = redis::cmd("WAIT")
                .arg(plan.replicas)
                .arg(200)
                .query_async(&mut conn)
                .await
                .context("WAIT on the master")?;
            if acked >= plan.replicas {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {acked} of {} replicas acknowledged a write",
                    plan.replicas
                );
            }
        }
        let mut sentinels = Vec::new();
        for i in 0..plan.sentinels {
            let port = free_port()?;
            let sentinel_dir = dir.join(format!("sentinel-{i}"));
            std::fs::create_dir_all(&sentinel_dir)?;
            let conf = sentinel_dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nlogfile sentinel.log\n\
                     bind-source-addr {SOURCE_ADDR}\nsentinel announce-ip 127.0.0.1\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 3000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    sentinel_dir.display(),
                    master.port
                ),
            )?;
            let mut cmd = guarded("redis-server");
            cmd.arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true);
            let child = cmd.spawn().context("cannot start a Sentinel")?;
            sentinels.push(SentinelProc {
                child: Some(child),
                port,
            });
        }
        let peers = plan.sentinels.saturating_sub(1);
        for sentinel in &sentinels {
            wait_for(
                Duration::from_secs(20),
                "the Sentinels to see the replicas",
                || sees(sentinel.port, plan.replicas, peers),
            )
            .await?;
        }
        Ok(Self {
            first_master: master.port,
            replicas,
            sentinels,
            plan,
        })
    }

    /// The flags that point an instance at the Sentinels.
    pub(super) fn serve_args(&self, instance: usize) -> Vec<String> {
        let acks = [
            "--min-replica-acks".into(),
            self.plan.acks.to_string(),
            "--replica-ack-timeout-ms".into(),
            "500".into(),
        ];
        if !self.plan.follow && instance == 0 {
            let mut args = vec![
                "--redis-url".into(),
                format!("redis://127.0.0.1:{}", self.first_master),
            ];
            args.extend(acks);
            return args;
        }
        let sentinels = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "--redis-sentinel".into(),
            sentinels,
            "--redis-master-name".into(),
            MASTER_NAME.into(),
        ];
        args.extend(acks);
        args
    }

    /// The master's port as the Sentinels name it (the most named).
    async fn named_master(&self) -> Option<u16> {
        let mut votes = std::collections::HashMap::<u16, usize>::new();
        for sentinel in &self.sentinels {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}", sentinel.port))
            else {
                continue;
            };
            let ask = async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            if let Ok(Ok(Some((_, port)))) =
                tokio::time::timeout(Duration::from_millis(500), ask).await
            {
                *votes.entry(port).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(port, _)| port)
    }

    /// Whether every Sentinel names `port` as the master with no failover of it in progress
    /// (`SENTINEL MASTER`'s flags are just `master`).
    async fn all_settled_on(&self, port: u16) -> bool {
        for sentinel in &self.sentinels {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}", sentinel.port))
            else {
                return false;
            };
            let ask = async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(MASTER_NAME)
                    .query_async::<std::collections::HashMap<String, String>>(&mut conn)
                    .await
            };
            let Ok(Ok(fields)) = tokio::time::timeout(Duration::from_millis(500), ask).await else {
                return false;
            };
            let named = fields.get("port").and_then(|p| p.parse::<u16>().ok());
            if named != Some(port) || fields.get("flags").map(String::as_str) != Some("master") {
                return false;
            }
        }
        true
    }

    pub(super) async fn stop(mut self) {
        for replica in &mut self.replicas {
            replica.signal(Signal::SIGCONT);
            replica.kill9().await;
        }
        for sentinel in &mut self.sentinels {
            if let Some(mut child) = sentinel.child.take() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// How a killed master comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// Once the Sentinels promoted a replica, as a replica of it.
    AsReplica,
    /// Right after the promotion, with its data and its old configuration: a master, and
    /// writable until the Sentinels demote it.
    AsMaster,
}

impl Cluster {
    fn ha(&mut self) -> anyhow::Result<&mut Ha> {
        self.ha.as_mut().context("not in Sentinel mode")
    }

    /// `kill -9` of the master; once the Sentinels name another node, that node becomes
    /// `redis` and the killed one comes back as `how` says. Returns how long the Sentinels
    /// took, and when the promotion and the old master's return (linked as a replica) were.
    pub async fn fail_over(&mut self, how: Return) -> anyhow::Result<(Duration, Promotion)> {
        let old_port = self.redis.port;
        let killed = Instant::now();
        self.redis.kill9().await;
        let new_port = self.await_promotion(old_port).await?;
        let promoted = Instant::now();
        let took = promoted - killed;
        let k = self.swap_in(new_port)?;
        // The old master now sits in the replicas' list.
        let old = &mut self.ha()?.replicas[k];
        old.replica_of = match how {
            Return::AsReplica => Some(new_port),
            Return::AsMaster => None,
        };
        old.start().await?;
        if how == Return::AsMaster {
            // Sentinel demotes it (a few seconds); from then on it follows the new master.
            let port = old.port;
            wait_for(
                Duration::from_secs(30),
                "the old master to be demoted",
                || async move { info(port, "replication").await.contains("role:slave") },
            )
            .await?;
            self.ha()?.replicas[k].replica_of = Some(new_port);
        }
        for replica in &self.ha()?.replicas {
            replica.signal(Signal::SIGCONT);
        }
        self.settle().await?;
        let port = self.ha()?.replicas[k].port;
        wait_for(
            Duration::from_secs(30),
            "the old master to be linked as a replica",
            || async move {
                info(port, "replication")
                    .await
                    .contains("master_link_status:up")
            },
        )
        .await?;
        let rejoined = Instant::now();
        Ok((took, Promotion { promoted, rejoined }))
    }

    /// Waits until the Sentinels agree on one master with no failover in progress, for a
    /// second on end (at most 20 s). A loaded machine can make the Sentinels fail over the
    /// just-promoted master once more (one of them found it unresponsive past
    /// `down-after-milliseconds`): the fault's window must last until that is over too,
    /// and the run's master must be the one they settled on (the smoke tier saw it, with acks
    /// 0, as a loss outside the window).
    async fn settle(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut calm_since: Option<Instant> = None;
        loop {
            let named = self.ha()?.named_master().await;
            let settled = match named {
                Some(port) => self.ha()?.all_settled_on(port).await,
                None => false,
            };
            if let (true, Some(port)) = (settled, named)
                && port != self.redis.port
            {
                // A second failover: the run's master is the one now named.
                self.swap_in(port)?;
                for replica in &mut self.ha()?.replicas {
                    replica.replica_of = Some(port);
                }
                calm_since = None;
                continue;
            }
            match (settled, calm_since) {
                (true, Some(since)) if since.elapsed() >= Duration::from_secs(1) => return Ok(()),
                (true, None) => calm_since = Some(Instant::now()),
                (false, _) => calm_since = None,
                _ => {}
            }
            if Instant::now() > deadline {
                bail!("the Sentinels did not settle on one master within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Cuts the master off from its replicas and the Sentinels (every packet between it and
    /// [`SOURCE_ADDR`] dropped) while the instances still reach it; waits for the Sentinels
    /// to promote a replica, then heals the cut and waits for the old master to be
    /// demoted. Returns how long the Sentinels took.
    pub async fn partition_master(&mut self) -> anyhow::Result<Duration> {
        let old_port = self.redis.port;
        let rules = cut_rules(old_port);
        for rule in &rules {
            let mut args = vec!["iptables", "-I"];
            args.extend(rule.iter().map(String::as_str));
            super::sh(&args)?;
        }
        let cut = Instant::now();
        let promoted = self.await_promotion(old_port).await;
        let took = cut.elapsed();
        // The old master stays cut off a moment longer: the instances must move on their
        // own (Sentinel's message or their poll), not because it came back as a replica.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for rule in &rules {
            let mut args = vec!["iptables", "-D"];
            args.extend(rule.iter().map(String::as_str));
            let _ = super::sh(&args);
        }
        let new_port = promoted?;
        let k = self.swap_in(new_port)?;
        self.ha()?.replicas[k].replica_of = Some(new_port);
        wait_for(
            Duration::from_secs(30),
            "the old master to be demoted",
            || async move { info(old_port, "replication").await.contains("role:slave") },
        )
        .await?;
        self.settle().await?;
        Ok(took)
    }

    /// The port of the node the Sentinels promote in place of the master on `old_port`
    /// (waiting up to 30 s).
    async fn await_promotion(&mut self, old_port: u16) -> anyhow::Result<u16> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(port) = self.ha()?.named_master().await
                && port != old_port
            {
                return Ok(port);
            }
            if Instant::now() > deadline {
                bail!("the Sentinels named no new master within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Makes the promoted replica on `new_port` the run's master (`redis`); the old master
    /// takes its place in the replicas' list, at the index returned.
    fn swap_in(&mut self, new_port: u16) -> anyhow::Result<usize> {
        let Some(ha) = self.ha.as_mut() else {
            bail!("not in Sentinel mode");
        };
        let Some(k) = ha.replicas.iter().position(|r| r.port == new_port) else {
            bail!("the Sentinels named {new_port}, which is no replica of this run");
        };
        std::mem::swap(&mut self.redis, &mut ha.replicas[k]);
        self.redis.replica_of = None;
        Ok(k)
    }

    /// SIGSTOP (or SIGCONT) to every replica.
    pub fn signal_replicas(&mut self, signal: Signal) {
        if let Ok(ha) = self.ha() {
            for replica in &ha.replicas {
                replica.signal(signal);
            }
        }
    }

    /// Whether the instances' acks can be met once a failover promoted a replica, before the
    /// failed node is back as a replica: a shard serves again from the promotion, or only
    /// from the return (an explicit count of every replica).
    pub fn serves_after_promotion(&self) -> bool {
        if let Some(shards) = &self.shards {
            return shards.serves_without_replica();
        }
        self.ha.as_ref().is_none_or(|ha| {
            let left = ha.plan.replicas.saturating_sub(1);
            ha.plan.acks.required(left) <= left
        })
    }

    /// Whether a failover may lose acknowledged grants in this run: its instances wait for
    /// fewer replicas than there are, so the one promoted may lack a grant another
    /// acknowledged (`WAIT` is not consensus). `None` outside Sentinel mode.
    /// Cluster mode: the same of a shard's primary and its replica.
    pub fn failover_may_lose(&self) -> Option<bool> {
        if let Some(shards) = &self.shards {
            return Some(shards.may_lose());
        }
        self.ha
            .as_ref()
            .map(|ha| ha.plan.acks.required(ha.plan.replicas) < ha.plan.replicas)
    }
}

/// iptables rules (after `-I`/`-D`) that drop every packet between the node on `port` and
/// [`SOURCE_ADDR`], both ways.
fn cut_rules(port: u16) -> [Vec<String>; 2] {
    let port = port.to_string();
    let rule = |addr_flag: &str, port_flag: &str| {
        [
            "INPUT",
            "-i",
            "lo",
            addr_flag,
            SOURCE_ADDR,
            "-p",
            "tcp",
            port_flag,
            &port,
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    [rule("-s", "--dport"), rule("-d", "--sport")]
}

pub(super) async fn info(port: u16, section: &str) -> String {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return String::new();
    };
    let read = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .arg(section)
            .query_async::<String>(&mut conn)
            .await
    };
    match tokio::time::timeout(Duration::from_millis(500), read).await {
        Ok(Ok(text)) => text,
        _ => String::new(),
    }
}

async fn sees(port: u16, replicas: usize, peers: usize) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let read = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(MASTER_NAME)
            .query_async::<Vec<String>>(&mut conn)
            .await
    };
    let Ok(Ok(fields)) = tokio::time::timeout(Duration::from_millis(500), read).await else {
        return false;
    };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv.get(1))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
    };
    field("num-slaves") >= replicas && field("num-other-sentinels") >= peers
}

pub(super) async fn wait_for<F, Fut>(
    limit: Duration,
    what: &str,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        if started.elapsed() > limit {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
