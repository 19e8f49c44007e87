//! Load scenarios against a running Leasehold server, each printing one JSON object of results
//! on stdout. `benches/run.sh` starts Redis and the server and runs them all; by hand:
//!
//! `cargo bench --bench scenarios -- --url http://127.0.0.1:8080 uncontended --connections 64`
//!
//! Every loop is bounded in time (`--seconds`) and every request in wait (`wait_ms`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

#[path = "scenarios/light_client.rs"]
mod light_client;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// The Leasehold server.
    #[arg(long)]
    url: String,
    /// The Redis behind it (for the FIFO check and connection counts).
    #[arg(long)]
    redis_url: Option<String>,
    /// How long each timed loop runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Each connection acquires and releases its own lock name in a loop.
    /// Driven by a light client on one thread (`scenarios/light_client.rs`). With
    /// `--redis-url`, also what the loop cost Redis per cycle: the scripts' time from `INFO
    /// commandstats` and Redis's own CPU, as `redis-cost` reports them one cycle at a time.
    Uncontended {
        #[arg(long)]
        connections: usize,
    },
    /// Clients compete for one lock with server-side waits.
    Contended {
        #[arg(long)]
        clients: usize,
        #[arg(long, default_value = "reentrant")]
        kind: String,
        /// How long each holder keeps the lock (its critical section) before releasing.
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Many waiting requests on few held locks: memory, idle CPU, Redis use, drain time.
    Parked {
        #[arg(long)]
        waiters: usize,
        #[arg(long)]
        locks: usize,
        /// The server's pid, for RSS and CPU.
        #[arg(long)]
        server_pid: u32,
        /// Multiplex the waiters as HTTP/2 streams (h2c) instead of one HTTP/1.1 connection each.
        #[arg(long)]
        http2: bool,
        /// How long the server's CPU is watched while everyone waits.
        #[arg(long, default_value_t = 5)]
        idle_seconds: u64,
    },
    /// Readers and writers on one read/write lock.
    ReadHeavy {
        #[arg(long, default_value_t = 64)]
        readers: usize,
        #[arg(long, default_value_t = 2)]
        writers: usize,
        #[arg(long)]
        policy: String,
    },
    /// The honest ceiling: Redisson's own RLock acquire and release scripts
    /// (`benches/redisson/`), driven straight at Redis, one lock name per connection. Reports
    /// pairs/s and the Redis time of one pair (from `INFO commandstats`). Needs `--redis-url`.
    RedisMinimal {
        #[arg(long)]
        connections: usize,
    },
    /// The Redis time one uncontended Leasehold cycle (acquire + release over HTTP, one at a
    /// time) of `kind` costs around `cycles` cycles: the scripts' time from `INFO
    /// commandstats` (FCALL usec, which includes the commands a function calls), and Redis's
    /// own CPU (`INFO cpu`: everything, the events' PUBLISH too). Needs `--redis-url`.
    RedisCost {
        /// reentrant, exclusive, fair, read, write or semaphore.
        #[arg(long)]
        kind: String,
        #[arg(long, default_value_t = 2000)]
        cycles: usize,
    },
    /// Dashboard overview render time with many live locks.
    Dashboard {
        #[arg(long)]
        locks: usize,
        #[arg(long, default_value_t = 30)]
        renders: usize,
    },
}

/// Latency percentiles in milliseconds.
fn percentiles(samples: &mut [Duration]) -> Value {
    if samples.is_empty() {
        return Value::Null;
    }
    samples.sort_unstable();
    let pick = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        (samples[i].as_secs_f64() * 1e6).round() / 1e3
    };
    json!({"p50": pick(0.5), "p99": pick(0.99), "p999": pick(0.999), "max": pick(1.0), "n": samples.len()})
}

fn client_http() -> reqwest::Client {
    client()
}

