//! A stopped leader (the second measurement): a child process leads and heartbeats at a third of its TTL; it is
//! stopped (SIGSTOP: a GC pause, a frozen VM) while the next candidate waits in line; the
//! next candidate's 201 is timed from the stop. Its bound: the TTL (from the last heartbeat
//! the stopped leader sent) plus one heartbeat interval.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::server::percentiles;

const NAME: &str = "takeover";

/// The child's part (`LEASEHOLD_BENCH_LEADER=<base>|<ttl_ms>`): lead, say its term on
/// stdout, heartbeat at a third of the TTL until stopped or killed.
pub async fn lead(spec: &str) -> anyhow::Result<()> {
    let (base, ttl) = spec
        .split_once('|')
        .ok_or_else(|| anyhow::anyhow!("bad spec {spec:?}"))?;
    let ttl_ms: u64 = ttl.parse()?;
    let http = leasehold::client::http_builder().build()?;
    let reply = http
        .post(format!(
            "{base}/v1/elections/{NAME}/candidates?wait_ms=30000"
        ))
        .json(&json!({"value": "stopped", "ttl_ms": ttl_ms}))
        .send()
        .await?;
    anyhow::ensure!(
        reply.status() == 201,
        "the child did not lead: {}",
        reply.status()
    );
    let body: Value = reply.json().await?;
    println!("term {}", body["term"]);
    let id = body["candidate_id"].as_str().unwrap_or_default();
    let token = body["token"].as_str().unwrap_or_default();
    loop {
        tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
        let beat = http
            .post(format!(
                "{base}/v1/elections/{NAME}/candidates/{id}/heartbeat"
            ))
            .bearer_auth(token)
            .send()
            .await?;
        anyhow::ensure!(beat.status() == 200, "heartbeat: {}", beat.status());
    }
}

/// Signals a process by pid (`kill -STOP`, `kill -KILL`).
fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let ok = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()?
        .success();
    anyhow::ensure!(ok, "kill -{sig} {pid} failed");
    Ok(())
}

pub async fn takeovers(base: &str, env: &str, ttl_ms: u64, stops: u64) -> anyhow::Result<()> {
    let http = leasehold::client::http_builder().build()?;
    let mut took = Vec::new();
    for k in 0..stops {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .env(env, format!("{base}|{ttl_ms}"))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or_else(|| anyhow::anyhow!("no child pid"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await??;
        anyhow::ensure!(
            first.is_some_and(|l| l.starts_with("term ")),
            "the child did not lead"
        );
        let next = {
            let (http, base) = (http.clone(), base.to_owned());
            tokio::spawn(async move {
                let wait = ttl_ms * 10;
                let reply = http
                    .post(format!(
                        "{base}/v1/elections/{NAME}/candidates?wait_ms={wait}"
                    ))
                    .json(&json!({"value": "next", "ttl_ms": 30_000}))
                    .send()
                    .await?;
                let at = Instant::now();
                let status = reply.status();
                let body: Value = reply.json().await?;
                anyhow::ensure!(status == 201, "the next candidate: {status} {body}");
                anyhow::Ok((at, body))
            })
        };
        // In line, and a different phase of the leader's heartbeats each time.
        let phase = 300 + k * ttl_ms / (3 * stops.max(1));
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let stopped = Instant::now();
        signal(pid, "STOP")?;
        let (at, body) = next.await??;
        took.push(at.saturating_duration_since(stopped));
        signal(pid, "KILL")?;
        let _ = child.wait().await;
        let id = body["candidate_id"].as_str().unwrap_or_default();
        http.delete(format!("{base}/v1/elections/{NAME}/candidates/{id}"))
            .bearer_auth(body["token"].as_str().unwrap_or_default())
            .send()
            .await?;
    }
    let bound = Duration::from_millis(ttl_ms + ttl_ms / 3);
    let worst = took.iter().max().copied().unwrap_or_default();
    println!(
        "election takeover after SIGSTOP of the leader's process (TTL {ttl_ms} ms, heartbeat every {} ms)",
        ttl_ms / 3
    );
    println!("  stop -> next leader's 201: {}", percentiles(took));
    println!(
        "  bound TTL + one heartbeat interval: {} ms; worst {:.1} ms => {}",
        bound.as_millis(),
        worst.as_secs_f64() * 1e3,
        if worst <= bound { "within" } else { "OVER" }
    );
    Ok(())
}
