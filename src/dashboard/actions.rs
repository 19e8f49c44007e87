//! The admin's forms on the lock page (force release, evict) and an election's page (end the
//! term), as `DELETE /v1/admin/...` does them (one owner: [`crate::operator`]). Signed-in admins only, with the CSRF token, a
//! same-origin check and a confirmation ([`admin_form`]); recorded as done by the dashboard
//! admin (or the key signed in with). GET never changes anything.

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::error::{PageError, PageResult};
use super::lock::lock_name;
use super::viewer::{admin_form, done_by};
use crate::leases::election::ElectionName;
use crate::locks::LeaseId;
use crate::operator::{Aim, Reason};
use crate::problem::ProblemKind;
use crate::state::AppState;

/// An operator's confirmed action (force release, end of a term): CSRF token, reason,
/// confirmation.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ForceReleaseForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
}

/// `POST /locks/{name}/force-release`: removes every holder (a semaphore's permits all come
/// back), with the given reason, in the lock's history and the audit log.
pub(super) async fn force_release(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Form(form): Form<ForceReleaseForm>,
) -> PageResult {
    let principal = admin_form(
        &state,
        &headers,
        &uri,
        &form.csrf,
        &form.confirm,
        "force-release",
    )
    .await?;
    let name = lock_name(&raw)?;
    let reason = form_reason(&state, &form.reason)?;
    let forced = state
        .operator(&principal, done_by(&principal))
        .force_release(&name, Aim::Lock, &reason)
        .await?;
    Ok(Redirect::to(&format!(
        "/locks/{}?released={}",
        name.as_str(),
        forced.removed.len()
    ))
    .into_response())
}

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

/// `POST /locks/{name}/evict`: removes one lease, as `DELETE /v1/admin/.../leases/{id}` does;
/// the other holders keep theirs.
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
    let Some(id) = LeaseId::parse(form.lease_id.trim()) else {
        return Err(PageError::new(
            ProblemKind::InvalidForm,
            "choose the lease to evict",
        ));
    };
    let reason = form_reason(&state, &form.reason)?;
    state
        .operator(&principal, done_by(&principal))
        .evict(None, &name, id, &reason)
        .await?;
    Ok(Redirect::to(&format!("/locks/{}?evicted={id}", name.as_str())).into_response())
}

/// A form's reason under the API's policy (at most `--max-reason-chars`: 422 beyond), once
/// its line breaks are spaces: a pasted reason may carry them, and a reason is one line in
/// logs and histories.
fn form_reason(state: &AppState, raw: &str) -> Result<Reason, PageError> {
    let line: String = raw
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Ok(state.reason(&line)?)
}

/// `POST /elections/{name}/end-term`: ends the current term, as
/// `DELETE /v1/admin/elections/{name}` does (audited as `end_term`): the next candidate in
/// line leads with a higher term.
pub(super) async fn end_term(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Form(form): Form<ForceReleaseForm>,
) -> PageResult {
    let principal = admin_form(
        &state,
        &headers,
        &uri,
        &form.csrf,
        &form.confirm,
        "end the term",
    )
    .await?;
    let name = ElectionName::new(lock_name(&raw)?);
    let reason = form_reason(&state, &form.reason)?;
    let forced = state
        .operator(&principal, done_by(&principal))
        .end_term(&name, &reason)
        .await?;
    Ok(Redirect::to(&format!("/elections/{name}?ended={}", forced.removed.len())).into_response())
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RevokeForm {
    #[serde(default)]
    csrf: String,
    /// How long the holders have to release, in seconds.
    #[serde(default)]
    grace_s: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
}

/// `POST /locks/{name}/revoke`: asks every holder to release within the grace, as
/// `POST /v1/admin/locks/{name}/revoke` does (audited as `revoke`); at the deadline what is
/// still held is force-released.
pub(super) async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Form(form): Form<RevokeForm>,
) -> PageResult {
    let principal = admin_form(
        &state,
        &headers,
        &uri,
        &form.csrf,
        &form.confirm,
        "ask to release",
    )
    .await?;
    let name = lock_name(&raw)?;
    let grace_ms = match form.grace_s.trim().parse::<u64>() {
        Ok(s) if s.saturating_mul(1000) <= crate::operator::MAX_GRACE_MS => s * 1000,
        _ => {
            return Err(PageError::new(
                ProblemKind::InvalidForm,
                "the grace is a whole number of seconds, at most 3600",
            ));
        }
    };
    let reason = form_reason(&state, &form.reason)?;
    let operator = state.operator(&principal, done_by(&principal));
    let resource = operator.held_as(&name).await?;
    let asked = operator
        .revoke(resource, &name, None, grace_ms, &reason, &state.revocations)
        .await?;
    Ok(Redirect::to(&format!("/locks/{}?revoked={}", name.as_str(), asked.len())).into_response())
}