fn client() -> reqwest::Client {
    leasehold::client::http_builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(90))
        .build()
        .expect("HTTP client")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let result = match &args.scenario {
        Scenario::Uncontended { connections } => {
            uncontended(&args.url, args.redis_url.as_deref(), *connections, deadline).await?
        }
        Scenario::Contended {
            clients,
            kind,
            hold_ms,
        } => {
            let hold = Duration::from_millis(*hold_ms);
            contended(
                &args.url,
                args.redis_url.as_deref(),
                *clients,
                kind,
                hold,
                deadline,
            )
            .await?
        }
        Scenario::Parked {
            waiters,
            locks,
            server_pid,
            http2,
            idle_seconds,
        } => {
            let waiting = Waiting {
                waiters: *waiters,
                locks: *locks,
                pid: *server_pid,
                http2: *http2,
                idle: Duration::from_secs(*idle_seconds),
            };
            parked(&args.url, args.redis_url.as_deref(), &waiting).await?
        }
        Scenario::ReadHeavy {
            readers,
            writers,
            policy,
        } => read_heavy(&args.url, *readers, *writers, policy, deadline).await?,
        Scenario::Dashboard { locks, renders } => dashboard(&args.url, *locks, *renders).await?,
        Scenario::RedisMinimal { connections } => {
            redis_minimal(redis_url(&args)?, *connections, deadline).await?
        }
        Scenario::RedisCost { kind, cycles } => {
            redis_cost(&args.url, redis_url(&args)?, kind, *cycles).await?
        }
    };
    println!("{result}");
    Ok(())
}

fn redis_url(args: &Args) -> anyhow::Result<&str> {
    args.redis_url
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("this scenario needs --redis-url"))
}

/// `INFO commandstats` as command -> (calls, usec).
async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<HashMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut out = HashMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(name.to_owned(), (field("calls"), field("usec")));
    }
    Ok(out)
}

async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<()> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// Redis's own CPU time so far (user + system), in seconds: unlike `commandstats` it covers
/// everything the server does for a command (protocol, event loop, replies).
async fn redis_cpu(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_user") + field("used_cpu_sys"))
}

async fn redis_minimal(
    redis_url: &str,
    connections: usize,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let client = redis::Client::open(redis_url)?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let acquire = Arc::new(redis::Script::new(include_str!(
        "redisson/lock_acquire.lua"
    )));
    let release = Arc::new(redis::Script::new(include_str!(
        "redisson/lock_release.lua"
    )));
    // Loaded first, so that no NOSCRIPT round trip is measured.
    acquire.prepare_invoke().load_async(&mut admin).await?;
    release.prepare_invoke().load_async(&mut admin).await?;
    let mut account = RedisAccount::start(redis_url).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..connections {
        let (client, acquire, release) = (client.clone(), acquire.clone(), release.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = client.get_multiplexed_async_connection().await?;
            let lock = format!("minimal-{i}");
            let channel = format!("redisson_lock__channel:{{{lock}}}");
            let holder = "b9f3a0c2-5d1e-4c7a-9e2f-3a4b5c6d7e8f:1";
            let (mut acq, mut rel) = (Vec::new(), Vec::new());
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let got: Option<i64> = acquire
                    .key(&lock)
                    .arg(30_000)
                    .arg(holder)
                    .invoke_async(&mut conn)
                    .await?;
                anyhow::ensure!(got.is_none(), "the lock was not free: {got:?}");
                let t1 = Instant::now();
                let freed: Option<i64> = release
                    .key(&lock)
                    .key(&channel)
                    .arg(0)
                    .arg(30_000)
                    .arg(holder)
                    .invoke_async(&mut conn)
                    .await?;
                anyhow::ensure!(freed == Some(1), "the release did not free: {freed:?}");
                acq.push(t1 - t0);
                rel.push(t1.elapsed());
            }
            anyhow::Ok((acq, rel))
        }));
    }
    let (mut acq, mut rel) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, r) = task.await??;
        acq.extend(a);
        rel.extend(r);
    }
    let secs = started.elapsed().as_secs_f64();
    let (cpu, stats) = account.read().await?;
    let (calls, usec) = stats.get("evalsha").copied().unwrap_or((0, 0));
    let pairs = acq.len();
    let per_pair = |x: f64| x / pairs.max(1) as f64;
    Ok(json!({
        "scenario": "redis_minimal", "connections": connections, "seconds": secs,
        "pairs": pairs, "pairs_per_s": pairs as f64 / secs,
        "evalsha_calls": calls, "redis_us_per_pair": per_pair(usec as f64),
        "redis_cpu_us_per_pair": per_pair(cpu * 1e6),
        "acquire_ms": percentiles(&mut acq), "release_ms": percentiles(&mut rel),
    }))
}

