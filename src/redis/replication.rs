//! What the master says of its replicas (`INFO replication`, read every second): for the
//! operators' Redis page and metrics, and for the acks rule, which asks a shard's grants
//! for a replica while it has one (see `acks::rule`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Redis;

const READ_EVERY: Duration = Duration::from_secs(1);

/// One replica as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Replica {
    /// `ip:port`.
    pub addr: String,
    /// `online`, `wait_bgsave`, `send_bulk`...
    pub state: String,
    /// The replication offset the replica acknowledged.
    pub offset: u64,
    /// Bytes of the master's stream it has not acknowledged yet.
    pub behind_bytes: u64,
    /// Seconds since its last acknowledgement.
    pub lag_s: u64,
}

/// The master's replication, as read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Replication {
    /// `master`, or `slave` for a node that is not (a standalone Redis that is a replica).
    pub role: String,
    pub master_offset: u64,
    pub replicas: Vec<Replica>,
    /// Replicas this instance saw linked within the last hour that the master no longer
    /// lists (stopped, cut off, or promoted elsewhere): what a failover could not count on.
    pub lost: Vec<LostReplica>,
    /// Wall-clock milliseconds of the reading.
    pub read_at_ms: u64,
}

/// A replica the master listed before and lists no more.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LostReplica {
    /// `ip:port`.
    pub addr: String,
    /// Wall-clock milliseconds of the last reading that listed it.
    pub last_seen_ms: u64,
}

/// How long a lost replica is shown: past it, one that was removed on purpose is forgotten.
const LOST_FOR_MS: u64 = 3_600_000;

impl Replication {
    /// Reads `INFO replication`'s text.
    pub fn parse(info: &str) -> Self {
        let mut role = String::new();
        let mut master_offset: u64 = 0;
        let mut replicas = Vec::new();
        for line in info.lines() {
            let Some((key, value)) = line.trim().split_once(':') else {
                continue;
            };
            match key {
                "role" => role = value.to_owned(),
                "master_repl_offset" => master_offset = value.parse().unwrap_or(0),
                k if k.starts_with("slave") && k[5..].chars().all(|c| c.is_ascii_digit()) => {
                    replicas.push(replica(value));
                }
                _ => {}
            }
        }
        for r in &mut replicas {
            r.behind_bytes = master_offset.saturating_sub(r.offset);
        }
        Self {
            role,
            master_offset,
            replicas,
            lost: Vec::new(),
            read_at_ms: super::wall_ms(),
        }
    }

    /// Replicas linked now.
    pub fn online(&self) -> usize {
        self.replicas.iter().filter(|r| r.state == "online").count()
    }
}

/// `ip=127.0.0.1,port=7201,state=online,offset=123,lag=0`.
fn replica(value: &str) -> Replica {
    let field = |name: &str| {
        value
            .split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_default()
    };
    Replica {
        addr: format!("{}:{}", field("ip"), field("port")),
        state: field("state").to_owned(),
        offset: field("offset").parse().unwrap_or(0),
        behind_bytes: 0,
        lag_s: field("lag").parse().unwrap_or(0),
    }
}

/// One primary of a cluster, as its `INFO` said at the last reading.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct NodeReading {
    /// `host:port`.
    pub addr: String,
    /// Keys in its database 0.
    pub keys: u64,
    /// Commands per second, as Redis measures it (`instantaneous_ops_per_sec`).
    pub ops_per_sec: u64,
    pub used_memory_bytes: u64,
    /// Replicas linked now.
    pub replicas_online: u64,
}

