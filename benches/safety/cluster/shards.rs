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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use redis::{FromRedisValue, Value};

use super::ha::info;
use super::proxy::Proxy;
use super::{Cluster, Persistence, RedisProc};

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

/// The node's own port for a port the cluster named.
fn own_port(port: u16) -> u16 {
    ANNOUNCED
        .read()
        .ok()
        .and_then(|map| map.get(&port).copied())
        .unwrap_or(port)
}

/// A node's replication role, by its own account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Primary,
    Replica { of: u16, linked: bool },
}

/// A loopback port free now whose bus port (port + 10000) is free too; both stay bound in
/// `held` (the port, then its bus port) until the caller drops them, so that no later pick
/// takes an earlier one's bus port.
fn free_port_pair(held: &mut Vec<std::net::TcpListener>) -> anyhow::Result<u16> {
    for _ in 0..1_000 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if let Ok(bus_listener) = std::net::TcpListener::bind(("127.0.0.1", bus)) {
            held.push(listener);
            held.push(bus_listener);
            return Ok(port);
        }
    }
    bail!("no free port pair (port, port + 10000) in 1000 tries")
}

/// `cmd` sent to the node on `port` alone (no redirect followed), on a connection of its own
/// that gives up on a dead node within a second and on any answer within 12 s (a MIGRATE may
/// take a while).
async fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> anyhow::Result<T> {
    let ask = async {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(10)));
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        cmd.query_async::<T>(&mut conn).await
    };
    match tokio::time::timeout(Duration::from_secs(12), ask).await {
        Ok(result) => result.with_context(|| format!("127.0.0.1:{port}")),
        Err(_) => bail!("127.0.0.1:{port} did not answer within 12 s"),
    }
}

fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .find(|(k, _)| *k == name)
        .map_or("", |(_, v)| v)
}

async fn role(port: u16) -> Option<Role> {
    let text = info(port, "replication").await;
    match field(&text, "role") {
        "master" => Some(Role::Primary),
        "slave" => Some(Role::Replica {
            of: own_port(field(&text, "master_port").parse().unwrap_or(0)),
            linked: field(&text, "master_link_status") == "up",
        }),
        _ => None,
    }
}

/// The slot map as the node on `port` sees it (`CLUSTER SLOTS`): (first, last, owner's port),
/// by first slot.
async fn slot_map(port: u16) -> anyhow::Result<Vec<(u16, u16, u16)>> {
    let entries: Vec<Vec<Value>> = query(port, redis::cmd("CLUSTER").arg("SLOTS")).await?;
    let mut map = Vec::new();
    for entry in entries {
        let (Some(start), Some(end), Some(Value::Array(primary))) =
            (entry.first(), entry.get(1), entry.get(2))
        else {
            bail!("a short CLUSTER SLOTS entry");
        };
        let start: u16 = redis::from_redis_value(start.clone())?;
        let end: u16 = redis::from_redis_value(end.clone())?;
        let owner: u16 = redis::from_redis_value(primary.get(1).context("no port")?.clone())?;
        map.push((start, end, own_port(owner)));
    }
    map.sort_unstable();
    Ok(map)
}

fn owner_in(map: &[(u16, u16, u16)], slot: u16) -> Option<u16> {
    map.iter()
        .find(|&&(start, end, _)| (start..=end).contains(&slot))
        .map(|&(_, _, owner)| owner)
}

async fn keyslot(port: u16, key: &str) -> anyhow::Result<u16> {
    query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
}

async fn node_id(port: u16) -> anyhow::Result<String> {
    query(port, redis::cmd("CLUSTER").arg("MYID")).await
}

