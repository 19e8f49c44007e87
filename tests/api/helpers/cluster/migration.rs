//! Moving one slot to another primary by hand, as `redis-cli --cluster reshard` does: the
//! target imports it, the source migrates it, keys move in batches (`MIGRATE`), then every
//! primary is told the new owner. While keys are split between the two, a client asking the
//! source for a key already moved gets `ASK` (and a script over keys on both sides gets
//! `TRYAGAIN`): the slow variant holds that state long enough for a test to see it.

use std::time::Duration;

use redis::Value;

use super::{Cluster, Role, owner_in, query, role_at, slot_map_at};

impl Cluster {
    /// Moves `slot` and its keys to the primary at `to_addr`, 100 keys at a time; returns
    /// once every running node sees `to_addr` serve it.
    pub async fn migrate_slot(&self, slot: u16, to_addr: &str) {
        self.migrate(slot, to_addr, 100, None).await;
    }

    /// Moves `slot` to `to_addr` one key at a time, pausing `pause_between_batches` after
    /// each key, so a test's requests meet a slot whose keys are on both nodes.
    pub async fn migrate_slot_slowly(
        &self,
        slot: u16,
        to_addr: &str,
        pause_between_batches: Duration,
    ) {
        self.migrate(slot, to_addr, 1, Some(pause_between_batches))
            .await;
    }

    async fn migrate(&self, slot: u16, to_addr: &str, batch: usize, pause: Option<Duration>) {
        let from_addr = self.owner_of_slot(slot).await;
        assert_ne!(from_addr, to_addr, "{to_addr} already serves slot {slot}");
        let (from_id, to_id) = (self.node_id(&from_addr).await, self.node_id(to_addr).await);
        // The target first: once the source says MIGRATING it sends clients there with ASK.
        setslot(to_addr, slot, "IMPORTING", &from_id).await;
        setslot(&from_addr, slot, "MIGRATING", &to_id).await;
        let (host, port) = to_addr.rsplit_once(':').expect("host:port");
        loop {
            let keys: Vec<String> = query(
                &from_addr,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            )
            .await
            .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            // OK, or NOKEY when they all expired in between.
            let _: Value = query(
                &from_addr,
                redis::cmd("MIGRATE")
                    .arg(host)
                    .arg(port)
                    .arg("")
                    .arg(0)
                    .arg(5_000)
                    .arg("KEYS")
                    .arg(&keys),
            )
            .await
            .unwrap_or_else(|e| panic!("MIGRATE {keys:?} to {to_addr}: {e}"));
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
        // The target first, so it serves the slot before the source sends clients to it
        // (MOVED); then the source, then every other primary (replicas learn from theirs).
        setslot(to_addr, slot, "NODE", &to_id).await;
        setslot(&from_addr, slot, "NODE", &to_id).await;
        for node in self.running() {
            let addr = node.addr();
            if addr != to_addr
                && addr != from_addr
                && role_at(&addr).await.expect("ROLE") == Role::Primary
            {
                setslot(&addr, slot, "NODE", &to_id).await;
            }
        }
        super::wait_until(
            super::PATIENCE,
            "every node to see the slot moved",
            async || {
                for node in self.running() {
                    let addr = node.addr();
                    let map = slot_map_at(&addr).await.map_err(|e| e.to_string())?;
                    let owner = owner_in(&map, slot);
                    if owner != Some(to_addr) {
                        return Err(format!("{addr} sees {owner:?} serve slot {slot}"));
                    }
                }
                Ok(())
            },
        )
        .await;
    }
}

/// `CLUSTER SETSLOT slot state id` on the node at `addr`.
async fn setslot(addr: &str, slot: u16, state: &str, id: &str) {
    let _: () = query(
        addr,
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id),
    )
    .await
    .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on {addr}: {e}"));
}
