//! `GET /redis`: the Redis behind this instance (mode, master, replicas and their lag,
//! acknowledgements, failovers followed; in Cluster mode the primaries with their slots,
//! keys, load and replicas, and the topology changes seen); the same as `GET /v1/admin/redis`, for the
//! deployment's own viewers (the default tenant: the addresses are the deployment's).

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};

use super::error::{PageResult, render};
use super::format::ago;
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::locks::RedisStatus;
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
    let status = principal
        .tenant
        .is_default()
        .then(|| state.locks.redis_status());
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
    render(&RedisPage {
        nav,
        status,
        replicas,
        switches,
        changes,
    })
}

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
    pub switches: Vec<SwitchRow>,
    /// Cluster mode: the topology changes seen, newest first (when, what).
    pub changes: Vec<(String, String)>,
}