async fn setslot(port: u16, slot: u16, state: &str, id: &str) -> anyhow::Result<()> {
    query::<()>(
        port,
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id),
    )
    .await
    .with_context(|| format!("CLUSTER SETSLOT {slot} {state}"))
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

    /// Moves `slot` from the primary on `from` to the one on `to` as `redis-cli --cluster
    /// reshard` does, but a key at a time with `pause` after each of the first 10 (then 20 at
    /// a time): the target imports, the source migrates (clients meet ASK for keys already
    /// moved and TRYAGAIN for calls over keys on both sides), then every primary is told the
    /// new owner (MOVED from then on). Returns the keys moved.
    async fn migrate_slot(
        &self,
        slot: u16,
        from: u16,
        to: u16,
        pause: Duration,
    ) -> anyhow::Result<usize> {
        let (from_id, to_id) = (node_id(from).await?, node_id(to).await?);
        setslot(to, slot, "IMPORTING", &from_id).await?;
        setslot(from, slot, "MIGRATING", &to_id).await?;
        let mut moved = 0;
        loop {
            let batch = if moved < 10 { 1 } else { 20 };
            let keys: Vec<String> = query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            )
            .await?;
            if keys.is_empty() {
                break;
            }
            // OK, or NOKEY when they expired in between.
            let migrate = |keys: &[String], replace: bool| {
                let mut cmd = redis::cmd("MIGRATE");
                cmd.arg("127.0.0.1").arg(to).arg("").arg(0).arg(5_000);
                if replace {
                    cmd.arg("REPLACE");
                }
                cmd.arg("KEYS").arg(keys);
                cmd
            };
            if let Err(e) = query::<Value>(from, &migrate(&keys, false)).await {
                if !format!("{e:#}").contains("BUSYKEY") {
                    return Err(e.context(format!("MIGRATE {keys:?} to {to}")));
                }
                // A key is on both sides: a call wrote it on the importing node (sent there
                // with ASK because every key it declared was missing here) while this copy
                // was still here, which only a key its function touches without declaring
                // it can do. Each such key is said, then moved as `redis-cli --cluster fix
                // --cluster-replace` would (this copy wins), so that the slot can be closed.
                let mut both = Vec::new();
                for key in &keys {
                    let one = std::slice::from_ref(key);
                    if let Err(e) = query::<Value>(from, &migrate(one, false)).await {
                        if !format!("{e:#}").contains("BUSYKEY") {
                            return Err(e.context(format!("MIGRATE {key} to {to}")));
                        }
                        query::<Value>(from, &migrate(one, true))
                            .await
                            .with_context(|| format!("MIGRATE REPLACE {key} to {to}"))?;
                        both.push(key.clone());
                    }
                }
                eprintln!(
                    "safety: slot {slot}: {both:?} on both {from} and {to} (written on the \
                     importing node while still here: a key a function touches without \
                     declaring it?); moved with REPLACE"
                );
                self.split_keys.fetch_add(both.len(), Ordering::Relaxed);
            }
            moved += keys.len();
            tokio::time::sleep(if batch == 1 {
                pause
            } else {
                Duration::from_millis(20)
            })
            .await;
        }
        // The target first, so it serves the slot before the source sends clients to it.
        setslot(to, slot, "NODE", &to_id).await?;
        setslot(from, slot, "NODE", &to_id).await?;
        for node in self.running() {
            if node.port != to && node.port != from && role(node.port).await == Some(Role::Primary)
            {
                setslot(node.port, slot, "NODE", &to_id).await?;
            }
        }
        wait_until(
            PATIENCE,
            "every node to see the slot moved",
            move || async move {
                for node in self.running() {
                    let map = slot_map(node.port).await.map_err(|e| format!("{e:#}"))?;
                    if owner_in(&map, slot) != Some(to) {
                        return Err(format!("{} does not see {to} serve {slot}", node.port));
                    }
                }
                Ok(())
            },
        )
        .await?;
        Ok(moved)
    }

    /// Removes the rules of a partition in force.
    pub(super) fn heal(&mut self) {
        for rule in std::mem::take(&mut self.cut) {
            let mut args = vec!["iptables", "-D"];
            args.extend(rule.iter().map(String::as_str));
            let _ = super::sh(&args);
        }
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

/// iptables rules (after `-I`/`-D`) that cut the node on `port`, which connects out from
/// `source`, off from every other node: its cluster bus both ways, what it connects to, and
/// its data port for the other nodes (replication); with `from_instances` also for everyone
/// else (the instances and the harness, from 127.0.0.1).
fn cut_rules(port: u16, source: &str, from_instances: bool) -> Vec<Vec<String>> {
    let data = port.to_string();
    let bus = (u32::from(port) + 10_000).to_string();
    let peers: &[&str] = if from_instances {
        &[]
    } else {
        &["-s", NODE_RANGE]
    };
    let peers_back: &[&str] = if from_instances {
        &[]
    } else {
        &["-d", NODE_RANGE]
    };
    let rule = |parts: &[&[&str]]| -> Vec<String> {
        let mut r: Vec<String> = ["INPUT", "-i", "lo"].map(String::from).to_vec();
        for part in parts {
            r.extend(part.iter().map(|s| (*s).to_owned()));
        }
        r.extend(["-j", "DROP"].map(String::from));
        r
    };
    vec![
        rule(&[peers, &["-p", "tcp", "--dport", &data]]),
        rule(&[peers_back, &["-p", "tcp", "--sport", &data]]),
        rule(&[&["-p", "tcp", "--dport", &bus]]),
        rule(&[&["-p", "tcp", "--sport", &bus]]),
        rule(&[&["-s", source]]),
        rule(&[&["-d", source]]),
    ]
}

impl Cluster {
    fn shards(&mut self) -> anyhow::Result<&mut Shards> {
        self.shards.as_mut().context("not in Cluster mode")
    }

    /// Cluster mode: the names each primary serves (ports), by primary.
    pub async fn shard_spread(
        &mut self,
        names: &[String],
    ) -> anyhow::Result<Vec<(u16, Vec<String>)>> {
        self.shards()?.spread(names).await
    }

    /// `kill -9` of the primary serving the most of `names` (the next one each `cycle`); once
    /// its replica is promoted, the node stays down `down_for` (its shard has no replica
    /// meanwhile, as after a real crash), then restarts (empty) and rejoins as the replica of
    /// its old replica. Returns what happened, and when.
    pub async fn kill_primary(
        &mut self,
        names: &[String],
        cycle: usize,
        down_for: Duration,
    ) -> anyhow::Result<(String, super::Promotion)> {
        let shards = self.shards()?;
        let victim = shards.pick_primary(names, cycle).await?;
        let replica = shards
            .replica_of(victim)
            .await
            .with_context(|| format!("{victim} has no replica"))?;
        let i = shards.index_of(victim)?;
        let killed = Instant::now();
        shards.nodes[i].kill9().await;
        wait_until(PATIENCE, "the replica to be promoted", move || async move {
            match role(replica).await {
                Some(Role::Primary) => Ok(()),
                other => Err(format!("{replica}: {other:?}")),
            }
        })
        .await?;
        let promoted = Instant::now();
        let took = promoted - killed;
        tokio::time::sleep(down_for).await;
        shards.nodes[i].start().await?;
        shards.await_rejoined(victim, replica).await?;
        let rejoined = Instant::now();
        Ok((
            format!(
                "primary {victim} killed, replica {replica} promoted after {} ms, {victim} \
                 back as its replica {} ms later",
                took.as_millis(),
                (rejoined - promoted).as_millis()
            ),
            super::Promotion { promoted, rejoined },
        ))
    }

    /// Moves up to 3 slots holding `names` from the primary serving the most of them (the
    /// next one each `cycle`) to another primary, a key at a time with `pause` between, and
    /// then back. Returns what moved.
    pub async fn migrate_slots(
        &mut self,
        names: &[String],
        cycle: usize,
        pause: Duration,
    ) -> anyhow::Result<String> {
        let shards = self.shards()?;
        let from = shards.pick_primary(names, cycle).await?;
        let primaries: Vec<u16> = shards.primaries().await?.into_iter().map(|p| p.0).collect();
        let pos = primaries.iter().position(|&p| p == from).unwrap_or(0);
        let to = primaries[(pos + 1) % primaries.len()];
        let mut slots: Vec<u16> = shards
            .slots_of(names)
            .await?
            .into_iter()
            .filter(|&(_, _, owner)| owner == from)
            .map(|(_, slot, _)| slot)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots.truncate(3);
        let (mut out, mut back) = (0, 0);
        let before = shards.redirections().await;
        let split = shards.split_keys.load(Ordering::Relaxed);
        for &slot in &slots {
            out += shards.migrate_slot(slot, from, to, pause).await?;
        }
        for &slot in &slots {
            back += shards.migrate_slot(slot, to, from, pause).await?;
        }
        let after = shards.redirections().await;
        Ok(format!(
            "slots {slots:?} moved {from} -> {to} ({out} keys) and back ({back} keys); the \
             nodes answered MOVED {}, ASK {}, TRYAGAIN {} meanwhile; {} keys found on both sides",
            after[0].saturating_sub(before[0]),
            after[1].saturating_sub(before[1]),
            after[2].saturating_sub(before[2]),
            shards.split_keys.load(Ordering::Relaxed) - split
        ))
    }

    /// Cuts the primary serving the most of `names` (the next one each `cycle`) off from the
    /// other nodes, and with `from_instances` from the instances too, until its replica is
    /// promoted; a second later heals the cut and waits for it to rejoin as a replica.
    pub async fn partition_primary(
        &mut self,
        names: &[String],
        cycle: usize,
        from_instances: bool,
    ) -> anyhow::Result<String> {
        let shards = self.shards()?;
        let victim = shards.pick_primary(names, cycle).await?;
        let replica = shards
            .replica_of(victim)
            .await
            .with_context(|| format!("{victim} has no replica"))?;
        let i = shards.index_of(victim)?;
        for rule in cut_rules(victim, NODE_ADDRS[i], from_instances) {
            let mut args = vec!["iptables", "-I"];
            args.extend(rule.iter().map(String::as_str));
            super::sh(&args)?;
            shards.cut.push(rule);
        }
        let cut = Instant::now();
        let promoted = wait_until(PATIENCE, "the replica to be promoted", move || async move {
            match role(replica).await {
                Some(Role::Primary) => Ok(()),
                other => Err(format!("{replica}: {other:?}")),
            }
        })
        .await;
        let took = cut.elapsed();
        // Cut off a moment longer: the instances must move on their own, not because the old
        // primary came back as a replica.
        tokio::time::sleep(Duration::from_secs(1)).await;
        shards.heal();
        promoted?;
        shards.await_rejoined(victim, replica).await?;
        Ok(format!(
            "primary {victim} cut off{}, replica {replica} promoted after {} ms",
            if from_instances {
                " (from the instances too)"
            } else {
                " (the instances still reach it)"
            },
            took.as_millis()
        ))
    }
}

impl Cluster {
    /// Arms every node's proxy for `duration`: connections from the instances are cut right
    /// after a request with an FCALL went through, before its reply comes back. Returns how
    /// many were cut.
    pub async fn lose_replies(&mut self, duration: Duration) -> anyhow::Result<u64> {
        let shards = self.shards()?;
        if shards.proxies.is_empty() {
            bail!("the nodes have no proxies");
        }
        let before: u64 = shards.proxies.iter().map(Proxy::cuts).sum();
        for proxy in &shards.proxies {
            proxy.arm(true);
        }
        tokio::time::sleep(duration).await;
        for proxy in &shards.proxies {
            proxy.arm(false);
        }
        Ok(shards.proxies.iter().map(Proxy::cuts).sum::<u64>() - before)
    }
}

impl Shards {
    /// Waits until the node on `old` is a linked replica of `new`, the cluster settled, and
    /// `new`'s replica acknowledged a write.
    async fn await_rejoined(&self, old: u16, new: u16) -> anyhow::Result<()> {
        wait_until(
            PATIENCE,
            "the old primary to rejoin as a replica",
            move || async move {
                match role(old).await {
                    Some(Role::Replica { of, linked: true }) if of == new => Ok(()),
                    other => Err(format!("{old}: {other:?}")),
                }
            },
        )
        .await?;
        wait_until(PATIENCE, "the cluster to settle", || self.settled()).await?;
        self.wait_replicated(new).await
    }
}
