//! What load costs Redis, from its own counters (`INFO commandstats`, `INFO cpu`): the
//! accounting, the honest ceiling (Redisson's scripts straight at Redis) and one Leasehold
//! cycle's cost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::leases::{acquire_at, release};
use crate::{client_http, percentiles};

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

pub(super) async fn redis_minimal(
    redis_url: &str,
    connections: usize,
    deadline: Instant,
) -> anyhow::Result<Value> {
    let client = redis::Client::open(redis_url)?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let acquire = Arc::new(redis::Script::new(include_str!(
        "../redisson/lock_acquire.lua"
    )));
    let release = Arc::new(redis::Script::new(include_str!(
        "../redisson/lock_release.lua"
    )));
    // Loaded first, so that no NOSCRIPT round trip is measured.
    acquire.prepare_invoke().load_async(&mut admin).await?;
    release.prepare_invoke().load_async(&mut admin).await?;
    let mut account = RedisAccount::start(redis_url).await?;
    let (_, client_cpu_before) = crate::process_stats(std::process::id())?;
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
    let (_, client_cpu_after) = crate::process_stats(std::process::id())?;
    let (cpu, stats) = account.read().await?;
    let (calls, usec) = stats.get("evalsha").copied().unwrap_or((0, 0));
    let pairs = acq.len();
    let per_pair = |x: f64| x / pairs.max(1) as f64;
    Ok(json!({
        "scenario": "redis_minimal", "connections": connections, "seconds": secs,
        "pairs": pairs, "pairs_per_s": pairs as f64 / secs,
        "evalsha_calls": calls, "redis_us_per_pair": per_pair(usec as f64),
        "redis_cpu_us_per_pair": per_pair(cpu * 1e6),
        // What the two script calls cost their redis-rs client (this process): the floor of
        // two Redis round trips from a Rust server.
        "client_cpu_us_per_pair": per_pair((client_cpu_after - client_cpu_before) * 1e6),
        "acquire_ms": percentiles(&mut acq), "release_ms": percentiles(&mut rel),
    }))
}

pub(super) async fn redis_cost(
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

/// What a stretch of load cost Redis, from its own counters: the scripts' time (`INFO
/// commandstats`: FCALL usec, which includes the commands a function calls) and Redis's CPU
/// (`INFO cpu`: everything, the events' PUBLISH from the server and the networking too). The
/// counters are Redis-wide: the run must be the only client.
pub(super) struct RedisAccount {
    admin: redis::aio::MultiplexedConnection,
    cpu_before: f64,
}

impl RedisAccount {
    pub(super) async fn start(redis_url: &str) -> anyhow::Result<Self> {
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
    pub(super) async fn per_cycle(&mut self, cycles: usize) -> anyhow::Result<Value> {
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
