//! Cluster mode for the harness: a Redis Cluster of `primaries` primaries with one replica
//! each, every node a `redis-server` on loopback (its port and its bus port, port + 10000),
//! formed as tests/api/helpers/cluster.rs forms one (`redis-cli --cluster create
//! --cluster-replicas 1`, then `cluster_state:ok` everywhere, linked replicas and a write every
//! replica acknowledged); and what the Cluster-mode faults do to it: a primary killed (its
//! replica promoted, the node back as a replica), slots moved key by key to another primary
//! and back, a primary cut off by iptables until its replica is promoted.
//!
//! Each node connects out from an address of its own (`bind-source-addr` 127.0.1.n) while the
//! instances and the harness connect from 127.0.0.1, so that iptables can cut one node off
//! from its peers (cluster bus and replication) with or without the instances.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

mod faults;
mod nodes;

use self::nodes::{Role, field, free_port_pair, keyslot, owner_in, query, role, slot_map};
use super::ha::info;
use super::proxy::Proxy;
use super::wait_until;
use super::{Persistence, RedisProc};

/// The addresses the nodes connect out from, one each (all on loopback).
const NODE_ADDRS: [&str; 8] = [
    "127.0.1.1",
    "127.0.1.2",
    "127.0.1.3",
    "127.0.1.4",
    "127.0.1.5",
    "127.0.1.6",
    "127.0.1.7",
    "127.0.1.8",
];
/// Every node's source address is in this range (see [`NODE_ADDRS`]).
const NODE_RANGE: &str = "127.0.1.0/24";
const SLOTS: u32 = 16_384;
/// How long the cluster may take to form, settle after a fault, or fail a primary over.
const PATIENCE: Duration = Duration::from_secs(30);

/// What a Cluster-mode run starts.
#[derive(Debug, Clone, Copy)]
pub struct ShardPlan {
    pub primaries: usize,
    /// `cluster-node-timeout`: how long a silent primary takes to be failed over.
    pub node_timeout_ms: u64,
    /// `--min-replica-acks` of the instances (each shard has one replica).
    pub acks: super::Acks,
    /// Each node behind a proxy whose port it announces (the reply-lost fault).
    pub proxied: bool,
}

pub(super) struct Shards {
    nodes: Vec<RedisProc>,
    plan: ShardPlan,
    /// The iptables rules of a partition in force (removed on drop too).
    cut: Vec<Vec<String>>,
    /// Keys a slot migration found on both sides.
    split_keys: AtomicUsize,
    /// With `plan.proxied`: each node's proxy, by node.
    proxies: Vec<Proxy>,
}

/// Announced (proxy) ports -> the node's own port, for what the nodes say of each other
/// (CLUSTER SLOTS, a replica's master_port): the harness itself talks to the nodes directly.
static ANNOUNCED: std::sync::RwLock<BTreeMap<u16, u16>> = std::sync::RwLock::new(BTreeMap::new());

