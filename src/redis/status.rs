//! What operators see of the Redis behind this instance: its mode, the master, the replicas
//! with their lag, the acknowledgements asked for and got, and, in Sentinel mode, the
//! failovers followed. One snapshot for the JSON endpoint, the dashboard page and the
//! metrics.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Redis;
use super::acks::Requirement;
use super::replication::Replication;
use super::sentinel::Switch;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RedisStatus {
    /// `standalone`, `sentinel` or `cluster`.
    pub mode: &'static str,
    /// The master's address as this instance knows it; absent while none is known (a
    /// failover in progress).
    pub master: Option<String>,
    /// What the master said of its replicas at the last reading (every second); absent
    /// when it did not answer.
    #[schema(value_type = Option<Object>)]
    pub replication: Option<Replication>,
    pub acks: AckStatus,
    /// Sentinel mode only.
    pub sentinel: Option<SentinelStatus>,
    /// Cluster mode only.
    pub cluster: Option<ClusterStatus>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// The seed nodes it was started with.
    pub seeds: Vec<String>,
    /// Each primary: its slots and replicas (from `CLUSTER SLOTS`, every second) and its
    /// figures (from its `INFO`, every second).
    pub shards: Vec<ShardStatus>,
    /// Whether every one of the 16384 slots is served.
    pub covers_every_slot: bool,
    /// Topology changes seen since start (failovers, slot moves, nodes added).
    pub topology_changes: u64,
    /// The latest of them, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<super::cluster::Change>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ShardStatus {
    pub primary: String,
    pub replicas: Vec<String>,
    /// Slot ranges, `a-b` (or `a` alone).
    pub slots: Vec<String>,
    pub slot_count: u32,
    /// The primary's `INFO` at the last reading; absent when it did not answer.
    pub node: Option<super::replication::NodeReading>,
    /// Replicas each grant on this shard waits for now.
    pub acks_required: u32,
    /// `auto` found no replica to ask here: grants stand on the primary alone (answered
    /// `degraded: no_replica`).
    pub no_replica: bool,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AckStatus {
    /// `--min-replica-acks`: `auto` or a number.
    pub rule: String,
    /// Replicas each grant and heartbeat waits for now (0: none, no `WAIT`); in Cluster
    /// mode, on the shard that asks most (each shard's own is in `cluster.shards`).
    pub required: u32,
    pub timeout_ms: u64,
    /// Calls that waited for replicas, since start.
    pub waits: u64,
    /// Grants and reentries refused because too few replicas acknowledged them (503
    /// `not_replicated`), since start.
    pub not_replicated: u64,
    /// Heartbeats too few replicas acknowledged, answered all the same (`degraded:
    /// not_replicated`), since start.
    pub unacknowledged_heartbeats: u64,
    /// Grants and heartbeats answered on a shard with no replica to ask (`degraded:
    /// no_replica`), since start.
    pub no_replica: u64,
    /// The shards (their primaries) whose grants stand on the primary alone now: `auto`
    /// finds no replica there that a failover could promote.
    pub unreplicated: Vec<String>,
    /// The last `WAIT`'s answer.
    pub last_acked: u32,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SentinelStatus {
    pub sentinels: Vec<String>,
    pub master_name: String,
    /// Masters followed to a new address since start.
    pub failovers: u64,
    /// Milliseconds with no master known, in total.
    pub masterless_ms: u64,
    /// The masters taken on (the first, then each failover), oldest first.
    #[schema(value_type = Vec<Object>)]
    pub switches: Vec<Switch>,
}

impl Redis {
    /// The acknowledgements' part of the snapshot.
    fn ack_status(&self, cluster: Option<&ClusterStatus>) -> AckStatus {
        let acks = self.acks();
        let settings = acks.settings();
        let stats = &acks.stats;
        // The shards and what each asks for now.
        let shards: Vec<(String, Requirement)> = match cluster {
            Some(c) => c
                .shards
                .iter()
                .map(|s| (s.primary.clone(), acks.requirement_at(&s.primary)))
                .collect(),
            None => {
                let master = self.master_addr().unwrap_or_default();
                vec![(master, acks.requirement_at(super::acks::census::THE_MASTER))]
            }
        };
        let short = stats.short.load(Ordering::Relaxed);
        let short_heartbeats = stats.short_heartbeats.load(Ordering::Relaxed);
        AckStatus {
            rule: settings.rule.to_string(),
            required: shards.iter().map(|(_, r)| r.required).max().unwrap_or(0),
            timeout_ms: u64::try_from(settings.timeout.as_millis()).unwrap_or(u64::MAX),
            waits: stats.waits.load(Ordering::Relaxed),
            not_replicated: short.saturating_sub(short_heartbeats),
            unacknowledged_heartbeats: short_heartbeats,
            no_replica: stats.no_replica.load(Ordering::Relaxed),
            unreplicated: shards
                .into_iter()
                .filter(|(_, r)| r.no_replica)
                .map(|(primary, _)| primary)
                .collect(),
            last_acked: stats.last_acked.load(Ordering::Relaxed),
        }
    }

    /// A snapshot of what operators see.
    pub fn status(&self) -> RedisStatus {
        let acks = self.acks();
        let sentinel = self.follower().map(|f| SentinelStatus {
            sentinels: f.settings().sentinels.clone(),
            master_name: f.settings().master_name.clone(),
            failovers: f.stats.failovers.load(Ordering::Relaxed),
            masterless_ms: u64::try_from(f.masterless().as_millis()).unwrap_or(u64::MAX),
            switches: f.switches(),
        });
        let cluster = self.cluster().map(|c| {
            let topology = c.topology();
            let readings = self.replication().nodes();
            ClusterStatus {
                seeds: c.settings().nodes.clone(),
                covers_every_slot: topology.covers_every_slot(),
                shards: topology
                    .shards
                    .iter()
                    .map(|s| ShardStatus {
                        primary: s.primary.clone(),
                        replicas: s.replicas.clone(),
                        slots: s
                            .slots
                            .iter()
                            .map(|(a, b)| {
                                if a == b {
                                    a.to_string()
                                } else {
                                    format!("{a}-{b}")
                                }
                            })
                            .collect(),
                        slot_count: s.slot_count(),
                        node: readings.iter().find(|r| r.addr == s.primary).cloned(),
                        acks_required: acks.requirement_at(&s.primary).required,
                        no_replica: acks.requirement_at(&s.primary).no_replica,
                    })
                    .collect(),
                topology_changes: c.epochs.load(Ordering::Relaxed).saturating_sub(1),
                changes: c.changes(),
            }
        });
        RedisStatus {
            mode: match (&sentinel, &cluster) {
                (_, Some(_)) => "cluster",
                (Some(_), None) => "sentinel",
                (None, None) => "standalone",
            },
            master: self.master_addr(),
            replication: self.replication().last(),
            acks: self.ack_status(cluster.as_ref()),
            sentinel,
            cluster,
        }
    }
}
