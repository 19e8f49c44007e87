//! `POST /locks/{name}/evict`: an admin removes one lease from the lock page, as
//! `DELETE /v1/admin/.../leases/{id}` does: signed-in admins only, with the CSRF token, a
//! same-origin check and a confirmation; recorded as done by the dashboard admin.

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::{PageError, PageResult, admin_form, done_by, lock_name};
use crate::audit::{self, AuditEntry};
use crate::limits::ledger::now_ms;
use crate::locks::{HeldAs, LeaseId, LockError, Resource};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct EvictForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    lease_id: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
}

pub(super) async fn evict(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Form(form): Form<EvictForm>,
) -> PageResult {
    let principal = admin_form(
        &state,
        &headers,
        &uri,
        &form.csrf,
        &form.confirm,
        "evict a lease",
    )
    .await?;
    let name = lock_name(&raw)?;
    principal.check_name(&name)?;
    let Some(id) = LeaseId::parse(form.lease_id.trim()) else {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "No lease chosen",
            "choose the lease to evict",
        ));
    };
    // (A form's line breaks become spaces: a reason is one line in logs and histories.)
    let reason: String = form
        .reason
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(state.limits.per_lock.reason_chars)
        .collect();
    let by = done_by(&principal);
    let locks = state.locks_for(&principal);
    let resource = locks
        .lock(&name)
        .await?
        .and_then(|view| view.kind)
        .map_or(Resource::Lock, HeldAs::resource);
    let evicted = match locks.evict(resource, &name, id, &by, &reason).await {
        Ok(evicted) => evicted,
        Err(LockError::UnknownLease) => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "No such holder",
                format!("lease {id} does not hold {name} (any more)"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    state
        .audit
        .record(&AuditEntry {
            at_ms: now_ms(),
            by,
            action: "evict".to_owned(),
            tenant: principal.tenant.clone(),
            target: name.to_string(),
            reason,
            details: audit::removed(&evicted),
        })
        .await;
    Ok(Redirect::to(&format!("/locks/{}?evicted={id}", name.as_str())).into_response())
}
