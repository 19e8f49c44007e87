//! The dashboard scenario: the overview's render time with many live locks.

use std::time::Instant;

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::leases::acquire;
use crate::{client, percentiles};

pub(super) async fn dashboard(url: &str, locks: usize, renders: usize) -> anyhow::Result<Value> {
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
