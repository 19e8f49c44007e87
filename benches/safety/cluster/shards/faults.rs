//! What the Cluster-mode faults do to the cluster: a primary killed (its replica promoted,
//! the node back as a replica), slots moved key by key to another primary and back, a
//! primary cut off by iptables until its replica is promoted, replies lost by the proxies.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use redis::Value;

use super::nodes::{Role, node_id, owner_in, query, role, setslot, slot_map};
use super::{NODE_ADDRS, NODE_RANGE, PATIENCE, Shards};
use crate::cluster::Cluster;
use crate::cluster::proxy::Proxy;
use crate::cluster::wait_until;

impl Shards {
    /// The primary a fault strikes this `cycle` (see `pick_primary`), its replica, and its
    /// index among the nodes.
    async fn victim(&self, names: &[String], cycle: usize) -> anyhow::Result<(u16, u16, usize)> {
        let victim = self.pick_primary(names, cycle).await?;
        let replica = self
            .replica_of(victim)
            .await
            .with_context(|| format!("{victim} has no replica"))?;
        Ok((victim, replica, self.index_of(victim)?))
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
    pub(in crate::cluster) fn heal(&mut self) {
        for rule in std::mem::take(&mut self.cut) {
            let mut args = vec!["iptables", "-D"];
            args.extend(rule.iter().map(String::as_str));
            let _ = super::super::sh(&args);
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
    ) -> anyhow::Result<(String, super::super::Promotion)> {
        let shards = self.shards()?;
        let (victim, replica, i) = shards.victim(names, cycle).await?;
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
            super::super::Promotion { promoted, rejoined },
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
        let (victim, replica, i) = shards.victim(names, cycle).await?;
        for rule in cut_rules(victim, NODE_ADDRS[i], from_instances) {
            let mut args = vec!["iptables", "-I"];
            args.extend(rule.iter().map(String::as_str));
            super::super::sh(&args)?;
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
