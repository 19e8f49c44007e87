//! `POST /locks/{name}/evict`: an admin removes one lease from the lock page, as
//! `DELETE /v1/admin/.../leases/{id}` does: signed-in admins only, with the CSRF token, a
//! same-origin check and a confirmation; recorded as done by the dashboard admin.

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::{FORCE_RELEASED_BY, PageError, PageResult, REASON_MAX_CHARS, lock_name};
use crate::auth::{Session, same_origin};
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
    Path(raw): Path<String>,
    Form(form): Form<EvictForm>,
) -> PageResult {
    if !same_origin(&headers) {
        return Err(PageError::forbidden(
            "refused: the request did not come from a page of this server",
        ));
    }
    let Some(session) = Session::from_headers(&state.admin, &headers) else {
        return Err(PageError::new(
            StatusCode::UNAUTHORIZED,
            "Sign-in required",
            "sign in as admin to evict a lease",
        ));
    };
    if !session.accepts_csrf(&state.admin, &form.csrf) {
        return Err(PageError::forbidden(
            "refused: the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    if form.confirm != "yes" {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Not confirmed",
            "tick the confirmation box to evict the lease",
        ));
    }
    let name = lock_name(&raw)?;
    let Some(id) = LeaseId::parse(form.lease_id.trim()) else {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "No lease chosen",
            "choose the lease to evict",
        ));
    };
    let reason: String = form.reason.trim().chars().take(REASON_MAX_CHARS).collect();
    let resource = state
        .locks
        .lock(&name)
        .await?
        .and_then(|view| view.kind)
        .map_or(Resource::Lock, HeldAs::resource);
    match state
        .locks
        .evict(resource, &name, id, FORCE_RELEASED_BY, &reason)
        .await
    {
        Ok(_) => {}
        Err(LockError::UnknownLease) => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "No such holder",
                format!("lease {id} does not hold {name} (any more)"),
            ));
        }
        Err(e) => return Err(e.into()),
    }
    tracing::info!(lock = %name, lease_id = %id, reason = %reason, "lease evicted from the dashboard");
    Ok(Redirect::to(&format!("/locks/{}?evicted={id}", name.as_str())).into_response())
}
