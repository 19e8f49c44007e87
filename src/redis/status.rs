//! What operators see of the Redis behind this instance: its mode, the master, the replicas
//! with their lag, the acknowledgements asked for and got, and, in Sentinel mode, the
//! failovers followed. One snapshot for the JSON endpoint, the dashboard page and the
//! metrics.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::replication::Replication;
use super::sentinel::Switch;
use super::{AckRule, Redis};

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
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AckStatus {
    /// `--min-replica-acks`: `auto` or a number.
    pub rule: String,
    /// Replicas each grant and heartbeat waits for now (0: none, no `WAIT`).
    pub required: u32,
    pub timeout_ms: u64,
    /// Calls that waited for replicas, since start.
    pub waits: u64,
    /// Of those, how many too few replicas acknowledged (answered 503 `not_replicated`).
    pub not_replicated: u64,
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
    /// A snapshot of what operators see.
    pub fn status(&self) -> RedisStatus {
        let acks = self.acks();
        let settings = acks.settings();
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
            acks: AckStatus {
                rule: match settings.rule {
                    AckRule::Auto => "auto".to_owned(),
                    AckRule::Exactly(n) => n.to_string(),
                },
                required: acks.required(),
                timeout_ms: u64::try_from(settings.timeout.as_millis()).unwrap_or(u64::MAX),
                waits: acks.stats.waits.load(Ordering::Relaxed),
                not_replicated: acks.stats.short.load(Ordering::Relaxed),
                last_acked: acks.stats.last_acked.load(Ordering::Relaxed),
            },
            sentinel,
            cluster,
        }
    }
}
