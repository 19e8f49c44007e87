//! `deploy/local/cluster.sh`: the one-command Redis Cluster setup starts three primaries,
//! three replicas and two Leasehold instances in Cluster mode, serves locks, keeps a lock
//! held (and renewed) through the failover of the primary serving its slot, grants new
//! locks on the failed-over shard, starts the killed node again when asked (SIGUSR1), and
//! leaves nothing running when stopped, the restarted node included.

use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::helpers::cluster::{
    Role, SlotRange, connect, field, info_at, keyslot_at, owner_in, role_at, slot_map_at,
};
use crate::local_ha::{descendants, start_local_script};

#[tokio::test]
async fn the_local_cluster_script_serves_keeps_a_lock_through_a_failover_and_stops_everything() {
    // A base port no other test's can collide with: the script takes base..base+5, their
    // bus ports base+10000.. and base+801..base+802, so 3000..5800 and 13000..15000 here;
    // local_ha's take 20000..24800 and 40000..44000, the fixtures' free ports come from the
    // kernel's ephemeral range (32768 and up).
    let base = 3_000 + (std::process::id() % 200) as u16 * 10;
    let (child, urls) = start_local_script("cluster.sh", "LEASEHOLD_CLUSTER_BASE", base).await;
    let http = leasehold::client::http_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client");
    let lease = hold_demo(&http, &urls).await;

    // The primary serving the lock's key (the lock's name, for the default tenant), and a
    // replica that has the key: then its promotion cannot lose the lock.
    let first = format!("127.0.0.1:{base}");
    let slot = keyslot_at(&first, "demo").await;
    let map = slot_map_at(&first).await.expect("CLUSTER SLOTS");
    let primary = owner_in(&map, slot).expect("an owner").to_owned();
    let replica = replica_with_demo(base, &primary).await;

    let deadline = fail_over(&http, &urls, &primary, &replica).await;

    // The lease is renewed, through either instance, and a new lock on the failed-over
    // shard is granted: the shard serves again (marked: its new primary has no replica).
    renewed_through_either_instance(&http, &urls, &lease, deadline).await;
    let on_shard = names_on(&map, &primary, &replica).await;
    let fresh = served(&http, deadline, "a new lock there", || {
        acquire(&http, &urls[0], &on_shard[0])
    })
    .await;
    eprintln!("a new lock on the shard: {fresh}");

    killed_node_rejoins(&child, &http, &urls[0], &on_shard[1]).await;
    assert_eq!(
        role_at(&primary).await,
        Ok(Role::Replica {
            of: replica.clone(),
            linked: true
        })
    );
    stop_leaves_nothing_running(child).await;
}

