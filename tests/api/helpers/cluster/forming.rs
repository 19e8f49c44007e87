//! Forming the cluster: `redis-cli --cluster create` for three primaries or more (it
//! refuses fewer), the same steps by hand otherwise.

use super::super::children;
use super::{Cluster, Node, PATIENCE, Role, SLOTS, query, role_at, wait_until};

impl Cluster {
    /// `redis-cli --cluster create`: it refuses fewer than three primaries.
    pub(super) async fn create(&self, replicas_per_primary: usize) {
        let mut command = children::guarded("redis-cli");
        command
            .arg("--cluster")
            .arg("create")
            .args(self.nodes.iter().map(Node::addr))
            .arg("--cluster-replicas")
            .arg(replicas_per_primary.to_string())
            .arg("--cluster-yes");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("join redis-cli")
            .expect("run redis-cli");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// What `redis-cli --cluster create` does, for one or two primaries: the first
    /// `primaries` nodes share the slots, every node meets the first, each other node
    /// replicates a primary in turn.
    pub(super) async fn join_by_hand(&self, primaries: usize) {
        let first = self.nodes[0].addr();
        for (i, node) in self.nodes.iter().take(primaries).enumerate() {
            let start = i as u32 * SLOTS / primaries as u32;
            let end = (i as u32 + 1) * SLOTS / primaries as u32 - 1;
            // Distinct epochs before meeting, so no collision has to be resolved first.
            let _: () = query(
                &node.addr(),
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )
            .await
            .expect("CLUSTER SET-CONFIG-EPOCH");
            let _: () = query(
                &node.addr(),
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(start)
                    .arg(end),
            )
            .await
            .expect("CLUSTER ADDSLOTSRANGE");
        }
        for node in &self.nodes[1..] {
            let _: () = query(
                &first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port),
            )
            .await
            .expect("CLUSTER MEET");
        }
        // A node met is first known under a made-up id (handshake): REPLICATE needs the
        // primary's real one.
        let mut ids = Vec::new();
        for node in &self.nodes {
            ids.push(self.node_id(&node.addr()).await);
        }
        wait_until(PATIENCE, "every node to know every other", async || {
            for node in &self.nodes {
                let table: String = query(&node.addr(), redis::cmd("CLUSTER").arg("NODES"))
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(id) = ids.iter().find(|id| !table.contains(id.as_str())) {
                    return Err(format!("{} does not know {id} yet", node.addr()));
                }
                if table.contains("handshake") {
                    return Err(format!("{} is still in a handshake", node.addr()));
                }
            }
            Ok(())
        })
        .await;
        for (i, replica) in self.nodes.iter().enumerate().skip(primaries) {
            let primary = self.node_id(&self.nodes[i % primaries].addr()).await;
            let _: () = query(
                &replica.addr(),
                redis::cmd("CLUSTER").arg("REPLICATE").arg(primary),
            )
            .await
            .expect("CLUSTER REPLICATE");
        }
    }

    /// `primaries` primaries serve slots and `replicas` nodes replicate one.
    pub(super) async fn shaped(&self, primaries: usize, replicas: usize) -> Result<(), String> {
        let serving = self.primaries().await.len();
        let mut replicating = 0;
        for node in self.running() {
            if let Ok(Role::Replica { .. }) = role_at(&node.addr()).await {
                replicating += 1;
            }
        }
        if (serving, replicating) == (primaries, replicas) {
            Ok(())
        } else {
            Err(format!("{serving} primaries, {replicating} replicas"))
        }
    }
}
