//! The read-heavy scenario: readers and writers on one read/write lock.

use std::time::Instant;

use serde_json::{Value, json};

use crate::leases::{acquire, release};
use crate::{client, percentiles};

pub(super) async fn read_heavy(
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
