//! The dashboard's Redis page as an operator first meets it: memory against maxmemory and
//! what a restart would lose (standalone), a Sentinel-mode replica that went away shown as
//! down (not silently dropped from the list), and a Cluster primary that stops answering
//! shown as down.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cluster::on_cluster;
use crate::helpers::cluster::Cluster;
use crate::helpers::sentinel::{MASTER_NAME, Topology};
use crate::helpers::{TestApp, spawn_app};
use crate::replication::on_sentinels;

async fn redis_page(app: &TestApp) -> String {
    let page = app
        .http
        .get(app.url("/redis"))
        // The deployment's admins see the Redis page (its addresses).
        .header("leasehold-key", crate::helpers::ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), 200);
    page.text().await.expect("the page")
}

/// Reads the page until `check` holds (the readings behind it are taken every second).
async fn until_page(app: &TestApp, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let html = redis_page(app).await;
        if check(&html) {
            return html;
        }
        assert!(Instant::now() < deadline, "{what}; the page:\n{html}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_standalone_redis_shows_its_memory_against_maxmemory_and_its_persistence() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("100mb")
        .query_async(&mut conn)
        .await
        .expect("maxmemory");
    let html = redis_page(&app).await;
    assert!(html.contains(r#"data-redis-memory="ok""#), "{html}");
    assert!(html.contains("of 104.9 MB maxmemory ("), "{html}");
    // The test's Redis runs without AOF: the page says what a restart loses.
    assert!(
        html.contains("no AOF: a restart loses the locks granted since the last snapshot"),
        "{html}"
    );
}

#[tokio::test]
async fn a_sentinel_replica_that_goes_away_shows_as_down() {
    let mut topology = Topology::start(2, 3).await;
    let app = on_sentinels(&topology, MASTER_NAME).await;
    let gone = topology.replicas[0].addr();
    until_page(&app, "both replicas listed", |html| {
        topology.replicas.iter().all(|r| html.contains(&r.addr()))
    })
    .await;
    topology.replicas[0].kill();
    let html = until_page(&app, "the killed replica shown as down", |html| {
        html.contains("<tr data-down><td>") && html.contains(&gone)
    })
    .await;
    assert!(html.contains("last listed by the master"), "{html}");
}

#[tokio::test]
async fn a_cluster_primary_that_stops_answering_shows_as_down() {
    let cluster = Cluster::start(3, 0).await;
    let app = on_cluster(&cluster).await;
    until_page(&app, "every primary answering", |html| {
        html.contains("data-cluster-nodes") && !html.contains("data-down")
    })
    .await;
    let stopped = &cluster.nodes[0];
    stopped.signal(Signal::SIGSTOP);
    let html = until_page(&app, "the stopped primary shown as down", |html| {
        html.contains("data-down")
    })
    .await;
    stopped.signal(Signal::SIGCONT);
    let row = &html[html
        .find(&format!(r#"data-node="{}""#, stopped.addr()))
        .expect("its row")..];
    let row = &row[..row.find("</tr>").expect("row end")];
    assert!(row.contains("data-down"), "{row}");
}
