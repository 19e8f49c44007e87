//! The uncontended scenario: each connection acquires and releases its own lock name, or
//! (`--names N`) its share of N names in turn.

use std::time::Instant;

use serde_json::{Value, json};

use crate::light_client::{self, Names};
use crate::redis_cost::RedisAccount;
use crate::{percentiles, process_stats};

/// The uncontended loop, driven by the light client (`scenarios/light_client.rs`) on a thread of its
/// own. Its CPU time is reported, so that the report can set what the load cost beside what
/// it measured. With `redis_url`, so is what the loop cost Redis per cycle (see
/// [`RedisAccount`]): issue 10 measured a cycle's Redis time in this loop, at 16 connections.
/// With `names` (spread over N names, as `benches/cluster.sh` runs it, so that the names land
/// on every shard of a cluster), also `names` and `cycles_by_name`: the cycles completed on
/// `u-<j>`, by `j`. With `server_pids`, what the loop cost those processes in CPU per cycle
/// (the servers', for issue 58's ratio to Redis's); the connections are spread over `urls`.
pub(super) async fn uncontended(
    urls: &[&str],
    redis_url: Option<&str>,
    (connections, http2): (usize, bool),
    (spread, server_pids): (Names, &[u32]),
    deadline: Instant,
) -> anyhow::Result<Value> {
    let authorities = urls
        .iter()
        .map(|url| light_client::authority(url))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let servers_cpu = || -> anyhow::Result<f64> {
        let mut sum = 0.0;
        for pid in server_pids {
            sum += process_stats(*pid)?.1;
        }
        Ok(sum)
    };
    let servers_before = servers_cpu()?;
    let mut account = match redis_url {
        Some(redis_url) => Some(RedisAccount::start(redis_url).await?),
        None => None,
    };
    let (_, cpu_before) = process_stats(std::process::id())?;
    let started = Instant::now();
    let cycles = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(light_client::cycle_loop(
                &authorities,
                (connections, http2),
                spread,
                deadline,
            ))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let secs = started.elapsed().as_secs_f64();
    let (_, cpu_after) = process_stats(std::process::id())?;
    let servers_used = servers_cpu()? - servers_before;
    let (mut acq, mut rel) = (cycles.acquire, cycles.release);
    let requests = 2 * acq.len();
    let redis = match account.as_mut() {
        Some(account) => account.per_cycle(acq.len()).await?,
        None => Value::Null,
    };
    let mut result = json!({
        "scenario": "uncontended", "connections": connections, "http2": http2, "seconds": secs,
        "cycles": acq.len(), "cycles_per_s": acq.len() as f64 / secs,
        "client_cpu_us_per_request": (cpu_after - cpu_before) * 1e6 / requests.max(1) as f64,
        "acquire_ms": percentiles(&mut acq), "release_ms": percentiles(&mut rel),
        "redis": redis,
    });
    if !server_pids.is_empty() {
        result["servers"] = json!(urls.len());
        result["server_cpu_us_per_cycle"] = json!(servers_used * 1e6 / acq.len().max(1) as f64);
    }
    if let Names::Floor = spread {
        result["floor"] = json!("/healthz");
    }
    if let Names::Spread(n) = spread {
        result["names"] = json!(n);
        result["cycles_by_name"] = json!(cycles.by_name);
    }
    Ok(result)
}
