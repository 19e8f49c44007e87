//! The Sentinel-mode faults: the master killed (a replica promoted, the old master back as
//! a replica or, writable until demoted, as a master), the master cut off from its replicas
//! and Sentinels, the replicas frozen.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;

use super::{Ha, SOURCE_ADDR, info, wait_for};
use crate::cluster::{Cluster, Promotion};

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
        self.await_replicas_linked().await?;
        let rejoined = Instant::now();
        Ok((took, Promotion { promoted, rejoined }))
    }

    /// Waits until every replica (the old master among them) is linked to the settled master.
    /// A second failover leaves the replica promoted first a master of its own until the
    /// Sentinels reconfigure it (10 s in a smoke run: promoted at +0.0 s, the other replica
    /// promoted by another Sentinel at +2.2 s, the first made its replica at +13.1 s), and with
    /// acks from every replica nothing is granted meanwhile: the failover is not over before.
    async fn await_replicas_linked(&mut self) -> anyhow::Result<()> {
        let master = self.redis.port;
        let ports: Vec<u16> = self.ha()?.replicas.iter().map(|r| r.port).collect();
        for port in ports {
            let following = format!("master_port:{master}\r\n");
            wait_for(
                Duration::from_secs(30),
                "every replica to follow the settled master",
                || {
                    let following = following.clone();
                    async move {
                        let text = info(port, "replication").await;
                        text.contains("master_link_status:up") && text.contains(&following)
                    }
                },
            )
            .await?;
        }
        Ok(())
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
            crate::cluster::sh(&args)?;
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
            let _ = crate::cluster::sh(&args);
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
