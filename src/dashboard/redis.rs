//! `GET /redis`: the Redis behind this instance (mode, master, memory against maxmemory,
//! persistence, replicas and their lag, lost replicas as down,
//! acknowledgements, failovers followed; in Cluster mode the primaries with their slots,
//! keys, load and replicas, and the topology changes seen); the same as `GET /v1/admin/redis`, for
//! the same callers: the deployment's own admins (the default tenant's: the addresses are the
//! deployment's).

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};

use super::error::{PageResult, render};
use super::format::ago;
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::locks::{Persistence, RedisMemory, RedisStatus};
use crate::locks::{Timestamp, wall_ms};
use crate::state::AppState;

/// `GET /redis`.
pub(super) async fn redis_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let status = (principal.tenant.is_default()
        && principal.roles.contains(crate::auth::Role::Admin))
    .then(|| state.locks.backend().status());
    let now = wall_ms();
    let replicas = status
        .as_ref()
        .and_then(|s| s.replication.as_ref())
        .map(|r| {
            r.replicas
                .iter()
                .map(|r| ReplicaRow {
                    addr: r.addr.clone(),
                    state: r.state.clone(),
                    behind_bytes: r.behind_bytes,
                    lag_s: r.lag_s,
                })
                .collect()
        })
        .unwrap_or_default();
    let switches = status
        .as_ref()
        .and_then(|s| s.sentinel.as_ref())
        .map(|s| {
            s.switches
                .iter()
                .rev()
                .map(|w| SwitchRow {
                    from: w.from.clone().unwrap_or_else(|| "—".into()),
                    to: w.to.clone(),
                    when: ago(Timestamp(w.at_ms), now),
                })
                .collect()
        })
        .unwrap_or_default();
    let changes = status
        .as_ref()
        .and_then(|s| s.cluster.as_ref())
        .map(|c| {
            c.changes
                .iter()
                .rev()
                .map(|c| (ago(Timestamp(c.at_ms), now), c.what.clone()))
                .collect()
        })
        .unwrap_or_default();
    let (memory, persistence) = if status.is_some() {
        (
            state.locks.backend().memory().await.ok().map(memory_text),
            state
                .locks
                .backend()
                .persistence()
                .await
                .ok()
                .map(|p| persistence_text(&p, now)),
        )
    } else {
        (None, None)
    };
    let master = status.as_ref().and_then(|s| s.master.clone());
    let lost = status
        .as_ref()
        .and_then(|s| s.replication.as_ref())
        .map(|r| {
            r.lost
                .iter()
                // A replica promoted to master is gone from the list, not lost.
                .filter(|l| Some(&l.addr) != master.as_ref())
                .map(|l| (l.addr.clone(), ago(Timestamp(l.last_seen_ms), now)))
                .collect()
        })
        .unwrap_or_default();
    render(&RedisPage {
        nav,
        status,
        replicas,
        lost,
        switches,
        changes,
        memory,
        persistence,
    })
}

/// `12.3 MB of 512.0 MB maxmemory (2 %)`, and the state when it is not ok.
fn memory_text(m: RedisMemory) -> (String, &'static str) {
    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1_000_000.0);
    let text = if m.max_bytes == 0 {
        format!(
            "{} used; no maxmemory: Redis grows until the machine runs out",
            mb(m.used_bytes)
        )
    } else {
        format!(
            "{} of {} maxmemory ({:.0} %)",
            mb(m.used_bytes),
            mb(m.max_bytes),
            m.used_ratio() * 100.0
        )
    };
    (text, m.state().as_str())
}

/// What a restart loses, whether the last write to disk worked, and the last snapshot.
fn persistence_text(p: &Persistence, now_ms: u64) -> (String, bool) {
    let snapshot = match p.last_save_unix {
        0 => "no snapshot yet".to_owned(),
        at => format!(
            "last snapshot {}, {} changes since",
            ago(Timestamp(at * 1000), now_ms),
            p.changes_since_save
        ),
    };
    (format!("{}; {snapshot}", p.verdict()), p.writes_ok)
}

/// (address, last seen) of a replica the master no longer lists.
pub type LostRow = (String, String);

pub struct ReplicaRow {
    pub addr: String,
    pub state: String,
    pub behind_bytes: u64,
    pub lag_s: u64,
}

pub struct SwitchRow {
    pub from: String,
    pub to: String,
    pub when: String,
}

#[derive(Template)]
#[template(path = "redis.html")]
pub struct RedisPage {
    pub nav: Nav,
    /// `None`: the viewer is not of the deployment's own tenant.
    pub status: Option<RedisStatus>,
    pub replicas: Vec<ReplicaRow>,
    /// Replicas seen before and missing now: shown as down.
    pub lost: Vec<LostRow>,
    pub switches: Vec<SwitchRow>,
    /// Used against maxmemory, and the state (`ok`, `short`, `full`).
    pub memory: Option<(String, &'static str)>,
    /// What a restart loses, and whether the last AOF write or snapshot worked.
    pub persistence: Option<(String, bool)>,
    /// Cluster mode: the topology changes seen, newest first (when, what).
    pub changes: Vec<(String, String)>,
}