async fn redis_cost(
    url: &str,
    redis_url: &str,
    kind: &str,
    cycles: usize,
) -> anyhow::Result<Value> {
    let http = client_http();
    let name = format!("cost-{kind}");
    let semaphore = kind == "semaphore";
    let (path, body) = if semaphore {
        (
            format!("/v1/semaphores/{name}/leases"),
            json!({"limit": 10, "ttl_ms": 30000}),
        )
    } else {
        (
            format!("/v1/locks/{name}/leases"),
            json!({"kind": kind, "ttl_ms": 30000}),
        )
    };
    // One cycle first: the function library is loaded and the names exist.
    let warm = acquire_at(&http, url, &path, body.clone()).await?;
    release(&http, url, &warm).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut account = RedisAccount::start(redis_url).await?;
    for _ in 0..cycles {
        let held = acquire_at(&http, url, &path, body.clone()).await?;
        release(&http, url, &held).await?;
    }
    // Let the last events go out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (cpu, stats) = account.read().await?;
    let per_cycle = |usec: u64| usec as f64 / cycles as f64;
    // A script's usec includes the commands it runs, which commandstats also lists under
    // their own names: only the scripts are summed. Everything else is listed for where the
    // time goes (the events' PUBLISH from the process is a top-level command, its Redisson
    // unlock message one inside a function: commandstats cannot tell them apart).
    let mut commands = serde_json::Map::new();
    let mut script_usec = 0;
    for (command, (calls, usec)) in &stats {
        if matches!(command.as_str(), "info" | "config|resetstat" | "config") {
            continue;
        }
        if SCRIPT_COMMANDS.contains(&command.as_str()) {
            script_usec += usec;
        }
        commands.insert(
            command.clone(),
            json!({"calls_per_cycle": *calls as f64 / cycles as f64, "us_per_cycle": per_cycle(*usec)}),
        );
    }
    Ok(json!({
        "scenario": "redis_cost", "kind": kind, "cycles": cycles,
        "script_us_per_cycle": per_cycle(script_usec),
        "redis_cpu_us_per_cycle": cpu * 1e6 / cycles as f64,
        "commands": commands,
    }))
}

/// Commands that run Lua: their usec already includes every command they call.
const SCRIPT_COMMANDS: [&str; 4] = ["fcall", "fcall_ro", "evalsha", "eval"];

/// A new lease at `path` (a lock's or a semaphore's leases), without waiting.
async fn acquire_at(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    body: Value,
) -> anyhow::Result<Held> {
    let reply = http.post(format!("{url}{path}")).json(&body).send().await?;
    let status = reply.status().as_u16();
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_default();
    let body: Value = reply.json().await?;
    anyhow::ensure!(status == 201, "acquire answered {status}: {body}");
    Ok(Held {
        path: location,
        token: body["token"].as_str().unwrap_or_default().to_owned(),
        fence: body["fencing_token"].as_u64().unwrap_or(0),
    })
}

/// A granted lease as a client knows it.
struct Held {
    path: String,
    token: String,
    fence: u64,
}

async fn acquire(
    http: &reqwest::Client,
    url: &str,
    lock: &str,
    body: Value,
    wait_ms: u64,
) -> anyhow::Result<Held> {
    let reply = http
        .post(format!("{url}/v1/locks/{lock}/leases?wait_ms={wait_ms}"))
        .json(&body)
        .send()
        .await?;
    let status = reply.status().as_u16();
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body: Value = reply.json().await?;
    let mut location = location.unwrap_or_default();
    if status == 202 {
        // A fair ticket: poll it until granted.
        let token = body["token"].as_str().unwrap_or_default().to_owned();
        loop {
            let poll = http
                .post(format!("{url}{location}?wait_ms={wait_ms}"))
                .bearer_auth(&token)
                .send()
                .await?;
            let s = poll.status().as_u16();
            let next_location = poll
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            body = poll.json().await?;
            if s == 201 {
                location = next_location.unwrap_or_default();
                break;
            }
            anyhow::ensure!(s == 202, "ticket poll answered {s}: {body}");
        }
    } else {
        anyhow::ensure!(status == 201, "acquire answered {status}: {body}");
    }
    Ok(Held {
        path: location,
        token: body["token"].as_str().unwrap_or_default().to_owned(),
        fence: body["fencing_token"].as_u64().unwrap_or(0),
    })
}

