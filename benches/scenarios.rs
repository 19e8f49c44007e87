//! Load scenarios against a running Leasehold server, each printing one JSON object of results
//! on stdout. `benches/run.sh` starts Redis and the server and runs them all; by hand:
//!
//! `cargo bench --bench scenarios -- --url http://127.0.0.1:8080 uncontended --connections 64`
//!
//! Every loop is bounded in time (`--seconds`) and every request in wait (`wait_ms`).

// The modules live in benches/scenarios/: `mod x;` in a bench's root file would look beside
// it, in benches/, where Cargo takes every file for a bench target of its own.
#[path = "scenarios/contended.rs"]
mod contended;
#[path = "scenarios/dashboard.rs"]
mod dashboard;
#[path = "scenarios/leases.rs"]
mod leases;
#[path = "scenarios/light_client.rs"]
mod light_client;
#[path = "scenarios/parked.rs"]
mod parked;
#[path = "scenarios/read_heavy.rs"]
mod read_heavy;
#[path = "scenarios/redis_cost.rs"]
mod redis_cost;
#[path = "scenarios/uncontended.rs"]
mod uncontended;

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::contended::contended;
use crate::dashboard::dashboard;
use crate::parked::{Waiting, parked};
use crate::read_heavy::read_heavy;
use crate::redis_cost::{redis_cost, redis_minimal};
use crate::uncontended::uncontended;

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
        /// Spread the cycles over this many names (`u-0` ..), each connection cycling through
        /// its share in turn, instead of one name per connection; adds the cycles completed
        /// per name to the results (`cycles_by_name`).
        #[arg(long)]
        names: Option<usize>,
        /// The servers' pids (comma-separated): adds what the loop cost them in CPU per cycle
        /// (`server_cpu_us_per_cycle`, all of them together, from `/proc/<pid>/stat`).
        #[arg(long, value_delimiter = ',')]
        server_pids: Vec<u32>,
        /// Spread the connections over these servers (comma-separated URLs; `--url` is then
        /// only the first): `benches/cpu.sh`'s two-instance loop.
        #[arg(long, value_delimiter = ',')]
        also_urls: Vec<String>,
        /// No locks: each cycle is two `GET /healthz` (answered without Redis), what two HTTP
        /// requests cost on this stack: the floor a lock cycle stands on.
        #[arg(long)]
        floor: bool,
        /// The clients as streams of one h2c connection per server instead of one HTTP/1.1
        /// connection each.
        #[arg(long)]
        http2: bool,
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
        Scenario::Uncontended {
            connections,
            names,
            server_pids,
            also_urls,
            floor,
            http2,
        } => {
            let spread = match (floor, names) {
                (true, _) => light_client::Names::Floor,
                (false, Some(n)) => light_client::Names::Spread(*n),
                (false, None) => light_client::Names::PerClient,
            };
            let mut urls = vec![args.url.as_str()];
            urls.extend(also_urls.iter().map(String::as_str));
            uncontended(
                &urls,
                args.redis_url.as_deref(),
                (*connections, *http2),
                (spread, server_pids),
                deadline,
            )
            .await?
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
