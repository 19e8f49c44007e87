//! `/v1/locks/{name}`: who holds a lock.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::extract::{Path, lock_name};
use super::problem::{Problem, ProblemDetails, ProblemKind};
use crate::locks::{HolderView, LeaseId, LockView, Metadata, QueuedView};
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct LockBody {
    lock: String,
    held: bool,
    /// What the lock is used as: reentrant, exclusive, fair, rw, or foreign (a Redisson
    /// client's lock); null when free.
    kind: Option<String>,
    /// Read/write locks: read or write.
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    holders: Vec<HolderBody>,
    /// Fair locks: the first 100 waiters, in order.
    queue: Vec<QueuedBody>,
    queue_length: u64,
    /// The highest fencing token handed out so far.
    fencing_counter: u64,
    remaining_ms: Option<u64>,
    expires_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HolderBody {
    /// `None` for a holder that is not a Leasehold lease (a Redisson client on the same key).
    #[schema(value_type = Option<String>, format = Uuid)]
    lease_id: Option<LeaseId>,
    /// The Redis hash field: `<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`.
    holder_id: String,
    holder: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
    reentry_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    fencing_token: Option<u64>,
    acquired_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueuedBody {
    position: u64,
    /// The ticket's id, also the id of the lease it turns into; null for a Redisson waiter.
    #[schema(value_type = Option<String>, format = Uuid)]
    ticket_id: Option<LeaseId>,
    holder_id: String,
    holder: Option<String>,
    waiting_since: Option<String>,
    /// Leaves the queue unless it tries again before this.
    deadline: Option<String>,
}

impl From<QueuedView> for QueuedBody {
    fn from(q: QueuedView) -> Self {
        Self {
            position: q.position,
            ticket_id: q.lease_id,
            holder_id: q.holder_id,
            holder: q.holder,
            waiting_since: q.queued_at.map(|t| t.rfc3339()),
            deadline: q.deadline.map(|t| t.rfc3339()),
        }
    }
}

impl From<HolderView> for HolderBody {
    fn from(h: HolderView) -> Self {
        Self {
            lease_id: h.lease_id,
            holder_id: h.holder_id,
            holder: h.holder,
            metadata: h.metadata.map(Metadata::into_value),
            reentry_count: h.reentry_count,
            read_count: h.read_count,
            write_count: h.write_count,
            kind: h.kind,
            fencing_token: h.fencing_token.map(|f| f.0),
            acquired_at: h.acquired_at.map(|t| t.rfc3339()),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/locks/{name}",
    tag = "locks",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,200}$", description = "Lock name: 1-200 ASCII letters, digits and . _ - :")),
    responses(
        (status = 200, description = "Holders, fair queue, fencing counter", body = LockBody),
        (status = 404, description = "lock_not_found: free and never taken; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "redis_unavailable, shutting_down (with Retry-After)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
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
        kind: view.kind,
        mode: view.mode,
        holders: view.holders.into_iter().map(HolderBody::from).collect(),
        queue: view.queue.into_iter().map(QueuedBody::from).collect(),
        queue_length: view.queue_length,
        fencing_counter: view.fencing_counter.0,
        remaining_ms: view.remaining_ms,
        expires_at: view.expires_at.map(|t| t.rfc3339()),
    }))
}
