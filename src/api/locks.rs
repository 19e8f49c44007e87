//! `/v1/locks/{name}`: who holds a lock.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::extract::{Path, lock_name};
use super::problem::{Problem, ProblemKind};
use crate::locks::{HolderView, LeaseId, LockView, Metadata};
use crate::state::AppState;

#[derive(Debug, Serialize)]
pub struct LockBody {
    lock: String,
    held: bool,
    holders: Vec<HolderBody>,
    /// The highest fencing token handed out so far.
    fencing_counter: u64,
    remaining_ms: Option<u64>,
    expires_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct HolderBody {
    /// `None` for a holder that is not a Leasehold lease (a Redisson client on the same key).
    lease_id: Option<LeaseId>,
    /// The Redis hash field: `<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`.
    holder_id: String,
    holder: Option<String>,
    metadata: Option<serde_json::Value>,
    reentry_count: u64,
    fencing_token: Option<u64>,
    acquired_at: Option<String>,
}

impl From<HolderView> for HolderBody {
    fn from(h: HolderView) -> Self {
        Self {
            lease_id: h.lease_id,
            holder_id: h.holder_id,
            holder: h.holder,
            metadata: h.metadata.map(Metadata::into_value),
            reentry_count: h.reentry_count,
            fencing_token: h.fencing_token.map(|f| f.0),
            acquired_at: h.acquired_at.map(|t| t.rfc3339()),
        }
    }
}

/// `GET /v1/locks/{name}`: holders, time left and fencing counter; 404 when free and unknown.
pub async fn inspect(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<LockBody>, Problem> {
    let name = lock_name(&name)?;
    let Some(view): Option<LockView> = state.locks.lock(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("lock {name:?} is free and has never been taken"),
        ));
    };
    Ok(Json(LockBody {
        lock: view.lock.to_string(),
        held: !view.holders.is_empty(),
        holders: view.holders.into_iter().map(HolderBody::from).collect(),
        fencing_counter: view.fencing_counter.0,
        remaining_ms: view.remaining_ms,
        expires_at: view.expires_at.map(|t| t.rfc3339()),
    }))
}
