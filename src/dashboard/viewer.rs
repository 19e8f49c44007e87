//! Who is looking at a page (signed in, sending a key, or anonymous where that is allowed),
//! the header's state for them, and the checks a form that changes something passes first.

use std::net::IpAddr;

use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::PageError;
use super::format::encode_component;
pub use super::nav::Nav;
use crate::auth::{AdminAuth, KEY_HEADER, Principal, Role, Who, same_origin};
use crate::problem::ProblemKind;
use crate::state::AppState;

/// Who the history names for releases done here with the admin token.
pub const FORCE_RELEASED_BY: &str = "dashboard admin";

/// Who is looking at a page, and the header's state for them.
pub(super) struct Viewer {
    pub nav: Nav,
    pub principal: Principal,
}

/// The viewer of this request: signed in, sending a key, or anonymous where that is allowed;
/// else the redirect to sign-in.
pub(super) async fn viewer(
    state: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    peer: IpAddr,
) -> Result<Viewer, Response> {
    let access = &state.access;
    let session = access.sessions.from_headers(headers).await;
    let signed_in = match &session {
        Some(s) => access.of_session(s).await,
        None => None,
    };
    let presented = match (&signed_in, headers.get(KEY_HEADER)) {
        (None, Some(key)) => access
            .of_secret(key.to_str().unwrap_or("").trim())
            .await
            .ok()
            .flatten(),
        _ => None,
    };
    let principal = match signed_in.clone().or(presented) {
        Some(p) => p,
        None if !state.dashboard.private && access.anonymous_allowed().await => {
            access.anonymous(peer)
        }
        None => {
            let next = uri.path_and_query().map_or("/", |p| p.as_str());
            return Err(
                Redirect::to(&format!("/login?next={}", encode_component(next))).into_response(),
            );
        }
    };
    if !principal.has(Role::Reader) && !principal.has(Role::Admin) {
        return Err(PageError::new(
            ProblemKind::RoleMissing,
            "this key has neither the reader nor the admin role",
        )
        .into_response());
    }
    let csrf = match (&session, &signed_in) {
        (Some(s), Some(_)) => Some(access.sessions.csrf_token(s).await),
        _ => None,
    };
    let nav = Nav {
        force_csrf: csrf.clone().filter(|_| principal.has(Role::Admin)),
        csrf,
        who: signed_in.as_ref().map_or_else(String::new, badge),
        admin_enabled: sign_in_possible(state).await,
        redis_failing_over: !state.locks.backend().master_known(),
    };
    Ok(Viewer { nav, principal })
}

/// Whether anything can sign in: the admin token, or API keys.
pub(super) async fn sign_in_possible(state: &AppState) -> bool {
    !matches!(state.access.admin, AdminAuth::Disabled)
        || matches!(state.access.keys.any_exist().await, Ok(true))
}

/// The header's badge for a signed-in principal.
pub(super) fn badge(p: &Principal) -> String {
    match &p.who {
        Who::Key { name, .. } => name.clone(),
        _ => "admin".to_owned(),
    }
}

/// The signed-in admin behind a form that changes something (force release, eviction): the
/// request came from a page of this server, a session with the admin role sent it with its
/// CSRF token, and the confirmation box was ticked. `what` names the action in refusals.
pub(super) async fn admin_form(
    state: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    csrf: &str,
    confirm: &str,
    what: &str,
) -> Result<Principal, PageError> {
    if !same_origin(authority(uri), headers) {
        return Err(PageError::new(
            ProblemKind::CrossOrigin,
            "refused: the request did not come from a page of this server",
        ));
    }
    let sessions = &state.access.sessions;
    let signed_in = match sessions.from_headers(headers).await {
        Some(session) => state
            .access
            .of_session(&session)
            .await
            .map(|principal| (session, principal)),
        None => None,
    };
    let Some((session, principal)) = signed_in else {
        return Err(PageError::new(
            ProblemKind::SignInRequired,
            format!("sign in as admin to {what}"),
        ));
    };
    if !principal.has(Role::Admin) {
        return Err(PageError::new(
            ProblemKind::RoleMissing,
            format!("{what} needs the admin role, which this sign-in does not have"),
        ));
    }
    if !sessions.accepts_csrf(&session, csrf).await {
        return Err(PageError::new(
            ProblemKind::CrossOrigin,
            "refused: the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    if confirm != "yes" {
        return Err(PageError::new(
            ProblemKind::InvalidForm,
            format!("tick the confirmation box to {what}"),
        ));
    }
    Ok(principal)
}

/// Who a dashboard action is recorded as done by: the key signed in with, or
/// [`FORCE_RELEASED_BY`] for the admin token.
pub(super) fn done_by(principal: &Principal) -> String {
    match &principal.who {
        Who::Key { name, .. } => format!("{name} (dashboard)"),
        _ => FORCE_RELEASED_BY.to_owned(),
    }
}

/// The host an HTTP/2 request names in its URI (HTTP/1.1's is in its `Host` header).
pub(super) fn authority(uri: &Uri) -> Option<&str> {
    uri.authority().map(|a| a.as_str())
}
