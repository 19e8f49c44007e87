//! A Redis Cluster on loopback TCP ports: primaries, their replicas, each node in one temp
//! dir, killed on drop or with the test process. Nodes time each other out after 1 s, so a
//! killed primary's replica takes over within seconds. Every question (who owns a slot, who
//! replicates whom) is asked of the running nodes when it is asked: slots move and replicas
//! are promoted, and pairing is redis-cli's choice, not port order.

mod forming;
mod migration;
mod node;

use std::time::{Duration, Instant};

use tempfile::TempDir;

pub use node::{
    Node, Role, SLOTS, SlotRange, cluster_info_at, connect, field, info_at, keyslot_at, owner_in,
    query, role_at, slot_map_at,
};

/// How long the fixture waits for the cluster to form, settle or fail over.
const PATIENCE: Duration = Duration::from_secs(20);

/// A running cluster. Nodes are never removed from `nodes`: a killed one stays, not running.
pub struct Cluster {
    pub nodes: Vec<Node>,
    _dir: TempDir,
}

impl Cluster {
    /// `primaries` primaries sharing the 16384 slots, each with `replicas_per_primary`
    /// replicas. When this returns every node says `cluster_state:ok` and sees the same slot
    /// map, every replica is linked, and each primary has had a write its replicas all
    /// acknowledged. It takes about 2 s whatever the size: a primary says `cluster_state:ok`
    /// no sooner than 2 s after it started (Redis's `CLUSTER_WRITABLE_DELAY`).
    pub async fn start(primaries: usize, replicas_per_primary: usize) -> Self {
        assert!(primaries >= 1, "a cluster needs a primary");
        let dir = tempfile::Builder::new()
            .prefix("lh-cluster")
            .tempdir()
            .expect("temp dir");
        let count = primaries * (1 + replicas_per_primary);
        // Each node's pair stays bound until just before that node starts: a socket made
        // meanwhile (an earlier node's listeners or connections, another test's server)
        // could otherwise take a port let go, and the node would fail to bind it.
        let mut held = Vec::new();
        let ports: Vec<u16> = (0..count)
            .map(|_| node::free_port_pair(&mut held))
            .collect();
        let mut held = held.into_iter();
        let nodes: Vec<Node> = ports
            .iter()
            .map(|&port| {
                // Its port and bus port (held in that order).
                drop((held.next(), held.next()));
                Node::spawn(dir.path(), port)
            })
            .collect();
        let cluster = Self { nodes, _dir: dir };
        for node in &cluster.nodes {
            wait_until(
                Duration::from_secs(10),
                "redis-server to answer",
                async || {
                    query::<String>(&node.addr(), &redis::cmd("PING"))
                        .await
                        .map(drop)
                        .map_err(|e| format!("{}: {e}", node.addr()))
                },
            )
            .await;
        }
        if primaries >= 3 {
            cluster.create(replicas_per_primary).await;
        } else {
            cluster.join_by_hand(primaries).await;
        }
        wait_until(PATIENCE, "the cluster to form", async || {
            cluster.settled().await?;
            cluster.shaped(primaries, count - primaries).await
        })
        .await;
        for (primary, _) in cluster.primaries().await {
            cluster.wait_replicated(&primary).await;
        }
        cluster
    }

