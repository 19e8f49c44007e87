//! `/v1/semaphores/{name}`: semaphores with expirable permits, behind the same lease API.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::extract::{Bearer, JsonBody, Path, Query, lease_id, lock_name};
use super::leases::{
    HeartbeatBody, LeaseBody, ReleaseBody, RenewalBody, grant_response, lease_body, release_body,
    renewal_body,
};
use super::problem::{Problem, ProblemKind};
use crate::locks::{
    HolderLabel, LeaseId, LockError, LockName, Metadata, PermitHolderView, PermitRequest,
};
use crate::state::AppState;

/// The largest semaphore a request may declare.
const MAX_LIMIT: u32 = 100_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitBody {
    /// How many permits the semaphore has; every party must name the same.
    limit: Option<u32>,
    /// Permits this lease takes (default 1).
    permits: Option<u32>,
    ttl_ms: Option<u64>,
    holder: Option<String>,
    metadata: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// How long to wait server-side for permits, in ms (default 0).
    #[serde(default)]
    wait_ms: u64,
}

/// `POST /v1/semaphores/{name}/leases[?wait_ms=N]`: 201 with a lease holding `permits`
/// permits, 409 `no_permits` when not enough are free after the wait.
pub async fn acquire(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<WaitQuery>,
    JsonBody(body): JsonBody<PermitBody>,
) -> Result<Response, Problem> {
    let name = lock_name(&name)?;
    let Some(limit) = body.limit.filter(|l| (1..=MAX_LIMIT).contains(l)) else {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("limit (the semaphore's size, 1 to {MAX_LIMIT}) is required"),
        ));
    };
    let permits = body.permits.unwrap_or(1);
    if permits == 0 || permits > limit {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            format!("permits must be between 1 and the limit ({limit})"),
        ));
    }
    let ttl = match body.ttl_ms {
        Some(ms) => state.limits.ttl.parse(ms)?,
        None => state.limits.ttl.default_ttl(),
    };
    let request = PermitRequest {
        ttl,
        holder: body.holder.as_deref().map(HolderLabel::parse).transpose()?,
        metadata: body.metadata.map(Metadata::parse).transpose()?,
        limit,
        permits,
    };
    let wait = Duration::from_millis(query.wait_ms).min(state.limits.max_wait);
    let grant = state
        .locks
        .acquire_permits(&name, &request, wait)
        .await
        .map_err(|e| match e {
            LockError::Held(c) => {
                let mut p = Problem::new(
                    ProblemKind::NoPermits,
                    format!("fewer than {permits} of the {limit} permits are free"),
                );
                if let Some(after) = c.retry_after {
                    p = p.retry_after(after);
                }
                p
            }
            e => e.into(),
        })?;
    let location = lease_path(&name, grant.lease_id);
    Ok(grant_response(&location, &name, grant))
}

fn lease_path(name: &LockName, id: LeaseId) -> String {
    format!("/v1/semaphores/{name}/leases/{id}")
}

/// `POST /v1/semaphores/{name}/leases/{lease_id}/heartbeat`: every permit of the lease lives on.
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
        .ttl_ms()
        .map(|ms| state.limits.ttl.parse(ms))
        .transpose()?;
    Ok(Json(renewal_body(
        &name,
        state.locks.renew_permits(&name, id, &token, ttl).await?,
    )))
}

/// `DELETE /v1/semaphores/{name}/leases/{lease_id}`: the permits come back.
pub async fn release(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    bearer: Bearer,
) -> Result<Json<ReleaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    let token = bearer.require_lease_token()?;
    Ok(Json(release_body(
        &name,
        state.locks.release_permits(&name, id, &token).await?,
    )))
}

/// `GET /v1/semaphores/{name}/leases/{lease_id}`: the lease's state; never its token.
pub async fn inspect_lease(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<LeaseBody>, Problem> {
    let name = lock_name(&name)?;
    let id = lease_id(&id)?;
    Ok(Json(lease_body(
        state.locks.semaphore_lease(&name, id).await?,
    )))
}

#[derive(Debug, Serialize)]
pub struct SemaphoreBody {
    semaphore: String,
    limit: u32,
    used: u64,
    available: u64,
    fencing_counter: u64,
    holders: Vec<PermitHolderBody>,
}

#[derive(Debug, Serialize)]
pub struct PermitHolderBody {
    lease_id: Option<LeaseId>,
    holder: Option<String>,
    metadata: Option<serde_json::Value>,
    permits: u64,
    fencing_token: Option<u64>,
    acquired_at: Option<String>,
    expires_at: Option<String>,
}

impl From<PermitHolderView> for PermitHolderBody {
    fn from(h: PermitHolderView) -> Self {
        Self {
            lease_id: h.lease_id,
            holder: h.holder,
            metadata: h.metadata.map(Metadata::into_value),
            permits: h.permits,
            fencing_token: h.fencing_token.map(|f| f.0),
            acquired_at: h.acquired_at.map(|t| t.rfc3339()),
            expires_at: h.expires_at.map(|t| t.rfc3339()),
        }
    }
}

/// `GET /v1/semaphores/{name}`: limit, permits in use (expired ones do not count), holders.
pub async fn inspect(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<SemaphoreBody>, Problem> {
    let name = lock_name(&name)?;
    let Some(view) = state.locks.semaphore(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("semaphore {name:?} has never been used"),
        ));
    };
    Ok(Json(SemaphoreBody {
        semaphore: view.name.to_string(),
        limit: view.limit,
        used: view.used,
        available: u64::from(view.limit).saturating_sub(view.used),
        fencing_counter: view.fencing_counter.0,
        holders: view
            .holders
            .into_iter()
            .map(PermitHolderBody::from)
            .collect(),
    }))
}