async fn release(http: &reqwest::Client, url: &str, held: &Held) -> anyhow::Result<()> {
    let reply = http
        .delete(format!("{url}{}", held.path))
        .bearer_auth(&held.token)
        .send()
        .await?;
    anyhow::ensure!(reply.status() == 200, "release answered {}", reply.status());
    Ok(())
}

/// The uncontended loop, driven by the light client (`scenarios/light_client.rs`) on a thread of its
/// own. Its CPU time is reported, so that the report can set what the load cost beside what
/// it measured. With `redis_url`, so is what the loop cost Redis per cycle (see
/// [`RedisAccount`]): issue 10 measured a cycle's Redis time in this loop, at 16 connections.
async fn uncontended(
    url: &str,
    redis_url: Option<&str>,
    connections: usize,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let authority = light_client::authority(url)?;
    let mut account = match redis_url {
        Some(redis_url) => Some(RedisAccount::start(redis_url).await?),
        None => None,
    };
    let (_, cpu_before) = process_stats(std::process::id())?;
    let started = Instant::now();
    let (mut acq, mut rel) = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(light_client::cycle_loop(&authority, connections, deadline))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let secs = started.elapsed().as_secs_f64();
    let (_, cpu_after) = process_stats(std::process::id())?;
    let requests = 2 * acq.len();
    let redis = match account.as_mut() {
        Some(account) => account.per_cycle(acq.len()).await?,
        None => Value::Null,
    };
    Ok(json!({
        "scenario": "uncontended", "connections": connections, "seconds": secs,
        "cycles": acq.len(), "cycles_per_s": acq.len() as f64 / secs,
        "client_cpu_us_per_request": (cpu_after - cpu_before) * 1e6 / requests.max(1) as f64,
        "acquire_ms": percentiles(&mut acq), "release_ms": percentiles(&mut rel),
        "redis": redis,
    }))
}

/// What a stretch of load cost Redis, from its own counters: the scripts' time (`INFO
/// commandstats`: FCALL usec, which includes the commands a function calls) and Redis's CPU
/// (`INFO cpu`: everything, the events' PUBLISH from the server and the networking too). The
/// counters are Redis-wide: the run must be the only client.
struct RedisAccount {
    admin: redis::aio::MultiplexedConnection,
    cpu_before: f64,
}

impl RedisAccount {
    async fn start(redis_url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(redis_url)?;
        let mut admin = client.get_multiplexed_async_connection().await?;
        reset_stats(&mut admin).await?;
        let cpu_before = redis_cpu(&mut admin).await?;
        Ok(Self { admin, cpu_before })
    }

    /// Redis's CPU seconds and its commandstats since [`RedisAccount::start`].
    async fn read(&mut self) -> anyhow::Result<(f64, HashMap<String, (u64, u64)>)> {
        let cpu = redis_cpu(&mut self.admin).await? - self.cpu_before;
        Ok((cpu, commandstats(&mut self.admin).await?))
    }

    /// Script µs and Redis CPU µs per cycle since [`RedisAccount::start`].
    async fn per_cycle(&mut self, cycles: usize) -> anyhow::Result<Value> {
        let (cpu, stats) = self.read().await?;
        let script_usec: u64 = SCRIPT_COMMANDS
            .iter()
            .filter_map(|c| stats.get(*c))
            .map(|(_, usec)| usec)
            .sum();
        let cycles = cycles.max(1) as f64;
        Ok(json!({
            "script_us_per_cycle": script_usec as f64 / cycles,
            "cpu_us_per_cycle": cpu * 1e6 / cycles,
        }))
    }
}

/// Grant and release times by fencing token, and the grant order the server's events show.
#[derive(Default)]
struct Handoffs {
    /// By fencing token: when, and to which client.
    granted: HashMap<u64, (Instant, usize)>,
    released: HashMap<u64, Instant>,
}