    /// Every node's address, comma-separated (`--redis-cluster`'s value).
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(Node::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node listening on `addr`.
    pub fn node(&self, addr: &str) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.addr() == addr)
            .unwrap_or_else(|| panic!("no node at {addr}"))
    }

    fn node_mut(&mut self, addr: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.addr() == addr)
            .unwrap_or_else(|| panic!("no node at {addr}"))
    }

    fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|node| node.is_running())
    }

    /// The first running node: the one asked about the whole cluster.
    fn any(&self) -> String {
        self.running().next().expect("a running node").addr()
    }

    /// The primaries serving slots now, each with its slot ranges, by lowest slot.
    pub async fn primaries(&self) -> Vec<(String, Vec<(u16, u16)>)> {
        let map = slot_map_at(&self.any()).await.expect("CLUSTER SLOTS");
        let mut primaries: Vec<(String, Vec<(u16, u16)>)> = Vec::new();
        for range in map {
            match primaries.iter_mut().find(|(addr, _)| *addr == range.owner) {
                Some((_, ranges)) => ranges.push((range.start, range.end)),
                None => primaries.push((range.owner, vec![(range.start, range.end)])),
            }
        }
        primaries
    }

    /// The address of the primary serving `slot` now.
    pub async fn owner_of_slot(&self, slot: u16) -> String {
        let map = slot_map_at(&self.any()).await.expect("CLUSTER SLOTS");
        owner_in(&map, slot)
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
            .to_owned()
    }

    /// The node serving `slot` now.
    pub async fn primary_node_of_slot(&self, slot: u16) -> &Node {
        let owner = self.owner_of_slot(slot).await;
        self.node(&owner)
    }

    /// A running replica of the primary at `primary_addr`, if it has one.
    pub async fn replica_of(&self, primary_addr: &str) -> Option<&Node> {
        self.replicas_of(primary_addr).await.into_iter().next()
    }

    /// The running replicas of the primary at `primary_addr`, by their own account.
    pub async fn replicas_of(&self, primary_addr: &str) -> Vec<&Node> {
        let mut replicas = Vec::new();
        for node in self.running() {
            if let Ok(Role::Replica { of, .. }) = role_at(&node.addr()).await
                && of == primary_addr
            {
                replicas.push(node);
            }
        }
        replicas
    }

    /// The slot `key` hashes to (`CLUSTER KEYSLOT`).
    pub async fn keyslot(&self, key: &str) -> u16 {
        keyslot_at(&self.any(), key).await
    }

    /// The cluster node id of the node at `addr` (`CLUSTER MYID`).
    pub async fn node_id(&self, addr: &str) -> String {
        query(addr, redis::cmd("CLUSTER").arg("MYID"))
            .await
            .expect("CLUSTER MYID")
    }

    /// A key in one of the slots the primary at `primary_addr` serves now.
    pub async fn key_served_by(&self, primary_addr: &str) -> String {
        let map = slot_map_at(&self.any()).await.expect("CLUSTER SLOTS");
        for i in 0.. {
            let key = format!("fixture:{i}");
            if owner_in(&map, self.keyslot(&key).await) == Some(primary_addr) {
                return key;
            }
        }
        unreachable!("some key hashes to every primary")
    }

    /// Returns once every running replica of the primary at `primary_addr` has acknowledged
    /// a write made on it now, so it has everything the primary had.
    pub async fn wait_replicated(&self, primary_addr: &str) {
        let replicas = self.replicas_of(primary_addr).await.len();
        if replicas == 0 {
            return;
        }
        let key = self.key_served_by(primary_addr).await;
        let mut conn = connect(primary_addr).await.expect("the primary");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(1)
            .query_async(&mut conn)
            .await
            .expect("SET");
        // After a diskless sync the primary streams nothing to a replica (no GETACK, so WAIT
        // cannot count it) until the replica's first acknowledgement, up to a second later:
        // WAIT waits for that one, and returns at once once it came.
        let acked: usize = redis::cmd("WAIT")
            .arg(replicas)
            .arg(15_000)
            .query_async(&mut conn)
            .await
            .expect("WAIT");
        assert_eq!(
            acked, replicas,
            "the replicas of {primary_addr} never acknowledged"
        );
    }

    /// Kills the primary at `primary_addr` with SIGKILL and waits until one of its replicas
    /// took over its slots and every running node says `cluster_state:ok` again. Returns
    /// the new primary's address. Needs a majority of primaries left to vote (three or more
    /// primaries) and a replica.
    pub async fn fail_over_by_killing(&mut self, primary_addr: &str) -> String {
        let replicas: Vec<String> = self
            .replicas_of(primary_addr)
            .await
            .into_iter()
            .map(Node::addr)
            .collect();
        assert!(!replicas.is_empty(), "{primary_addr} has no replica");
        self.node_mut(primary_addr).kill();
        let mut promoted = String::new();
        wait_until(PATIENCE, "a replica to be promoted", async || {
            for replica in &replicas {
                if role_at(replica).await == Ok(Role::Primary) {
                    promoted = replica.clone();
                    return Ok(());
                }
            }
            Err(format!("none of {replicas:?} is a primary"))
        })
        .await;
        self.wait_settled("the cluster to settle after the failover")
            .await;
        promoted
    }

    /// Starts the killed node at `addr` again and waits until the cluster settled with it:
    /// a primary that was failed over comes back as a replica of the one that replaced it.
    pub async fn restart(&mut self, addr: &str) {
        self.node_mut(addr).restart();
        wait_until(PATIENCE, "the node to rejoin", async || {
            match role_at(addr).await.map_err(|e| format!("{addr}: {e}"))? {
                Role::Replica { linked: true, .. } | Role::Primary => Ok(()),
                other => Err(format!("{addr}: {other:?}")),
            }
        })
        .await;
        self.wait_settled("the cluster to settle with the node back")
            .await;
    }

    /// `CLUSTER FAILOVER` on the replica at `replica_addr` (its primary hands over), then
    /// waits until it is the primary and the cluster settled.
    pub async fn manual_failover(&self, replica_addr: &str) {
        let _: () = query(replica_addr, redis::cmd("CLUSTER").arg("FAILOVER"))
            .await
            .expect("CLUSTER FAILOVER");
        wait_until(
            PATIENCE,
            "the replica to be promoted",
            async || match role_at(replica_addr).await {
                Ok(Role::Primary) => Ok(()),
                other => Err(format!("{replica_addr}: {other:?}")),
            },
        )
        .await;
        self.wait_settled("the cluster to settle after the failover")
            .await;
    }

    /// Waits until [`Cluster::settled`] holds.
    pub async fn wait_settled(&self, what: &str) {
        wait_until(PATIENCE, what, async || self.settled().await).await;
    }

    /// Every running node says `cluster_state:ok` and sees the same slot map, covering every
    /// slot with running primaries, and every running replica is linked. Err says what is
    /// not so yet.
    async fn settled(&self) -> Result<(), String> {
        let mut first: Option<Vec<SlotRange>> = None;
        for node in self.running() {
            let addr = node.addr();
            let info = cluster_info_at(&addr)
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            if field(&info, "cluster_state") != "ok" {
                return Err(format!("{addr}: cluster_state not ok"));
            }
            if let Role::Replica { of, linked: false } =
                role_at(&addr).await.map_err(|e| format!("{addr}: {e}"))?
            {
                return Err(format!("{addr}: not linked to {of}"));
            }
            let map = slot_map_at(&addr)
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            match &first {
                Some(seen) if *seen != map => {
                    return Err(format!("{addr} sees {map:?}, another {seen:?}"));
                }
                Some(_) => {}
                None => first = Some(map),
            }
        }
        let map = first.ok_or("no running node")?;
        let covered: u32 = map
            .iter()
            .map(|range| u32::from(range.end) - u32::from(range.start) + 1)
            .sum();
        if covered != SLOTS {
            return Err(format!("{covered} slots served: {map:?}"));
        }
        if let Some(gone) = map
            .iter()
            .find(|range| !self.running().any(|node| node.addr() == range.owner))
        {
            return Err(format!("{} still named as a primary", gone.owner));
        }
        Ok(())
    }
}

/// Polls `check` every 50 ms until it holds, failing the test after `limit` with what the
/// last check said.
pub async fn wait_until(
    limit: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) {
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            started.elapsed() < limit,
            "timed out waiting for {what}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
