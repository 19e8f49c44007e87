//! `deploy/local/sentinel.sh`: the one-command high-availability setup starts a master, two
//! replicas, three Sentinels and two Leasehold instances, serves locks, follows a failover,
//! and leaves nothing running when stopped.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[tokio::test]
async fn the_local_sentinel_script_serves_follows_a_failover_and_stops_everything() {
    // A base port no other test's can collide with, all below the kernel's ephemeral range
    // (32768 and up, where the fixtures' free ports and every outgoing connection's come
    // from): the script takes base..base+2, base+20000.. and base+801.., so 6000..10800 and
    // 26000..30000 here (local_cluster's take 3000..5800 and 13000..15000).
    let base = 6_000 + (std::process::id() % 400) as u16 * 10;
    let (mut child, urls) = start_local_script("sentinel.sh", "LEASEHOLD_HA_BASE", base).await;
    let http = leasehold::client::http_builder()
        .build()
        .expect("an HTTP client");
    for url in &urls {
        let ready = http
            .get(format!("{url}/readyz"))
            .send()
            .await
            .expect("readyz");
        assert_eq!(ready.status(), 200);
    }
    let granted = http
        .post(format!("{}/v1/locks/demo/leases", urls[0]))
        .send()
        .await
        .expect("acquire");
    assert_eq!(granted.status(), 201);
    let body: serde_json::Value = granted.json().await.expect("body");
    // One acknowledgement is required (the default with replicas); `WAIT` counts every
    // replica that had the write when it returned, so the second one may be counted too.
    let acked = body["replicas_acked"].as_u64().unwrap_or_default();
    assert!((1..=2).contains(&acked), "{body}");
    // The other instance sees it held.
    let other = http
        .post(format!("{}/v1/locks/demo/leases", urls[1]))
        .send()
        .await
        .expect("acquire");
    assert_eq!(other.status(), 409);

    // Kill the master: both instances follow the Sentinels to the promoted replica.
    let master_pid = redis_pid(base);
    kill(master_pid, Signal::SIGKILL).expect("kill the master");
    let first = format!("127.0.0.1:{base}");
    let deadline = Instant::now() + Duration::from_secs(30);
    for url in &urls {
        loop {
            let readyz = http
                .get(format!("{url}/readyz"))
                .bearer_auth(SCRIPT_ADMIN_TOKEN);
            let master = match readyz.send().await {
                Ok(r) if r.status() == 200 => r
                    .json::<serde_json::Value>()
                    .await
                    .map(|b| b["redis_master"].as_str().unwrap_or_default().to_owned())
                    .unwrap_or_default(),
                _ => String::new(),
            };
            if !master.is_empty() && master != first {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{url} did not follow the failover"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The lease taken before the failover is still held.
    let held = http
        .get(format!("{}/v1/locks/demo", urls[1]))
        .send()
        .await
        .expect("inspect");
    assert_eq!(held.status(), 200);
    let held: serde_json::Value = held.json().await.expect("body");
    assert_eq!(held["held"], true, "{held}");

    // Stopped, it takes everything with it.
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

/// The pid of the redis-server on `port` (its `INFO server`).
fn redis_pid(port: u16) -> Pid {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .expect("the master");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut conn)
        .expect("INFO");
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("process_id");
    Pid::from_raw(pid)
}

/// Every process below `pid` (children, grandchildren...), from /proc.
pub(crate) fn descendants(pid: u32) -> Vec<i32> {
    let out = Command::new("ps")
        .args(["-e", "-o", "pid=,ppid="])
        .output()
        .expect("ps");
    let pairs: Vec<(i32, i32)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let mut found = vec![pid as i32];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            pairs
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// The admin token the local scripts' instances get in these tests (they make one up
/// otherwise): what shows `/readyz`'s Redis addresses.
pub(crate) const SCRIPT_ADMIN_TOKEN: &str = "local-script-admin-token-0123456789";

/// Starts `deploy/local/<script>` with its base port in `base_var`, and waits (at most 60 s)
/// until it wrote its two Leasehold URLs to its ready file: the running script (stop it
/// with SIGINT) and the URLs. Its stderr goes to the test's, to say why it failed.
pub(crate) async fn start_local_script(
    script: &str,
    base_var: &str,
    base: u16,
) -> (std::process::Child, Vec<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ready = dir.path().join("ready");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/local")
        .join(script);
    let mut child = leasehold::parent_death::command(script.as_os_str(), "TERM");
    child
        .arg("--ready-file")
        .arg(&ready)
        .env("LEASEHOLD_BIN", env!("CARGO_BIN_EXE_leasehold"))
        .env("LEASEHOLD_ADMIN_TOKEN", SCRIPT_ADMIN_TOKEN)
        .env(base_var, base.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut child = child.spawn().expect("start the script");
    let started = Instant::now();
    while !ready.exists()
        || std::fs::read_to_string(&ready)
            .unwrap_or_default()
            .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the script was not ready within 60 s"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the script exited (its stderr above says why)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let urls = std::fs::read_to_string(&ready).expect("ready file");
    let urls: Vec<String> = urls.split_whitespace().map(str::to_owned).collect();
    assert_eq!(urls.len(), 2, "{urls:?}");
    (child, urls)
}