/// Both instances are ready; one grants the lock `demo` (its lease returned) and the other
/// sees it held.
async fn hold_demo(http: &reqwest::Client, urls: &[String]) -> serde_json::Value {
    for url in urls {
        let ready = http
            .get(format!("{url}/readyz"))
            .send()
            .await
            .expect("readyz");
        assert_eq!(ready.status(), 200);
    }
    // Five minutes: the lease must not expire while the test waits out the failover.
    let granted = http
        .post(format!("{}/v1/locks/demo/leases", urls[0]))
        .json(&serde_json::json!({"ttl_ms": 300_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(granted.status(), 201);
    let lease: serde_json::Value = granted.json().await.expect("grant");
    // The other instance sees it held.
    let other = http
        .post(format!("{}/v1/locks/demo/leases", urls[1]))
        .send()
        .await
        .expect("acquire");
    assert_eq!(other.status(), 409);
    lease
}

/// A replica of `primary` among the script's six nodes, once it has the key `demo`.
async fn replica_with_demo(base: u16, primary: &str) -> String {
    let mut replica = None;
    for port in base..base + 6 {
        let addr = format!("127.0.0.1:{port}");
        if let Ok(Role::Replica { of, .. }) = role_at(&addr).await
            && of == primary
        {
            replica = Some(addr);
        }
    }
    let replica = replica.unwrap_or_else(|| panic!("{primary} has no replica"));
    let mut on_replica = connect(&replica).await.expect("the replica");
    let _: () = redis::cmd("READONLY")
        .query_async(&mut on_replica)
        .await
        .expect("READONLY");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let copied: bool = redis::cmd("EXISTS")
            .arg("demo")
            .query_async(&mut on_replica)
            .await
            .expect("EXISTS on the replica");
        if copied {
            break;
        }
        assert!(Instant::now() < deadline, "{replica} never got the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    replica
}

/// Kills `primary`: `replica` takes over the slot, both instances follow (ready, the lock
/// still held). Returns the deadline, 30 s after the kill, for the shard to serve again.
async fn fail_over(
    http: &reqwest::Client,
    urls: &[String],
    primary: &str,
    replica: &str,
) -> Instant {
    let server = info_at(primary, "server").await.expect("INFO server");
    let pid: i32 = field(&server, "process_id").parse().expect("process_id");
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill the primary");
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(30);
    while role_at(replica).await.ok() != Some(Role::Primary) {
        assert!(Instant::now() < deadline, "{replica} was not promoted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("{replica} promoted {:?} after the kill", killed.elapsed());
    for url in urls {
        loop {
            let last = ready_and_held(http, url).await;
            if last.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{url} is not ready with the lock held after the failover: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!("both instances ready {:?} after the kill", killed.elapsed());
    deadline
}

/// `lease` (the lock `demo`'s) is renewed through each instance, before `deadline`; each
/// heartbeat is marked degraded.
async fn renewed_through_either_instance(
    http: &reqwest::Client,
    urls: &[String],
    lease: &serde_json::Value,
    deadline: Instant,
) {
    for url in urls {
        let beat = served(http, deadline, "a heartbeat", || {
            http.post(format!(
                "{url}/v1/locks/demo/leases/{}/heartbeat",
                lease["lease_id"].as_str().unwrap_or_default()
            ))
            .bearer_auth(lease["token"].as_str().unwrap_or_default())
            .json(&serde_json::json!({}))
        })
        .await;
        assert!(beat["degraded"].is_string(), "{beat}");
    }
}

/// Two names whose slots `primary` served in `map` (asked of `node`, a running one).
async fn names_on(map: &[SlotRange], primary: &str, node: &str) -> Vec<String> {
    let mut on_shard = Vec::new();
    for i in 0.. {
        let name = format!("job-{i}");
        if owner_in(map, keyslot_at(node, &name).await) == Some(primary) {
            on_shard.push(name);
            if on_shard.len() == 2 {
                break;
            }
        }
    }
    on_shard
}

/// A request for a one-minute lease of `name` at `url`.
fn acquire(http: &reqwest::Client, url: &str, name: &str) -> reqwest::RequestBuilder {
    http.post(format!("{url}/v1/locks/{name}/leases"))
        .json(&serde_json::json!({"ttl_ms": 60_000}))
}

/// Brought back by the script (asked with SIGUSR1), the killed node rejoins as the new
/// primary's replica, and grants of `name` at `url` are acknowledged by it again.
async fn killed_node_rejoins(child: &Child, http: &reqwest::Client, url: &str, name: &str) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGUSR1).expect("ask for the node back");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = served(http, deadline, "a lock there", || acquire(http, url, name)).await;
        if reply["replicas_acked"] == 1 {
            break;
        }
        let id = reply["lease_id"].as_str().unwrap_or_default().to_owned();
        let token = reply["token"].as_str().unwrap_or_default().to_owned();
        http.delete(format!("{url}/v1/locks/{name}/leases/{id}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("release");
        assert!(
            Instant::now() < deadline,
            "never acknowledged again: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stopped, the script takes everything it started with it.
async fn stop_leaves_nothing_running(mut child: Child) {
    let pids = descendants(child.id());
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).expect("stop the script");
    tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("the script ends when stopped");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alive: Vec<_> = pids
        .into_iter()
        .filter(|&p| kill(Pid::from_raw(p), None).is_ok())
        .collect();
    assert!(
        alive.is_empty(),
        "still running after the script stopped: {alive:?}"
    );
}

/// Sends what `request` builds until it succeeds (2xx), before `deadline`; every refusal on
/// the way must be 503 `not_replicated` (Redis answers: the shard's refusals must say why).
async fn served(
    _http: &reqwest::Client,
    deadline: Instant,
    what: &str,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> serde_json::Value {
    loop {
        let reply = request().send().await.expect("request");
        let status = reply.status();
        let body: serde_json::Value = reply.json().await.unwrap_or_default();
        if status.is_success() {
            return body;
        }
        assert_eq!(
            (status.as_u16(), body["code"].as_str()),
            (503, Some("not_replicated")),
            "{what}: {body}"
        );
        assert!(Instant::now() < deadline, "{what}: never served: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Ok when `url` answers /readyz with 200 and shows the lock `demo` held; Err says what it
/// answered instead.
async fn ready_and_held(http: &reqwest::Client, url: &str) -> Result<(), String> {
    let ready = http
        .get(format!("{url}/readyz"))
        .send()
        .await
        .map_err(|e| format!("readyz: {e}"))?;
    if ready.status() != 200 {
        return Err(format!("readyz: {}", ready.status()));
    }
    let lock = http
        .get(format!("{url}/v1/locks/demo"))
        .send()
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    let status = lock.status();
    let body: serde_json::Value = lock.json().await.map_err(|e| format!("inspect: {e}"))?;
    if status == 200 && body["held"] == true {
        Ok(())
    } else {
        Err(format!("inspect: {status} {body}"))
    }
}
