//! Elections (issue 55), measured against a real `leasehold serve` process and its own
//! redis-server (Unix socket), on loopback; bounded in count and time:
//!
//! 1. **Resign → next leader**: candidates campaign with a long server-side wait; each leader
//!    resigns at once. From the resignation's 200 to the next leader's 201, and to an
//!    observer's `event: leader` of the new term.
//! 2. **A stopped leader → the next**: the leader is a child process (this bench, re-run as a
//!    candidate that heartbeats at a third of its TTL); it is stopped with SIGSTOP, and the
//!    next candidate's 201 is timed from the stop. Bound: TTL + one heartbeat interval.
//! 3. **Observe fan-out**: many observers on one election; the leader proclaims new values;
//!    the time until every observer is told each one, and the server's memory per observer
//!    (its RSS before and after they connect).
//!
//! `cargo bench --bench election` (env: ROUNDS, default 300; OBSERVERS, default 1000;
//! TTL_MS, default 1000; STOPS, default 5)

mod fanout;
mod server;
mod stopped_leader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{Server, env_u64, percentiles};

/// Re-run as a stopped-leader child: `LEASEHOLD_BENCH_LEADER=<base>|<ttl_ms>`.
const LEADER_ENV: &str = "LEASEHOLD_BENCH_LEADER";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Ok(spec) = std::env::var(LEADER_ENV) {
        return stopped_leader::lead(&spec).await;
    }
    let server = Server::start().await?;
    let http = leasehold::client::http_builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let observed = env_u64("OBSERVER", 1) == 1;
    handoff(&http, &server.base, env_u64("ROUNDS", 300), observed).await?;
    stopped_leader::takeovers(
        &server.base,
        LEADER_ENV,
        env_u64("TTL_MS", 1000),
        env_u64("STOPS", 5),
    )
    .await?;
    fanout::run(&http, &server, env_u64("OBSERVERS", 1000) as usize).await?;
    server.stop().await;
    Ok(())
}

/// When each term was granted, resigned and observed.
#[derive(Default)]
struct Terms {
    granted: HashMap<u64, Instant>,
    resigned: HashMap<u64, Instant>,
    observed: HashMap<u64, Instant>,
}

/// 1. Resign → next leader, over `rounds` terms between 4 candidates in line.
async fn handoff(
    http: &reqwest::Client,
    base: &str,
    rounds: u64,
    observed: bool,
) -> anyhow::Result<()> {
    let terms = Arc::new(Mutex::new(Terms::default()));
    // Connected (told the state: a vacancy) before the first campaign, so it sees every term.
    // (OBSERVER=0: none, to see what the handoff costs without one.)
    let name = if observed { "handoff" } else { "unobserved" };
    let mut events = match observed {
        true => Some(fanout::subscribe(http, base, name).await?),
        false => None,
    };
    if let Some(events) = events.as_mut() {
        events.next_event().await;
    }
    let observer = tokio::spawn(observe(events, terms.clone()));
    let started = Instant::now();
    let mut candidates = Vec::new();
    for c in 0..4 {
        let (http, base, terms) = (http.clone(), base.to_owned(), terms.clone());
        candidates.push(tokio::spawn(campaign_rounds(
            http, base, name, c, rounds, terms,
        )));
    }
    for c in candidates {
        c.await??;
    }
    let elapsed = started.elapsed();
    // The last observed event may still be on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    observer.abort();
    report(&terms.lock().expect("terms"), elapsed, observed);
    Ok(())
}

/// Notes when the observer was told each term.
async fn observe(events: Option<fanout::Observer>, terms: Arc<Mutex<Terms>>) -> anyhow::Result<()> {
    let Some(mut events) = events else {
        return Ok(());
    };
    while let Some((term, _)) = events.next_leader().await {
        let at = Instant::now();
        terms
            .lock()
            .expect("terms")
            .observed
            .entry(term)
            .or_insert(at);
    }
    Ok(())
}

/// Candidate `c`: campaigns, leads, resigns at once, again, until `rounds` terms were granted.
async fn campaign_rounds(
    http: reqwest::Client,
    base: String,
    name: &'static str,
    c: usize,
    rounds: u64,
    terms: Arc<Mutex<Terms>>,
) -> anyhow::Result<()> {
    while terms.lock().expect("terms").granted.len() < rounds as usize {
        let reply = http
            .post(format!(
                "{base}/v1/elections/{name}/candidates?wait_ms=30000"
            ))
            .json(&json!({"value": format!("c{c}"), "ttl_ms": 10_000}))
            .send()
            .await?;
        let status = reply.status();
        let body: Value = reply.json().await?;
        let at = Instant::now();
        anyhow::ensure!(status == 201, "expected the lead, got {status}: {body}");
        let term = body["term"].as_u64().unwrap_or(0);
        terms.lock().expect("terms").granted.insert(term, at);
        let id = body["candidate_id"].as_str().unwrap_or_default();
        let resigned = http
            .delete(format!("{base}/v1/elections/{name}/candidates/{id}"))
            .bearer_auth(body["token"].as_str().unwrap_or_default())
            .send()
            .await?;
        let at = Instant::now();
        anyhow::ensure!(resigned.status() == 200, "resign: {}", resigned.status());
        terms.lock().expect("terms").resigned.insert(term, at);
    }
    Ok(())
}

/// Prints the handoff's figures: from each resign to the next leader's grant and to the
/// observer being told.
fn report(t: &Terms, elapsed: Duration, observed: bool) {
    let mut order: Vec<u64> = t.granted.keys().copied().collect();
    order.sort_unstable();
    let after = |seen: &HashMap<u64, Instant>| -> Vec<Duration> {
        order
            .windows(2)
            .filter_map(|w| {
                Some(
                    seen.get(&w[1])?
                        .saturating_duration_since(*t.resigned.get(&w[0])?),
                )
            })
            .collect()
    };
    let (to_leader, to_observer) = (after(&t.granted), after(&t.observed));
    let missed: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, term)| !t.observed.contains_key(term))
        .map(|(i, _)| i)
        .collect();
    println!(
        "election handoff (resign 200 -> next leader), 4 candidates in line, {}",
        if observed {
            "1 observer"
        } else {
            "no observer"
        }
    );
    println!(
        "  terms:                 {} ({:.0}/s)",
        order.len(),
        order.len() as f64 / elapsed.as_secs_f64()
    );
    println!("  -> next leader's 201:  {}", percentiles(to_leader));
    println!(
        "  -> observer told:      {} ({} of {} terms observed)",
        percentiles(to_observer),
        t.observed.len(),
        order.len()
    );
    if !missed.is_empty() {
        println!("  terms the observer was not told (their places in order): {missed:?}");
    }
}