impl NodeReading {
    /// Reads `INFO replication stats keyspace memory`'s text.
    fn parse(addr: &str, info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_default()
        };
        let number = |name: &str| field(name).parse().unwrap_or(0);
        // `db0:keys=12,expires=3,avg_ttl=0`.
        let keys = field("db0")
            .split(',')
            .find_map(|kv| kv.strip_prefix("keys="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Self {
            addr: addr.to_owned(),
            keys,
            ops_per_sec: number("instantaneous_ops_per_sec"),
            used_memory_bytes: number("used_memory"),
            replicas_online: Replication::parse(info).online() as u64,
        }
    }
}

/// The last reading, shared.
#[derive(Debug, Default)]
pub struct ReplicationView {
    last: Mutex<Option<Replication>>,
    /// Cluster mode: each primary's.
    nodes: Mutex<Vec<NodeReading>>,
    /// Every replica address seen linked, with when it was last (wall-clock ms).
    seen: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl ReplicationView {
    /// The last reading, with the replicas seen before and missing from it as `lost`.
    pub fn last(&self) -> Option<Replication> {
        let mut last = self.last.lock().ok().and_then(|l| l.clone())?;
        if let Ok(seen) = self.seen.lock() {
            last.lost = seen
                .iter()
                .filter(|(addr, at)| {
                    last.read_at_ms.saturating_sub(**at) < LOST_FOR_MS
                        && !last.replicas.iter().any(|r| &r.addr == *addr)
                })
                .map(|(addr, at)| LostReplica {
                    addr: addr.clone(),
                    last_seen_ms: *at,
                })
                .collect();
        }
        Some(last)
    }

    /// Cluster mode: each primary as last read (empty otherwise).
    pub fn nodes(&self) -> Vec<NodeReading> {
        self.nodes.lock().map(|n| n.clone()).unwrap_or_default()
    }

    fn set(&self, reading: Option<Replication>) {
        if let (Some(r), Ok(mut seen)) = (&reading, self.seen.lock()) {
            for replica in &r.replicas {
                seen.insert(replica.addr.clone(), r.read_at_ms);
            }
        }
        if let Ok(mut last) = self.last.lock() {
            *last = reading;
        }
    }
}

/// The master's replication; in a cluster, the primary with the fewest replicas, and each
/// primary's figures. Each primary's linked replicas go to the acks census as they are read.
async fn read(redis: &Redis) -> Option<Replication> {
    let mut fewest: Option<Replication> = None;
    let mut nodes = Vec::new();
    let mut unanswered = false;
    let census = redis.acks.census();
    let all = redis.nodes();
    census.keep_only(&all.iter().flatten().cloned().collect::<Vec<_>>());
    for node in all {
        let mut cmd = ::redis::cmd("INFO");
        cmd.arg("replication");
        if node.is_some() {
            cmd.arg("stats").arg("keyspace").arg("memory");
        }
        // A primary that does not answer has no figures this time (the Redis page shows it
        // down), and the others' (and their linked replicas, for the acks) are still taken;
        // the reading as a whole is none, as before.
        let Ok(text) = redis.on_node::<String>(node.as_deref(), cmd).await else {
            unanswered = true;
            continue;
        };
        let read = Replication::parse(&text);
        census.linked(
            node.as_deref().unwrap_or(super::acks::census::THE_MASTER),
            u32::try_from(read.replicas.len()).unwrap_or(u32::MAX),
        );
        if let Some(addr) = &node {
            nodes.push(NodeReading::parse(addr, &text));
        }
        if fewest
            .as_ref()
            .is_none_or(|f| read.replicas.len() < f.replicas.len())
        {
            fewest = Some(read);
        }
    }
    if let Ok(mut last) = redis.replication.nodes.lock() {
        *last = nodes;
    }
    if unanswered {
        return None;
    }
    fewest
}

/// Reads the master's replication every second until `shutdown`.
pub(super) fn spawn(redis: Redis, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(READ_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let reading = tokio::select! {
                reading = read(&redis) => reading,
                () = shutdown.cancelled() => return,
            };
            redis.replication.set(reading);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_replication_reads_into_replicas_and_their_lag() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=127.0.0.1,port=7201,state=online,offset=1000,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7202,state=wait_bgsave,offset=0,lag=3\r\n\
            master_failover_state:no-failover\r\nmaster_repl_offset:1200\r\n";
        let r = Replication::parse(info);
        assert_eq!(r.role, "master");
        assert_eq!(r.master_offset, 1200);
        assert_eq!(r.online(), 1);
        assert_eq!(r.replicas[0].addr, "127.0.0.1:7201");
        assert_eq!(r.replicas[0].behind_bytes, 200);
        assert_eq!(r.replicas[1].state, "wait_bgsave");
        assert_eq!(r.replicas[1].lag_s, 3);
    }

    #[test]
    fn a_primarys_info_reads_into_keys_ops_memory_and_replicas() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
            slave0:ip=127.0.0.1,port=7004,state=online,offset=10,lag=0\r\n\
            # Stats\r\ninstantaneous_ops_per_sec:1234\r\n# Memory\r\nused_memory:2048\r\n\
            # Keyspace\r\ndb0:keys=12,expires=3,avg_ttl=0\r\n";
        let node = NodeReading::parse("127.0.0.1:7001", info);
        assert_eq!(
            node,
            NodeReading {
                addr: "127.0.0.1:7001".to_owned(),
                keys: 12,
                ops_per_sec: 1234,
                used_memory_bytes: 2048,
                replicas_online: 1,
            }
        );
    }

    #[test]
    fn a_master_without_replicas_lists_none() {
        let r = Replication::parse("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n");
        assert!(r.replicas.is_empty());
        assert_eq!(r.online(), 0);
    }
}
