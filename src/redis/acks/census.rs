//! The replicas linked to each primary now, read every second from the primary's `INFO
//! replication` (see `replication.rs`). What the failover authority could promote is read
//! where it is kept: the Sentinels' census by the follower, the cluster's by the topology.

use std::collections::HashMap;
use std::sync::Mutex;

/// The readings, shared by the readers and every call that waits for replicas.
#[derive(Debug, Default)]
pub struct Census {
    /// Replicas linked now, by primary address (`""` for the one master of standalone and
    /// Sentinel mode).
    linked: Mutex<HashMap<String, u32>>,
}

/// The key of the one master outside Cluster mode.
pub const THE_MASTER: &str = "";

impl Census {
    /// The primary at `node` has `linked` replicas linked now.
    pub fn linked(&self, node: &str, linked: u32) {
        if let Ok(mut map) = self.linked.lock() {
            match map.get_mut(node) {
                Some(n) => *n = linked,
                None => {
                    map.insert(node.to_owned(), linked);
                }
            }
        }
    }

    /// Forgets the primaries not in `nodes` (Cluster mode: gone from the topology).
    pub fn keep_only(&self, nodes: &[String]) {
        if let Ok(mut map) = self.linked.lock() {
            map.retain(|node, _| node == THE_MASTER || nodes.iter().any(|n| n == node));
        }
    }

    /// Replicas linked to the primary at `node`, as last read (0 before the first reading).
    pub fn linked_to(&self, node: &str) -> u32 {
        self.linked
            .lock()
            .ok()
            .and_then(|map| map.get(node).copied())
            .unwrap_or(0)
    }
}