impl Shards {
    /// Starts `2 * primaries` nodes and forms the cluster; returns once every node says
    /// `cluster_state:ok` and sees the same slot map, every replica is linked, and each
    /// primary has had a write its replica acknowledged.
    pub(super) async fn start(dir: &std::path::Path, plan: ShardPlan) -> anyhow::Result<Self> {
        let count = plan.primaries * 2;
        if plan.primaries < 3 || count > NODE_ADDRS.len() {
            bail!("Cluster mode runs 3 or 4 primaries (redis-cli refuses fewer than 3)");
        }
        // Each node's pair stays bound until just before that node starts: any socket made
        // meanwhile (a proxy's, the harness's connection to an earlier node) could otherwise
        // take a port let go (a smoke run's reply-lost node once failed to bind its bus port).
        let mut held = Vec::new();
        let ports = (0..count)
            .map(|_| free_port_pair(&mut held))
            .collect::<anyhow::Result<Vec<u16>>>()?;
        let mut held = held.into_iter();
        let mut proxies = Vec::new();
        if plan.proxied {
            for &port in &ports {
                let proxy = Proxy::start(std::net::TcpListener::bind("127.0.0.1:0")?, port)?;
                if let Ok(mut map) = ANNOUNCED.write() {
                    map.insert(proxy.port, port);
                }
                proxies.push(proxy);
            }
        }
        let mut nodes = Vec::new();
        for (i, &port) in ports.iter().enumerate() {
            let node_dir = dir.join(format!("node-{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let mut node = RedisProc {
                child: None,
                port,
                binds: vec!["127.0.0.1".to_owned()],
                // A killed node comes back empty and rejoins as a replica.
                persistence: Persistence::None,
                dir: node_dir,
                replica_of: None,
                source_addr: Some(NODE_ADDRS[i]),
                cluster_node_timeout_ms: Some(plan.node_timeout_ms),
                announce_port: proxies.get(i).map(|p| p.port),
            };
            // Its port and bus port (held in that order).
            drop((held.next(), held.next()));
            node.start().await?;
            nodes.push(node);
        }
        let shards = Self {
            nodes,
            plan,
            cut: Vec::new(),
            split_keys: AtomicUsize::new(0),
            proxies,
        };
        let output = tokio::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(shards.own_addrs())
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("cannot run redis-cli (is redis-tools installed?)")?;
        if !output.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        wait_until(PATIENCE, "the cluster to form", || shards.settled()).await?;
        for (primary, _) in shards.primaries().await? {
            shards.wait_replicated(primary).await?;
        }
        Ok(shards)
    }

    /// Every node's `host:port` as clients find it (its proxy's, with `plan.proxied`).
    pub(super) fn addrs(&self) -> Vec<String> {
        if !self.proxies.is_empty() {
            return self
                .proxies
                .iter()
                .map(|p| format!("127.0.0.1:{}", p.port))
                .collect();
        }
        self.own_addrs()
    }

    /// Every node's own `host:port`.
    fn own_addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// The flags that point an instance at the cluster.
    pub(super) fn serve_args(&self) -> Vec<String> {
        vec![
            "--redis-cluster".into(),
            self.addrs().join(","),
            "--min-replica-acks".into(),
            self.plan.acks.to_string(),
            "--replica-ack-timeout-ms".into(),
            "500".into(),
        ]
    }

    /// Whether a failover may lose an acknowledged grant: the instances do not wait for the
    /// shard's one replica.
    pub(super) fn may_lose(&self) -> bool {
        self.plan.acks.required(1) < 1
    }

    /// Whether the instances' acks can be met by a shard whose one replica was promoted
    /// (so it has none): `auto` and 0 can, a count cannot.
    pub(super) fn serves_without_replica(&self) -> bool {
        self.plan.acks.required(0) == 0
    }

    fn running(&self) -> impl Iterator<Item = &RedisProc> {
        self.nodes.iter().filter(|n| n.child.is_some())
    }

    /// A running node that answers (not one cut off), asked about the whole cluster.
    async fn any(&self) -> anyhow::Result<u16> {
        for node in self.running() {
            if !self.is_cut(node.port) && role(node.port).await.is_some() {
                return Ok(node.port);
            }
        }
        bail!("no cluster node answers")
    }

    fn is_cut(&self, port: u16) -> bool {
        let port = port.to_string();
        self.cut.iter().any(|rule| rule.contains(&port))
    }

    /// The primaries serving slots now (ports), each with its ranges.
    async fn primaries(&self) -> anyhow::Result<Vec<(u16, Vec<(u16, u16)>)>> {
        let mut primaries: BTreeMap<u16, Vec<(u16, u16)>> = BTreeMap::new();
        for (start, end, owner) in slot_map(self.any().await?).await? {
            primaries.entry(owner).or_default().push((start, end));
        }
        Ok(primaries.into_iter().collect())
    }

    /// Each name's slot and the primary serving it now.
    async fn slots_of(&self, names: &[String]) -> anyhow::Result<Vec<(String, u16, u16)>> {
        let any = self.any().await?;
        let map = slot_map(any).await?;
        let mut out = Vec::new();
        for name in names {
            let slot = keyslot(any, name).await?;
            let owner = owner_in(&map, slot).with_context(|| format!("nobody serves {slot}"))?;
            out.push((name.clone(), slot, owner));
        }
        Ok(out)
    }

    /// The names each primary serves, by primary; an error when a primary serves none (the
    /// faults would miss the locks of that shard).
    pub(super) async fn spread(&self, names: &[String]) -> anyhow::Result<Vec<(u16, Vec<String>)>> {
        let mut by: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for (primary, _) in self.primaries().await? {
            by.insert(primary, Vec::new());
        }
        for (name, _, owner) in self.slots_of(names).await? {
            by.entry(owner).or_default().push(name);
        }
        if let Some((primary, _)) = by.iter().find(|(_, names)| names.is_empty()) {
            bail!("no lock name lands on the primary 127.0.0.1:{primary}: use more --names");
        }
        Ok(by.into_iter().collect())
    }

    /// The primary a fault's `cycle` hits: the ones serving names in turn, most names first.
    async fn pick_primary(&self, names: &[String], cycle: usize) -> anyhow::Result<u16> {
        let mut spread = self.spread(names).await?;
        spread.sort_by_key(|(port, names)| (std::cmp::Reverse(names.len()), *port));
        Ok(spread[cycle % spread.len()].0)
    }

    /// The running replica of the primary on `primary`.
    async fn replica_of(&self, primary: u16) -> Option<u16> {
        for node in self.running() {
            if let Some(Role::Replica { of, .. }) = role(node.port).await
                && of == primary
            {
                return Some(node.port);
            }
        }
        None
    }

    /// Every running node says `cluster_state:ok` and sees the same slot map, covering every
    /// slot with running primaries; `primaries` primaries, each with a linked replica.
    async fn settled(&self) -> Result<(), String> {
        let mut first: Option<Vec<(u16, u16, u16)>> = None;
        let mut linked = 0;
        for node in self.running() {
            let port = node.port;
            let text: String = query(port, redis::cmd("CLUSTER").arg("INFO"))
                .await
                .map_err(|e| format!("{e:#}"))?;
            if field(&text, "cluster_state") != "ok" {
                return Err(format!("{port}: cluster_state not ok"));
            }
            match role(port).await {
                Some(Role::Replica { of, linked: false }) => {
                    return Err(format!("{port}: not linked to {of}"));
                }
                Some(Role::Replica { .. }) => linked += 1,
                Some(Role::Primary) => {}
                None => return Err(format!("{port}: no role")),
            }
            let map = slot_map(port).await.map_err(|e| format!("{e:#}"))?;
            match &first {
                Some(seen) if *seen != map => {
                    return Err(format!("{port} sees {map:?}, another {seen:?}"));
                }
                Some(_) => {}
                None => first = Some(map),
            }
        }
        let map = first.ok_or("no running node")?;
        let covered: u32 = map
            .iter()
            .map(|&(start, end, _)| u32::from(end) - u32::from(start) + 1)
            .sum();
        if covered != SLOTS {
            return Err(format!("{covered} slots served"));
        }
        let mut owners: Vec<u16> = map.iter().map(|&(_, _, owner)| owner).collect();
        owners.sort_unstable();
        owners.dedup();
        if owners.len() != self.plan.primaries || linked != self.plan.primaries {
            return Err(format!(
                "{} primaries serve slots, {linked} replicas linked",
                owners.len()
            ));
        }
        Ok(())
    }

    /// Returns once the replica of the primary on `primary` acknowledged a write made on it
    /// now, so it has everything the primary had (after a diskless sync the primary streams
    /// nothing a WAIT can count until the replica's first acknowledgement, up to a second).
    async fn wait_replicated(&self, primary: u16) -> anyhow::Result<()> {
        let map = slot_map(primary).await?;
        let mut key = None;
        for i in 0..1_000 {
            let candidate = format!("safety:linked:{i}");
            if owner_in(&map, keyslot(primary, &candidate).await?) == Some(primary) {
                key = Some(candidate);
                break;
            }
        }
        let key = key.context("no key hashes to the primary")?;
        let deadline = Instant::now() + PATIENCE;
        loop {
            query::<()>(primary, redis::cmd("SET").arg(&key).arg(1)).await?;
            let acked: usize = query(primary, redis::cmd("WAIT").arg(1).arg(500)).await?;
            if acked >= 1 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the replica of {primary} acknowledged no write");
            }
        }
    }

    /// The redirections and retries the running nodes answered so far (`INFO errorstats`):
    /// MOVED, ASK, TRYAGAIN.
    async fn redirections(&self) -> [u64; 3] {
        let mut counts = [0; 3];
        for node in self.running() {
            let text = info(node.port, "errorstats").await;
            for (i, name) in ["MOVED", "ASK", "TRYAGAIN"].iter().enumerate() {
                counts[i] += field(&text, &format!("errorstat_{name}"))
                    .strip_prefix("count=")
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        counts
    }

    fn index_of(&self, port: u16) -> anyhow::Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .with_context(|| format!("no node on {port}"))
    }

    pub(super) async fn stop(mut self) {
        self.heal();
        if let Ok(mut map) = ANNOUNCED.write() {
            for proxy in &self.proxies {
                map.remove(&proxy.port);
            }
        }
        self.proxies.clear();
        for node in &mut self.nodes {
            node.signal(nix::sys::signal::Signal::SIGCONT);
            node.kill9().await;
        }
    }
}
