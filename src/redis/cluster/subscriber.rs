//! The subscriber in Cluster mode: the standalone subscriber once per primary for what is
//! node-local (the expired-key notifications: each node tells only of its own keys), the
//! held-while-needed channels (the events, published with a classic `PUBLISH`, which the
//! cluster bus copies to every node) on the first primary's only, and the sharded
//! subscriptions on a connection of their own ([`super::sharded`]). The per-primary
//! subscribers are started again whenever the set of primaries changes (a failover, a node
//! added or removed).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use super::sharded::{self, ShardedGates};
use crate::redis::subscriber::{self, Route, Source, SubscriberStatus, Topics};

/// How often the combined status is worked out from the per-primary ones.
const STATUS_EVERY: Duration = Duration::from_millis(200);

/// Starts the cluster's subscribers; they run until `shutdown`.
pub(in crate::redis) fn spawn(
    cluster: Arc<Cluster>,
    topics: Topics,
    routes: Vec<Arc<dyn Route>>,
    gates: Option<Arc<ShardedGates>>,
    timeout: Duration,
    shutdown: CancellationToken,
) -> (Arc<SubscriberStatus>, JoinHandle<()>) {
    let status = Arc::new(SubscriberStatus::default());
    let task = tokio::spawn(run(
        cluster,
        topics,
        routes,
        gates,
        timeout,
        status.clone(),
        shutdown,
    ));
    (status, task)
}

async fn run(
    cluster: Arc<Cluster>,
    topics: Topics,
    routes: Vec<Arc<dyn Route>>,
    gates: Option<Arc<ShardedGates>>,
    timeout: Duration,
    status: Arc<SubscriberStatus>,
    shutdown: CancellationToken,
) {
    let sharded = gates.map(|gates| {
        tokio::spawn(sharded::run(
            cluster.clone(),
            gates,
            routes.clone(),
            timeout,
            shutdown.clone(),
        ))
    });
    let mut topology = cluster.watch();
    let mut reconnects_before = 0;
    loop {
        let primaries = topology.borrow_and_update().primaries();
        let round = shutdown.child_token();
        let mut children = Vec::new();
        for (i, addr) in primaries.iter().enumerate() {
            let client = match cluster.settings().node_client(addr) {
                Ok(client) => client,
                Err(e) => {
                    tracing::warn!(error = %e, node = %addr, "cannot reach a primary to listen on");
                    continue;
                }
            };
            let node_topics = Topics {
                always: topics.always.clone(),
                always_what: topics.always_what,
                gated: if i == 0 {
                    topics.gated.clone()
                } else {
                    Vec::new()
                },
            };
            children.push(subscriber::spawn(
                Source::Fixed(Box::new(client)),
                node_topics,
                routes.clone(),
                round.clone(),
            ));
        }
        let mut tick = tokio::time::interval(STATUS_EVERY);
        let stop = loop {
            tokio::select! {
                _ = tick.tick() => {
                    let all = !children.is_empty()
                        && children.iter().all(|(s, _)| s.is_connected());
                    status.set_connected(all);
                    let reconnects: u64 = children.iter().map(|(s, _)| s.reconnects()).sum();
                    status
                        .reconnects_add(reconnects.saturating_sub(reconnects_before));
                    reconnects_before = reconnects;
                }
                changed = topology.changed() => {
                    if changed.is_err() {
                        break true;
                    }
                    if topology.borrow().primaries() != primaries {
                        break false;
                    }
                }
                () = shutdown.cancelled() => break true,
            }
        };
        round.cancel();
        for (_, task) in children {
            let _ = task.await;
        }
        status.set_connected(false);
        if stop {
            break;
        }
        if !primaries.is_empty() {
            status.reconnects_add(1);
        }
        reconnects_before = 0;
        tracing::info!("the cluster's primaries changed: listening on the new ones");
    }
    if let Some(task) = sharded {
        let _ = task.await;
    }
}
