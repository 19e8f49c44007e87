//! Redis Cluster mode against a real local cluster (`helpers::cluster`): locks spread over
//! every primary; every operation of every kind keeps its keys in its lock's slot; waiters
//! woken across instances and by Redisson's sharded messages; listing and expiries over
//! every shard; a killed primary's names served again with no fence going back; a slot
//! moved under load with nothing lost or handed to the wrong caller.

mod shards;
mod slots;
mod topology;
mod wakeups;

use std::collections::HashMap;
use std::time::Duration;

use crate::helpers::cluster::Cluster;
use crate::helpers::{AppOptions, TestApp, spawn_app_tweaked};
use leasehold::redis::ClusterSettings;

/// Leasehold on `cluster` (its own standalone `redis` is a bystander).
pub(crate) async fn on_cluster(cluster: &Cluster) -> TestApp {
    on_cluster_with(cluster, AppOptions::default()).await
}

pub(super) async fn on_cluster_with(cluster: &Cluster, options: AppOptions) -> TestApp {
    let nodes: Vec<String> = cluster.seeds().split(',').map(str::to_owned).collect();
    spawn_app_tweaked(options, |config| {
        config.redis.cluster = Some(ClusterSettings {
            nodes,
            username: None,
            password: None,
            tls: false,
        });
        config.redis.acks.timeout = Duration::from_millis(500);
    })
    .await
}

/// Names that land on every primary of `cluster` (at least `per_primary` on each).
pub(crate) async fn names_on_every_primary(
    cluster: &Cluster,
    per_primary: usize,
) -> HashMap<String, Vec<String>> {
    let primaries = cluster.primaries().await;
    let mut by_primary: HashMap<String, Vec<String>> = HashMap::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let slot = cluster.keyslot(&name).await;
        let owner = primaries
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(addr, _)| addr.clone())
            .expect("every slot is served");
        by_primary.entry(owner).or_default().push(name);
        if by_primary.len() == primaries.len()
            && by_primary.values().all(|n| n.len() >= per_primary)
        {
            break;
        }
    }
    by_primary
}

/// The metrics text.
pub(super) async fn scrape(app: &TestApp) -> String {
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.text().await.expect("metrics")
}
