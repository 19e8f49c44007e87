//! The route matrix by kind of lease: every kind (each lock kind, RedLock over three nodes, a
//! semaphore, a multilease) through every route a lease has: acquire with an Idempotency-Key
//! (and its retry, also once the caller is at its quota), the caller's quota, the acquisitions
//! metric (once per call), the lock's inspection, the listing, the lease's inspection,
//! heartbeat, watch, an admin's force release (audited; for RedLock on every node),
//! `/v1/events`, the next grant of the name, and an admin's revocation of it (evicted at its
//! deadline wherever it lives). A new kind of lease that skips a route fails here.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt as _;
use leasehold::leases::redlock::RedlockSettings;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::Reply;
use crate::helpers::{AppOptions, RedisServer, TestApp, spawn_app_tweaked};

/// The kinds of lease, and the routes each uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A lock kind on `/v1/locks` (`kind` in the body).
    Lock(&'static str),
    Semaphore,
    Multilease,
}

const KINDS: [Kind; 8] = [
    Kind::Lock("reentrant"),
    Kind::Lock("exclusive"),
    Kind::Lock("fair"),
    Kind::Lock("read"),
    Kind::Lock("write"),
    Kind::Lock("redlock"),
    Kind::Semaphore,
    Kind::Multilease,
];

impl Kind {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Lock(kind) => kind,
            Self::Semaphore => "semaphore",
            Self::Multilease => "multilease",
        }
    }

    /// The names a lease of this kind holds (`n`: which of the cell's leases).
    fn names(self, n: u32) -> Vec<String> {
        let base = format!("k-{}-{n}", self.label());
        match self {
            Self::Multilease => vec![format!("{base}-a"), format!("{base}-b")],
            _ => vec![base],
        }
    }

    /// How many leases one grant counts as against `max_leases`.
    fn leases(self) -> usize {
        self.names(0).len()
    }

    pub(super) fn acquire(self, app: &TestApp, n: u32) -> reqwest::RequestBuilder {
        let names = self.names(n);
        let (path, body) = match self {
            Self::Lock(kind) => (
                format!("/v1/locks/{}/leases", names[0]),
                json!({"kind": kind, "ttl_ms": 30_000}),
            ),
            Self::Semaphore => (
                format!("/v1/semaphores/{}/leases", names[0]),
                json!({"limit": 2, "ttl_ms": 30_000}),
            ),
            Self::Multilease => (
                "/v1/multileases".to_owned(),
                json!({"locks": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(), "ttl_ms": 30_000}),
            ),
        };
        app.http.post(app.url(&path)).json(&body)
    }

    /// Where an admin force-releases the lease's (first) name.
    fn force_release_path(self, n: u32) -> String {
        let name = &self.names(n)[0];
        match self {
            Self::Semaphore => format!("/v1/admin/semaphores/{name}?reason=matrix"),
            _ => format!("/v1/admin/locks/{name}?reason=matrix"),
        }
    }

    /// Where an admin asks the lease's (first) name's holders to let go.
    pub(super) fn revoke_path(self, n: u32) -> String {
        let name = &self.names(n)[0];
        match self {
            Self::Semaphore => format!("/v1/admin/semaphores/{name}/revoke"),
            _ => format!("/v1/admin/locks/{name}/revoke"),
        }
    }

    /// The inspection of the lease's (first) name.
    fn inspect_path(self, n: u32) -> String {
        let name = &self.names(n)[0];
        match self {
            Self::Semaphore => format!("/v1/semaphores/{name}"),
            _ => format!("/v1/locks/{name}"),
        }
    }
}

