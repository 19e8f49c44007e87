//! `/v1/locks/{name}/leases`: acquire, heartbeat, release and inspect leases.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::extract::{Bearer, JsonBody, Path, Query, lease_id, lock_name};
use super::problem::Problem;
use crate::locks::{
    AcquireRequest, Grant, HolderLabel, LeaseId, LeaseView, LockName, Metadata, Release, Renewal,
};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// Lease TTL in ms; the server default when absent.
    ttl_ms: Option<u64>,
    /// Free-text label naming the holder, shown to operators and to refused acquirers.
    holder: Option<String>,
    /// A small JSON object kept with the lease.
    metadata: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireQuery {
    /// How long to wait server-side while the lock is held, in ms (default 0).
    #[serde(default)]
    wait_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct GrantBody {
    lease_id: LeaseId,
    /// The lease's bearer token: only in the 201 of a new lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    lock: String,
    holder: Option<String>,
    fencing_token: u64,
    reentry_count: u64,
    ttl_ms: u64,
    expires_at: String,
}

/// `POST /v1/locks/{name}/leases[?wait_ms=N]`: 201 with a new lease, 200 on reentry (with the
/// lease's token as bearer), 409 when held by another after the wait.
pub async fn acquire(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<AcquireQuery>,
    bearer: Bearer,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, Problem> {
    let name = lock_name(&name)?;
    let token = bearer.lease_token()?;
    let ttl = body
        .ttl_ms
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    let request = AcquireRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        token,
    };
    let wait = Duration::from_millis(query.wait_ms).min(state.limits.max_wait);
    let ttl = ttl.unwrap_or_else(|| state.limits.ttl.default_ttl());
    let grant = state.locks.acquire(&name, request, ttl, wait).await?;
    Ok(grant_response(&name, grant))
}

fn grant_response(name: &LockName, grant: Grant) -> Response {
    let status = if grant.is_new() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let location = lease_path(name, grant.lease_id);
    let body = GrantBody {
        lease_id: grant.lease_id,
        token: grant.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        holder: grant.holder,
        fencing_token: grant.fencing_token.0,
        reentry_count: grant.reentry_count,
        ttl_ms: grant.ttl_ms,
        expires_at: grant.expires_at.rfc3339(),
    };
    let mut response = (status, Json(body)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/locks/{name}/leases/{id}")
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// A new TTL in ms, kept for later heartbeats; the lease's own TTL when absent.
    ttl_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct RenewalBody {
    lease_id: LeaseId,
    lock: String,
    fencing_token: u64,
    reentry_count: u64,
    ttl_ms: u64,
    expires_at: String,
}

/// `POST /v1/locks/{name}/leases/{lease_id}/heartbeat`: 200 with the new expiry, 410 when the
/// lease has already lost its lock.
pub async fn heartbeat(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    bearer: Bearer,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<RenewalBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let ttl = body
        .ttl_ms
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    let Renewal {
        lease_id,
        reentry_count,
        fencing_token,
        ttl_ms,
        expires_at,
        ..
    } = state.locks.renew(&name, id, &token, ttl).await?;
    Ok(Json(RenewalBody {
        lease_id,
        lock: name.to_string(),
        fencing_token: fencing_token.0,
        reentry_count,
        ttl_ms,
        expires_at: expires_at.rfc3339(),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseQuery {
    /// Release every reentry level at once.
    #[serde(default)]
    all: bool,
}

#[derive(Debug, Serialize)]
pub struct ReleaseBody {
    lease_id: LeaseId,
    lock: String,
    /// True when the lock was let go (no levels left).
    released: bool,
    reentry_count: u64,
}

/// `DELETE /v1/locks/{name}/leases/{lease_id}[?all=true]`: 200 with the levels left, 410 when
/// the lease had already lost its lock.
pub async fn release(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Query(query): Query<ReleaseQuery>,
    bearer: Bearer,
) -> Result<Json<ReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    let Release {
        lease_id,
        reentry_count,
        released,
    } = state.locks.release(&name, id, &token, query.all).await?;
    Ok(Json(ReleaseBody {
        lease_id,
        lock: name.to_string(),
        released,
        reentry_count,
    }))
}

#[derive(Debug, Serialize)]
pub struct LeaseBody {
    lease_id: LeaseId,
    lock: String,
    state: &'static str,
    holder: Option<String>,
    metadata: Option<serde_json::Value>,
    fencing_token: u64,
    reentry_count: u64,
    ttl_ms: u64,
    remaining_ms: Option<u64>,
    acquired_at: String,
    expires_at: String,
    ended_at: Option<String>,
}

/// `GET /v1/locks/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<LeaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let view: LeaseView = state.locks.lease(&name, id).await?;
    Ok(Json(LeaseBody {
        lease_id: view.lease_id,
        lock: view.lock.to_string(),
        state: view.state.as_str(),
        holder: view.holder,
        metadata: view.metadata.map(Metadata::into_value),
        fencing_token: view.fencing_token.0,
        reentry_count: view.reentry_count,
        ttl_ms: view.ttl_ms,
        remaining_ms: view.remaining_ms,
        acquired_at: view.acquired_at.rfc3339(),
        expires_at: view.expires_at.rfc3339(),
        ended_at: view.ended_at.map(|t| t.rfc3339()),
    }))
}
