//! Sentinel mode for the harness: the master (`Cluster::redis`), its replicas and three
//! Sentinels, all `redis-server` on loopback, and the failovers the HA faults cause. The
//! instances follow the Sentinels (`--redis-sentinel`) and wait for `acks` replicas.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use tokio::process::Child;

mod faults;

pub use self::faults::Return;
use super::{RedisProc, free_port, guarded, wait_for};

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
        let replicas = start_replicas(dir, master, plan).await?;
        all_acknowledged(master, plan.replicas).await?;
        let sentinels = start_sentinels(dir, master.port, plan).await?;
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

/// Starts `plan.replicas` replicas of `master`; returns once each is linked.
async fn start_replicas(
    dir: &Path,
    master: &RedisProc,
    plan: HaPlan,
) -> anyhow::Result<Vec<RedisProc>> {
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
    Ok(replicas)
}

/// Returns once a write on `master` was acknowledged by all its `replicas`.
async fn all_acknowledged(master: &RedisProc, replicas: usize) -> anyhow::Result<()> {
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
            .arg(replicas)
            .arg(200)
            .query_async(&mut conn)
            .await
            .context("WAIT on the master")?;
        if acked >= replicas {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {acked} of {replicas} replicas acknowledged a write");
        }
    }
}

/// Starts `plan.sentinels` Sentinels monitoring the master on `master_port`; returns once
/// each has seen every replica and the other Sentinels.
async fn start_sentinels(
    dir: &Path,
    master_port: u16,
    plan: HaPlan,
) -> anyhow::Result<Vec<SentinelProc>> {
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
                master_port
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
    Ok(sentinels)
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