/// A server with three RedLock nodes beside its main Redis (every RedLock test's).
pub(crate) async fn with_nodes() -> (TestApp, Vec<RedisServer>) {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let app = spawn_app_tweaked(AppOptions::default(), |config| {
        config.redlock = Some(RedlockSettings {
            nodes: urls,
            ca_file: None,
        });
    })
    .await;
    (app, nodes)
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
pub(super) fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

pub(super) async fn scrape(app: &TestApp) -> String {
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.text().await.expect("text")
}

/// The events `GET /v1/events?backlog=…` sends at once (read for 300 ms).
pub(crate) async fn backlog(app: &TestApp) -> Vec<Value> {
    backlog_of(app, "").await
}

/// [`backlog`] with a filter (`prefix=...&`).
pub(crate) async fn backlog_of(app: &TestApp, filter: &str) -> Vec<Value> {
    let response = app
        .http
        .get(app.url(&format!("/v1/events?{filter}backlog=500")))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout(Duration::from_millis(300), stream.next()).await
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .flat_map(|v| match v {
            Value::Array(all) => all,
            one => vec![one],
        })
        .collect()
}

/// One lease as the routes use it: its URL and token.
pub(super) struct Held {
    pub(super) path: String,
    pub(super) token: String,
    pub(super) id: String,
}

impl Held {
    pub(super) fn of(reply: &Reply) -> Self {
        Self {
            path: reply.header("location").expect("Location").to_owned(),
            token: reply.str("token"),
            id: reply.str("lease_id"),
        }
    }
}

#[tokio::test]
async fn every_kind_of_lease_goes_through_every_route() {
    let (app, nodes) = with_nodes().await;
    for kind in KINDS {
        check_kind(&app, kind).await;
    }
    // RedLock: nothing is left on any node.
    for node in &nodes {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("k-redlock-*")
            .query_async(&mut node.conn().await)
            .await
            .expect("KEYS");
        let held: Vec<&String> = keys.iter().filter(|k| !k.contains(':')).collect();
        assert!(held.is_empty(), "a RedLock node still holds {held:?}");
    }
}

async fn check_kind(app: &TestApp, kind: Kind) {
    let label = kind.label();
    let (_, secret) = app
        .create_key(json!({"name": format!("matrix-{label}"), "roles": ["client", "reader"], "quotas": {"max_leases": 2 * kind.leases()}}))
        .await;
    let caller = app.with_key(&secret);
    let key = format!("matrix-{label}-1");
    let held = check_keyed_acquire(&caller, kind, &key).await;
    check_quota(&caller, kind, &key, &held).await;
    check_reads(app, &caller, kind, &held).await;
    check_force_release(app, &caller, kind, &held).await;
    check_events(&caller, kind, &held).await;
    check_audit(app, kind).await;
    super::revocations::check_revocation(app, &caller, kind).await;
}

/// Acquire with an Idempotency-Key, then its retry: the same lease, said to be a replay. The
/// metric counted the call once (a RedLock call too, whatever its nodes did); a multilease is
/// one acquisition per member lock.
async fn check_keyed_acquire(caller: &TestApp, kind: Kind, key: &str) -> Held {
    let label = kind.label();
    let before = scrape(caller).await;
    let first = caller
        .send(kind.acquire(caller, 0).header("idempotency-key", key))
        .await;
    first.assert_status(201);
    let held = Held::of(&first);
    let after = scrape(caller).await;
    let retry = caller
        .send(kind.acquire(caller, 0).header("idempotency-key", key))
        .await;
    retry.assert_status(201);
    assert_eq!(
        retry.str("lease_id"),
        held.id,
        "{label}: a retry gets the first lease"
    );
    assert_eq!(retry.header("idempotent-replayed"), Some("true"), "{label}");

    let (metric_kind, count) = match kind {
        Kind::Multilease => ("reentrant", 2.0),
        _ => (label, 1.0),
    };
    let granted = |text: &str| {
        sample(
            text,
            "leasehold_acquisitions_total",
            &[("kind", metric_kind), ("outcome", "granted")],
        )
    };
    assert_eq!(
        granted(&after) - granted(&before),
        count,
        "{label}: acquisitions"
    );
    if kind == Kind::Lock("redlock") {
        let node_calls = sample(
            &after,
            "leasehold_redlock_node_calls_total",
            &[("script", "acquire")],
        );
        assert!(
            node_calls >= 3.0,
            "each node's calls are their own series: {node_calls}"
        );
    }
    held
}

/// The caller's quota counts `held` (its keyed retry did not): a second lease is the last
/// one; at the quota, the keyed retry is still the first answer, as it takes nothing new.
async fn check_quota(caller: &TestApp, kind: Kind, key: &str, held: &Held) {
    let label = kind.label();
    let second = caller.send(kind.acquire(caller, 1)).await;
    second.assert_status(201);
    caller
        .send(kind.acquire(caller, 2))
        .await
        .assert_problem(429, "quota_exceeded");
    let at_quota = caller
        .send(kind.acquire(caller, 0).header("idempotency-key", key))
        .await;
    at_quota.assert_status(201);
    assert_eq!(
        at_quota.str("lease_id"),
        held.id,
        "{label}: a retry at the quota"
    );
    let second = Held::of(&second);
    caller
        .send(
            caller
                .http
                .delete(caller.url(&second.path))
                .bearer_auth(&second.token),
        )
        .await;
}

/// Heartbeat, then a watch; an admin's force release ends both.
async fn check_force_release(app: &TestApp, caller: &TestApp, kind: Kind, held: &Held) {
    let label = kind.label();
    let beat = caller
        .send(
            caller
                .http
                .post(caller.url(&format!("{}/heartbeat", held.path)))
                .bearer_auth(&held.token),
        )
        .await;
    beat.assert_status(200);
    if kind == Kind::Lock("redlock") {
        assert_eq!(beat.u64("nodes_acked"), 3);
    }
    let watch = caller
        .http
        .get(caller.url(&format!("{}/watch", held.path)))
        .bearer_auth(&held.token)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200, "{label}: watch");
    let forced = app
        .admin(Method::DELETE, &kind.force_release_path(0), None)
        .await;
    forced.assert_status(200);
    assert!(
        forced.body["removed"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{label}: force release removed nothing: {}",
        forced.body
    );
    let lost = read_lost(watch).await;
    assert!(
        lost.contains("force_released"),
        "{label}: the watch said {lost:?}"
    );
    caller
        .send(
            caller
                .http
                .post(caller.url(&format!("{}/heartbeat", held.path)))
                .bearer_auth(&held.token),
        )
        .await
        .assert_status(410);
}

/// The lock's inspection, the listing and the lease's inspection all show the lease.
async fn check_reads(app: &TestApp, caller: &TestApp, kind: Kind, held: &Held) {
    let label = kind.label();
    let lock = caller.get(&kind.inspect_path(0)).await;
    lock.assert_status(200);
    let text = lock.body.to_string();
    let lease_shown = match kind {
        // A multilease's member lease is its own (derived) lease of the lock.
        Kind::Multilease => text.contains(&held.id),
        _ => text.contains(&held.id),
    };
    assert!(
        lease_shown,
        "{label}: the lock's inspection shows the lease: {text}"
    );
    if kind == Kind::Lock("redlock") {
        assert_eq!(lock.body["kind"], "redlock", "{text}");
    }
    let names: HashSet<String> = kind.names(0).into_iter().collect();
    let listed = caller.get(&format!("/v1/locks?prefix=k-{label}-")).await;
    listed.assert_status(200);
    let listed: HashSet<String> = listed.body["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["name"].as_str().or(l["lock"].as_str()).map(str::to_owned))
        .collect();
    assert!(names.is_subset(&listed), "{label}: listed {listed:?}");
    let lease = caller.get(&held.path).await;
    lease.assert_status(200);
    assert_eq!(lease.body["state"], "held", "{label}: {}", lease.body);
    let _ = app;
}

/// `/v1/events` carries the lease's grant and its force release.
async fn check_events(app: &TestApp, kind: Kind, held: &Held) {
    let label = kind.label();
    let events = backlog(app).await;
    let names: HashSet<String> = kind.names(0).into_iter().collect();
    let of_names: Vec<&Value> = events
        .iter()
        .filter(|e| e["lock"].as_str().is_some_and(|l| names.contains(l)))
        .collect();
    let types: HashSet<&str> = of_names.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(types.contains("acquired"), "{label}: events {of_names:?}");
    assert!(
        types.contains("force_released"),
        "{label}: events {of_names:?}"
    );
    if kind == Kind::Lock("redlock") {
        let granted: Vec<&&Value> = of_names
            .iter()
            .filter(|e| e["type"] == "acquired" && e["lease_id"] == held.id.as_str())
            .collect();
        assert_eq!(
            granted.len(),
            1,
            "one event per RedLock grant, not per node"
        );
        assert_eq!(granted[0]["kind"], "redlock");
    }
}

/// The force release is in the audit log once.
async fn check_audit(app: &TestApp, kind: Kind) {
    let name = &kind.names(0)[0];
    let audit = app
        .admin(Method::GET, "/v1/admin/audit?limit=500", None)
        .await;
    audit.assert_status(200);
    let entries = audit.body["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ours = entries
        .iter()
        .filter(|e| e["target"] == name.as_str() && e["reason"] == "matrix")
        .count();
    assert_eq!(ours, 1, "{}: audit {}", kind.label(), audit.body);
}

/// The watch's `lost` event (bounded), and all it said before.
pub(super) async fn read_lost(watch: reqwest::Response) -> String {
    let mut stream = watch.bytes_stream();
    let mut text = String::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.contains("event: lost") && text.contains("\n\n") && text.contains("reason") {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    text
}
