//! `GET|POST /login`, `POST /logout`: a dashboard session, signed in with the admin token or
//! an API key ([`crate::auth::session`]); wrong attempts are rate-limited per address.

use askama::Template;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::error::{PageError, PageResult, render};
use super::viewer::{Nav, authority, sign_in_possible};
use crate::auth::{Peer, Role, Session, SignedIn, same_origin};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

/// Where to go after sign-in: a local path only (never `//host` or a full URL).
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && p.chars().all(|c| c.is_ascii_graphic()) =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// `GET /login`: the sign-in form.
pub(super) async fn login_form(
    State(state): State<AppState>,
    Query(query): Query<LoginQuery>,
) -> PageResult {
    render(&LoginPage {
        nav: Nav {
            admin_enabled: sign_in_possible(&state).await,
            ..Nav::default()
        },
        next: local_path(query.next.as_deref()),
        error: None,
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /login`: trades the admin token (or an API key with the reader or admin role) for a
/// session cookie. Attempts are limited per address, counted before the token is looked at:
/// a few, then one every few seconds (429, the guess not checked), so that guessing a weak
/// token goes no faster than that. (Guessing from an address slows every sign-in from it:
/// on loopback, every local user's.)
pub(super) async fn login(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<LoginForm>,
) -> PageResult {
    if !same_origin(authority(&uri), &headers) {
        return Err(PageError::new(
            ProblemKind::CrossOrigin,
            "refused: the request did not come from a page of this server",
        ));
    }
    let access = &state.access;
    if let Err(wait) = access.rates.check_sign_in(peer) {
        let secs = wait.as_secs().max(1);
        return Err(PageError(
            Problem::new(
                ProblemKind::RateLimited,
                format!("too many sign-in attempts: wait {secs} s before trying again"),
            )
            .retry_after(wait),
        ));
    }
    let next = local_path(Some(&form.next));
    let token = form.token.trim();
    let who = if access.admin.accepts(token) {
        access
            .admin
            .fingerprint()
            .map(|admin| SignedIn::AdminToken { admin })
    } else if token.starts_with(crate::auth::keys::KEY_PREFIX) {
        match access.keys.resolve(token).await {
            Ok(Some(record))
                if record.roles.contains(&Role::Reader) || record.roles.contains(&Role::Admin) =>
            {
                Some(SignedIn::Key {
                    id: record.id.clone(),
                })
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look an API key up for a sign-in");
                return Err(PageError::new(
                    ProblemKind::RedisUnavailable,
                    "Redis did not answer",
                ));
            }
        }
    } else {
        None
    };
    let Some(who) = who else {
        tracing::warn!(%peer, "dashboard sign-in with a wrong admin token or key");
        let page = LoginPage {
            nav: Nav {
                admin_enabled: sign_in_possible(&state).await,
                ..Nav::default()
            },
            next,
            error: Some("Wrong admin token or API key.".into()),
        };
        return Ok((StatusCode::UNAUTHORIZED, render(&page)?).into_response());
    };
    let sessions = &access.sessions;
    let issued = async {
        let session = sessions.issue(who).await?;
        sessions.set_cookie(&session).await
    };
    let cookie = issued.await.map_err(|e| {
        tracing::warn!(error = %e, "cannot open a dashboard session");
        PageError::new(ProblemKind::RedisUnavailable, "Redis did not answer")
    })?;
    let mut response = Redirect::to(&next).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`: ends the session on every instance and drops the cookie.
pub(super) async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<LogoutForm>,
) -> PageResult {
    let sessions = &state.access.sessions;
    let session: Option<Session> = if same_origin(authority(&uri), &headers) {
        sessions.from_headers(&headers).await
    } else {
        None
    };
    let valid = match &session {
        Some(s) => sessions.accepts_csrf(s, &form.csrf).await,
        None => false,
    };
    let (true, Some(session)) = (valid, session) else {
        return Err(PageError::new(
            ProblemKind::CrossOrigin,
            "refused: sign out from a page of this server",
        ));
    };
    if let Err(e) = sessions.revoke(&session).await {
        tracing::warn!(error = %e, "cannot end a dashboard session");
        return Err(PageError::new(
            ProblemKind::RedisUnavailable,
            "Redis did not answer, so the session is still open",
        ));
    }
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&sessions.clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub nav: Nav,
    pub next: String,
    pub error: Option<String>,
}
