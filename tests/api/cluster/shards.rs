//! What is seen over every shard: the listing pages through all of them, expiries on every
//! primary are recorded as they happen, and the Redis status, metrics and page show every
//! primary with its slots.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::{names_on_every_primary, on_cluster, on_cluster_with, scrape};
use crate::helpers::AppOptions;
use crate::helpers::cluster::Cluster;

#[tokio::test]
async fn listing_pages_through_the_locks_of_every_shard() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    let names = names_on_every_primary(&cluster, 4).await;
    let all: Vec<String> = names.values().flatten().cloned().collect();
    for name in &all {
        app.lease(name, json!({"ttl_ms": 60_000})).await;
    }
    let mut listed = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let path = match &cursor {
            Some(c) => format!("/v1/locks?limit=5&cursor={c}"),
            None => "/v1/locks?limit=5".to_owned(),
        };
        let page = app.get(&path).await;
        page.assert_status(200);
        for lock in page.body["locks"].as_array().expect("locks") {
            listed.insert(lock["name"].as_str().unwrap_or_default().to_owned());
        }
        cursor = page.body["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    let wanted: HashSet<String> = all.into_iter().collect();
    assert_eq!(listed, wanted);
    // The metrics census counts them all too.
    let text = scrape(&app).await;
    let live = text
        .lines()
        .find_map(|l| l.strip_prefix("leasehold_live_locks "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(live, Some(wanted.len() as f64), "{text}");
}

#[tokio::test]
async fn expiries_on_every_primary_are_recorded_as_they_happen() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster_with(
        &cluster,
        AppOptions {
            min_ttl_ms: 100,
            ..AppOptions::default()
        },
    )
    .await;
    // The live events (a classic PUBLISH: the cluster bus brings it to every node).
    let mut events = cluster.nodes[0]
        .client()
        .get_async_pubsub()
        .await
        .expect("pubsub");
    events
        .subscribe("leasehold:events")
        .await
        .expect("subscribe");
    let mut events = events.into_on_message();
    let names = names_on_every_primary(&cluster, 1).await;
    let mut waiting: HashSet<String> = HashSet::new();
    for name in names.values().map(|n| n[0].clone()) {
        app.lease(&name, json!({"ttl_ms": 300})).await;
        waiting.insert(name);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(msg)) = tokio::time::timeout(left, events.next()).await else {
            panic!("no expiry recorded for {waiting:?} within 5 s");
        };
        let payload: Value = serde_json::from_slice(msg.get_payload_bytes()).unwrap_or(Value::Null);
        for event in payload.as_array().into_iter().flatten() {
            if event["type"] == "expired" {
                waiting.remove(event["lock"].as_str().unwrap_or_default());
            }
        }
    }
}

#[tokio::test]
async fn the_redis_status_and_metrics_show_every_primary_with_its_slots() {
    let cluster = Cluster::start(3, 1).await;
    let app = on_cluster(&cluster).await;
    let status = loop {
        let reply = app
            .admin(reqwest::Method::GET, "/v1/admin/redis", None)
            .await;
        reply.assert_status(200);
        if reply.body["cluster"]["shards"]
            .as_array()
            .is_some_and(|s| s.iter().all(|s| !s["node"].is_null()))
            && reply.body["acks"]["required"] == 1
        {
            break reply.body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["mode"], "cluster", "{status}");
    let shards = status["cluster"]["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 3, "{status}");
    assert_eq!(status["cluster"]["covers_every_slot"], true);
    let slots: u64 = shards
        .iter()
        .map(|s| s["slot_count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(slots, 16384);
    for shard in shards {
        assert_eq!(
            shard["replicas"].as_array().map(Vec::len),
            Some(1),
            "{shard}"
        );
        assert_eq!(shard["node"]["replicas_online"], 1, "{shard}");
    }
    let metrics = scrape(&app).await;
    assert!(
        metrics.contains("leasehold_redis_cluster_primaries 3"),
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("leasehold_redis_node_slots{node=").count(),
        3,
        "{metrics}"
    );
    let page = app
        .http
        .get(app.url("/redis"))
        // The deployment's admins see the Redis page (its addresses).
        .header("leasehold-key", crate::helpers::ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("page");
    for shard in shards {
        assert!(
            html.contains(shard["primary"].as_str().unwrap_or("?")),
            "{html}"
        );
    }
    assert!(html.contains("data-cluster-nodes"), "{html}");
}