async fn contended(
    url: &str,
    redis_url: Option<&str>,
    clients: usize,
    kind: &str,
    hold: Duration,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let lock = format!("contended-{kind}-{clients}-{}", hold.as_millis());
    // The latest fencing token granted: a client that released stands back until another
    // client has the lock (bounded), so every handoff measured is a real transfer to a waiter.
    let (granted_tx, granted_rx) = tokio::sync::watch::channel(0u64);
    let granted_tx = Arc::new(granted_tx);
    // The server's own account of queue and grant order, for the FIFO check.
    let events = match redis_url {
        Some(redis_url) => Some(watch_events(redis_url, &lock).await?),
        None => None,
    };
    let log = Arc::new(Mutex::new(Handoffs::default()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client_id in 0..clients {
        let (url, lock, log, kind) = (url.to_owned(), lock.clone(), log.clone(), kind.to_owned());
        let (granted_tx, mut granted_rx) = (granted_tx.clone(), granted_rx.clone());
        tasks.push(tokio::spawn(async move {
            let http = client();
            while Instant::now() < deadline {
                let held = acquire(
                    &http,
                    &url,
                    &lock,
                    json!({"kind": kind, "ttl_ms": 30000}),
                    30_000,
                )
                .await?;
                log.lock()
                    .expect("log")
                    .granted
                    .insert(held.fence, (Instant::now(), client_id));
                granted_tx.send_replace(held.fence);
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                release(&http, &url, &held).await?;
                log.lock()
                    .expect("log")
                    .released
                    .insert(held.fence, Instant::now());
                let stand_back = granted_rx.wait_for(|latest| *latest > held.fence);
                let _ = tokio::time::timeout(Duration::from_secs(1), stand_back).await;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    // A handoff is the lock passing to another client; a client that re-takes the lock it
    // just released hands nothing over (and says how fair the lock is).
    let (mut latencies, grants, self_regrants) = {
        let log = log.lock().expect("log");
        let mut fences: Vec<u64> = log.granted.keys().copied().collect();
        fences.sort_unstable();
        let mut lat = Vec::new();
        let mut same = 0u64;
        // Fences grow with every grant (not by one: they are floored by Redis's clock), so
        // the previous holder is the previous fence in order.
        for pair in fences.windows(2) {
            let (previous, f) = (&pair[0], &pair[1]);
            let (Some((at, who)), Some((_, before)), Some(released)) = (
                log.granted.get(f),
                log.granted.get(previous),
                log.released.get(previous),
            ) else {
                continue;
            };
            if who == before {
                same += 1;
            } else {
                lat.push(at.saturating_duration_since(*released));
            }
        }
        (lat, fences.len(), same)
    };
    let inversions = match events {
        Some((seen, reader)) => {
            // Let the last events arrive, then stop listening.
            tokio::time::sleep(Duration::from_millis(300)).await;
            reader.abort();
            let seen = seen.lock().expect("events").clone();
            Some(json!({"count": fifo_inversions(&seen), "events_seen": seen.len()}))
        }
        None => None,
    };
    Ok(json!({
        "scenario": "contended", "kind": kind, "clients": clients, "seconds": secs,
        "hold_ms": hold.as_millis() as u64,
        "grants": grants, "grants_per_s": grants as f64 / secs,
        "self_regrants": self_regrants, "handoff_ms": percentiles(&mut latencies),
        "fifo_inversions": inversions,
    }))
}

/// The events of one lock, as (Redis time in µs, type, lease_id), in the order they arrived.
type EventLog = Arc<Mutex<Vec<(u64, String, String)>>>;

/// Collects one lock's events until the returned task is aborted. Instances publish their
/// events in batches (a JSON array per message; a single object from older servers), in the
/// order each instance learnt of them, so [`fifo_inversions`] orders them by Redis's clock.
async fn watch_events(
    redis_url: &str,
    lock: &str,
) -> anyhow::Result<(EventLog, tokio::task::JoinHandle<()>)> {
    let client = redis::Client::open(redis_url)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe("leasehold:events").await?;
    let lock = lock.to_owned();
    let seen: EventLog = Arc::default();
    let sink = seen.clone();
    let reader = tokio::spawn(async move {
        let mut stream = pubsub.into_on_message();
        while let Some(msg) = stream.next().await {
            let Ok(payload) = msg.get_payload::<String>() else {
                continue;
            };
            let events = match serde_json::from_str::<Value>(&payload) {
                Ok(Value::Array(all)) => all,
                Ok(one) => vec![one],
                Err(_) => continue,
            };
            let mut sink = sink.lock().expect("events");
            for event in events.iter().filter(|e| e["lock"] == lock.as_str()) {
                let at_us = event["at_us"]
                    .as_u64()
                    .unwrap_or_else(|| event["at_ms"].as_u64().unwrap_or(0) * 1000);
                let kind = event["type"].as_str().unwrap_or_default().to_owned();
                let id = event["lease_id"].as_str().unwrap_or_default().to_owned();
                sink.push((at_us, kind, id));
            }
        }
    });
    Ok((seen, reader))
}

/// Grants that skipped a live waiter queued before them (0 for a strict FIFO lock), with the
/// events in Redis's order (a stable sort: events of one instant keep their arrival order).
fn fifo_inversions(events: &[(u64, String, String)]) -> u64 {
    let mut events = events.to_vec();
    events.sort_by_key(|(at_us, _, _)| *at_us);
    let mut pending: VecDeque<String> = VecDeque::new();
    let mut gone: HashSet<String> = HashSet::new();
    let mut inversions = 0;
    for (_, kind, id) in &events {
        match kind.as_str() {
            "queued" => pending.push_back(id.clone()),
            "left" | "expired" => {
                gone.insert(id.clone());
            }
            "granted" | "acquired" => {
                while pending.front().is_some_and(|head| gone.contains(head)) {
                    pending.pop_front();
                }
                match pending.iter().position(|p| p == id) {
                    Some(0) => {
                        pending.pop_front();
                    }
                    Some(i) => {
                        inversions += 1;
                        pending.remove(i);
                    }
                    // Granted without queueing while others waited: barging.
                    None if !pending.is_empty() => inversions += 1,
                    None => {}
                }
            }
            _ => {}
        }
    }
    inversions
}

/// (RSS in MB, CPU seconds used so far) of a process.
fn process_stats(pid: u32) -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the ")" that ends the command name: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    Ok((rss_kb / 1024.0, ticks / 100.0))
}

async fn waiting_requests(http: &reqwest::Client, url: &str) -> u64 {
    match http.get(format!("{url}/readyz")).send().await {
        Ok(r) => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["waiting_requests"].as_u64())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// The parked-waiters scenario's settings.
struct Waiting {
    waiters: usize,
    locks: usize,
    /// The server's pid, for RSS and CPU.
    pid: u32,
    http2: bool,
    /// How long the server's CPU is watched while everyone waits.
    idle: Duration,
}

async fn parked(url: &str, redis_url: Option<&str>, setup: &Waiting) -> anyhow::Result<Value> {
    let &Waiting {
        waiters,
        locks,
        pid,
        http2,
        idle: idle_window,
    } = setup;
    let http = client();
    let (rss_before, _) = process_stats(pid)?;
    let mut holders = Vec::new();
    for l in 0..locks {
        holders.push(
            acquire(
                &http,
                url,
                &format!("parked-{l}"),
                json!({"ttl_ms": 300_000}),
                0,
            )
            .await?,
        );
    }
    // The waiters use the light client (`scenarios/light_client.rs`): each one's release is
    // part of the drain measured. HTTP/2: the server allows 200 concurrent streams per
    // connection, so the waiters are spread over connections of 150.
    let authority = light_client::authority(url)?;
    let mut shared = Vec::new();
    if http2 {
        for _ in 0..waiters.div_ceil(150) {
            shared.push(light_client::Conn::open_h2(&authority).await?);
        }
    }
    let answered = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let mut tasks = Vec::new();
    for w in 0..waiters {
        let conn = shared
            .get(w % shared.len().max(1))
            .and_then(light_client::Conn::share);
        let (authority, answered) = (authority.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = match conn {
                Some(conn) => conn,
                None => light_client::Conn::open(&authority).await?,
            };
            let lock = format!("parked-{}", w % locks);
            let held = conn.acquire(&lock, r#"{"ttl_ms":30000}"#, 110_000).await?;
            answered.lock().expect("answered").push(Instant::now());
            conn.release(&held).await
        }));
    }
    // Everyone parked (bounded).
    let parking_started = Instant::now();
    let mut parked = 0;
    while parking_started.elapsed() < Duration::from_secs(60) {
        parked = waiting_requests(&http, url).await;
        if parked as usize >= waiters {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let parking_secs = parking_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_parked, cpu0) = process_stats(pid)?;
    tokio::time::sleep(idle_window).await;
    let (_, cpu1) = process_stats(pid)?;
    let idle_cpu_percent = (cpu1 - cpu0) / idle_window.as_secs_f64() * 100.0;
    let redis_info = match redis_url {
        Some(redis_url) => {
            let client = redis::Client::open(redis_url)?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut conn)
                .await?;
            let numpat: i64 = redis::cmd("PUBSUB")
                .arg("NUMPAT")
                .query_async(&mut conn)
                .await?;
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .query_async(&mut conn)
                .await?;
            // Our own connection is one of them.
            json!({"connections": clients.lines().count().saturating_sub(1), "pattern_subscriptions": numpat,
                   "channel_subscriptions": channels.len()})
        }
        None => Value::Null,
    };
    let released_at = Instant::now();
    for held in &holders {
        release(&http, url, held).await?;
    }
    let mut failures = 0;
    for task in tasks {
        if !matches!(task.await, Ok(Ok(()))) {
            failures += 1;
        }
    }
    let mut answers: Vec<Duration> = answered
        .lock()
        .expect("answered")
        .iter()
        .map(|t| t.saturating_duration_since(released_at))
        .collect();
    let drained = answers.iter().max().copied();
    Ok(json!({
        "scenario": "parked", "protocol": if http2 { "h2c" } else { "http/1.1" },
        "client_connections": if http2 { shared.len() } else { waiters },
        "waiters": waiters, "locks": locks, "parked": parked,
        "parking_seconds": parking_secs,
        "rss_mb_before": rss_before, "rss_mb_parked": rss_parked,
        "kb_per_waiter": (rss_parked - rss_before) * 1024.0 / parked.max(1) as f64,
        "idle_seconds": idle_window.as_secs_f64(), "idle_cpu_percent": idle_cpu_percent,
        "redis": redis_info, "drain_seconds": drained.map(|d| d.as_secs_f64()),
        "answered_after_release_ms": percentiles(&mut answers), "failures": failures,
    }))
}

async fn read_heavy(
    url: &str,
    readers: usize,
    writers: usize,
    policy: &str,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let lock = format!("rw-{policy}");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..readers + writers {
        let (url, lock, policy) = (url.to_owned(), lock.clone(), policy.to_owned());
        let kind = if i < readers { "read" } else { "write" };
        tasks.push(tokio::spawn(async move {
            let http = client();
            let (mut grants, mut waits) = (0u64, Vec::new());
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let left = deadline.saturating_duration_since(t0).as_millis() as u64;
                let body = json!({"kind": kind, "policy": policy, "ttl_ms": 30000});
                let Ok(held) = acquire(&http, &url, &lock, body, left.max(1)).await else {
                    break;
                };
                waits.push(t0.elapsed());
                grants += 1;
                release(&http, &url, &held).await?;
            }
            anyhow::Ok((kind, grants, waits))
        }));
    }
    let (mut reads, mut writes, mut writer_waits) = (0, 0, Vec::new());
    for task in tasks {
        let (kind, grants, waits) = task.await??;
        if kind == "read" {
            reads += grants;
        } else {
            writes += grants;
            writer_waits.extend(waits);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(json!({
        "scenario": "read_heavy", "policy": policy, "readers": readers, "writers": writers, "seconds": secs,
        "reads_per_s": reads as f64 / secs, "writes": writes, "writer_wait_ms": percentiles(&mut writer_waits),
    }))
}

async fn dashboard(url: &str, locks: usize, renders: usize) -> anyhow::Result<Value> {
    let http = client();
    let probe = http.get(format!("{url}/")).send().await?;
    if !probe.status().is_success() {
        return Ok(
            json!({"scenario": "dashboard", "unavailable": format!("GET / answered {}", probe.status())}),
        );
    }
    // Live locks, taken 32 at a time.
    let names: Vec<String> = (0..locks).map(|i| format!("dash-{i:05}")).collect();
    let url_owned = url.to_owned();
    futures_util::stream::iter(names)
        .map(|name| {
            let (http, url) = (http.clone(), url_owned.clone());
            async move {
                acquire(
                    &http,
                    &url,
                    &name,
                    json!({"ttl_ms": 600_000, "holder": "bench"}),
                    0,
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..renders {
        let t0 = Instant::now();
        let page = http.get(format!("{url}/")).send().await?.bytes().await?;
        times.push(t0.elapsed());
        bytes = page.len();
    }
    Ok(
        json!({"scenario": "dashboard", "locks": locks, "render_ms": percentiles(&mut times), "page_bytes": bytes}),
    )
}
