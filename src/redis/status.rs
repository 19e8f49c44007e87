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
    /// `standalone` or `sentinel`.
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
        RedisStatus {
            mode: if sentinel.is_some() {
                "sentinel"
            } else {
                "standalone"
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
        }
    }
}
