//! The shipped monitoring: `deploy/prometheus/alerts.yml` passes `promtool check rules` and
//! its unit tests (`promtool test rules`), and every metric the alerts and the Grafana
//! dashboard (`deploy/grafana/leasehold.json`) query is one a real server exposes.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::helpers::browser::which;
use crate::helpers::{AppOptions, spawn_app_with};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn promtool_missing() -> bool {
    if which("promtool").is_some() {
        return false;
    }
    assert!(
        std::env::var_os("LEASEHOLD_SKIP_PROMTOOL").is_some(),
        "promtool is not installed (bash .ci/test installs Debian's prometheus package); set \
         LEASEHOLD_SKIP_PROMTOOL=1 to skip"
    );
    true
}

fn promtool(args: &[&str], dir: &Path) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alerting_rules_pass_promtool_and_their_unit_tests() {
    if promtool_missing() {
        return;
    }
    let dir = deploy("prometheus");
    promtool(&["check", "rules", "alerts.yml"], &dir);
    promtool(&["test", "rules", "alerts_test.yml"], &dir);
}

/// The metric names a query text mentions (histogram series by their family's `_bucket`).
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for start in ["leasehold_", "process_"] {
        let mut rest = text;
        while let Some(at) = rest.find(start) {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_query_is_exposed() {
    let app = spawn_app_with(AppOptions {
        metrics_lock_names: true,
        ..AppOptions::default()
    })
    .await;
    app.wait_until_ready().await;
    // Something held, something waited for a while: every family has a series.
    app.lease("jobs", json!({"ttl_ms": 60_000})).await;
    app.acquire_with("jobs", 30, json!({}), None)
        .await
        .assert_problem(409, "lock_held");
    let scrape = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    let alerts = std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("alerts.yml");
    let dashboard = std::fs::read_to_string(deploy("grafana/leasehold.json")).expect("dashboard");
    let parsed: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(parsed["panels"].as_array().is_some_and(|p| p.len() >= 10));
    let mut queried = metric_names(&alerts);
    queried.extend(metric_names(&dashboard));
    // Names in prose (descriptions) count too: they must not name a metric that is gone.
    for name in queried {
        let exposed = ["", "_count"].iter().any(|suffix| {
            scrape.contains(&format!("\n{name}{suffix}{{"))
                || scrape.contains(&format!("\n{name}{suffix} "))
        });
        assert!(exposed, "{name} is queried but not exposed");
    }
}
