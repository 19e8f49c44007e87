//! Fair-lock handoff latency: from the 200 of a release to the 201 of the next holder, over a
//! few hundred handoffs between waiters that queue with server-side waits. Starts its own
//! redis-server (Unix socket) and a Leasehold server on loopback; bounded in count and time.
//!
//! `cargo bench --bench fair_handoff` (env: HANDOFFS, default 300; WAITERS, default 8)

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::server::{self, ServerConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Times seen by the clients, by fencing token (one per grant).
#[derive(Default)]
struct Timeline {
    granted: HashMap<u64, Instant>,
    released: HashMap<u64, Instant>,
    /// Grants seen so far.
    grants: usize,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let handoffs = env_usize("HANDOFFS", 300);
    let waiters = env_usize("WAITERS", 8);
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("r.sock");
    // Killed (SIGKILL) if this process dies before it stops it.
    let mut redis = leasehold::parent_death::command("redis-server".as_ref(), "KILL")
        .args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()?;
    let url = format!("redis+unix://{}", socket.display());
    let client = redis::Client::open(url.as_str())?;
    let started = Instant::now();
    while client.get_connection().is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let shutdown = CancellationToken::new();
    let mut config = ServerConfig::new(url);
    config.limits.ttl.min_ms = 100;
    let server = tokio::spawn(server::run(listener, config, shutdown.clone()));
    let http = leasehold::client::http_builder()
        .build()
        .expect("an HTTP client");
    while http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let bench_started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let (http, base, timeline) = (http.clone(), base.clone(), timeline.clone());
        tasks.push(tokio::spawn(wait_release_loop(
            http, base, timeline, handoffs,
        )));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = bench_started.elapsed();

    report(&timeline.lock().expect("timeline"), elapsed, waiters);

    shutdown.cancel();
    server.await??;
    redis.kill()?;
    redis.wait()?;
    Ok(())
}

/// One waiter: takes the fair lock (waiting in line), notes when, releases it at once, and
/// notes when; until `handoffs` grants were made.
async fn wait_release_loop(
    http: reqwest::Client,
    base: String,
    timeline: Arc<Mutex<Timeline>>,
    handoffs: usize,
) -> anyhow::Result<()> {
    loop {
        if timeline.lock().expect("timeline").grants > handoffs {
            return Ok(());
        }
        let reply = http
            .post(format!("{base}/v1/locks/bench/leases?wait_ms=30000"))
            .json(&json!({"kind": "fair"}))
            .send()
            .await?;
        let status = reply.status();
        let body: Value = reply.json().await?;
        let at = Instant::now();
        anyhow::ensure!(status == 201, "expected a grant, got {status}: {body}");
        let fence = body["fencing_token"].as_u64().unwrap_or(0);
        {
            let mut t = timeline.lock().expect("timeline");
            t.granted.insert(fence, at);
            t.grants += 1;
        }
        let lease = body["lease_id"].as_str().unwrap_or_default();
        let token = body["token"].as_str().unwrap_or_default();
        let released = http
            .delete(format!("{base}/v1/locks/bench/leases/{lease}"))
            .bearer_auth(token)
            .send()
            .await?;
        let at = Instant::now();
        anyhow::ensure!(
            released.status() == 200,
            "release failed: {}",
            released.status()
        );
        timeline
            .lock()
            .expect("timeline")
            .released
            .insert(fence, at);
    }
}

/// Prints the handoff latencies: from each release's 200 to the next holder's 201.
fn report(t: &Timeline, elapsed: Duration, waiters: usize) {
    let (mut latencies, grants) = {
        // Fences grow with every grant (not by one: they are floored by Redis's clock), so
        // the previous holder is the previous fence in order.
        let mut fences: Vec<u64> = t.granted.keys().copied().collect();
        fences.sort_unstable();
        let latencies: Vec<Duration> = fences
            .windows(2)
            .filter_map(|pair| {
                let granted = t.granted.get(&pair[1])?;
                let released = t.released.get(&pair[0])?;
                // The next 201 can reach its client before the previous 200 reached its own.
                Some(granted.saturating_duration_since(*released))
            })
            .collect::<Vec<Duration>>();
        (latencies, t.grants)
    };
    latencies.sort_unstable();
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    println!("fair lock handoff (release 200 -> next holder's 201), {waiters} waiters in line");
    println!("  handoffs measured: {}", latencies.len());
    println!(
        "  grants/s:          {:.0}",
        grants as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  median:            {:.3} ms",
        pick(0.5).as_secs_f64() * 1e3
    );
    println!(
        "  p90:               {:.3} ms",
        pick(0.9).as_secs_f64() * 1e3
    );
    println!(
        "  p99:               {:.3} ms",
        pick(0.99).as_secs_f64() * 1e3
    );
    println!(
        "  max:               {:.3} ms",
        pick(1.0).as_secs_f64() * 1e3
    );
}
