//! The operators' dashboard: server-rendered HTML pages (askama templates in `templates/`),
//! live through `GET /v1/events` (server-sent events) and a small plain script, with admin
//! sign-in and force release.
//!
//! - `GET /`: live locks and semaphores, filtered by name prefix, paginated by SCAN cursor.
//! - `GET /locks/{name}`: holders, fair queue, read/write holds and the lock's history.
//! - `GET /events`: the live event feed.
//! - `GET|POST /login`, `POST /logout`: a session (signed in with the admin token or an API
//!   key; [`crate::auth::session`]); sign-in attempts are rate-limited per address.
//! - `POST /locks/{name}/force-release`: signed in with the admin role only, with a CSRF
//!   token, a same-origin check and a confirmation; GET never changes anything.
//!
//! Pages show the viewer's tenant only: the locks of the key it signed in with (or sent in
//! `Leasehold-Key`), or the default tenant's for the admin token and anonymous viewers (who
//! are let in where the API lets them in, unless `--dashboard-private`).
//! - `POST /locks/{name}/evict`: one lease removed, with the same checks ([`eviction`]).
//!
//! [`insight`] holds what the overview and the lock page show an operator beyond the holders:
//! waiters, held-for, sorting, the timeline.
//!
//! Every page is HTML-escaped by its template and sent with a strict Content-Security-Policy
//! (scripts and styles from this server only, no inline code).

mod eviction;
mod insight;
mod pages;

use std::net::IpAddr;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tower::ServiceBuilder;
use tower_http::set_header::SetResponseHeaderLayer;

use self::pages::{
    ErrorPage, EventsPage, HistoryRow, LockPage, LockState, LoginPage, Nav, OverviewPage,
};
use crate::audit::{self, AuditEntry};
use crate::auth::{
    AdminAuth, KEY_HEADER, Peer, Principal, Role, Session, SignedIn, Who, same_origin,
};
use crate::limits::ledger::now_ms;
use crate::locks::{
    self, HISTORY_SHOWN, HeldAs, ListCursor, LockError, LockName, NamePrefix, Resource,
};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// Locks per overview page (about: see [`crate::locks::Locks::live`]).
const PAGE_SIZE: usize = 50;
/// Who the history names for releases done here with the admin token.
pub const FORCE_RELEASED_BY: &str = "dashboard admin";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

static CSS: &str = include_str!("../../static/dashboard.css");
static JS: &str = include_str!("../../static/dashboard.js");

/// The dashboard's routes, with their security headers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/locks/{name}", get(lock_page))
        .route("/locks/{name}/force-release", post(force_release))
        .route("/locks/{name}/evict", post(eviction::evict))
        .route("/events", get(events_page))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/static/dashboard.css", get(css))
        .route("/static/dashboard.js", get(js))
        .layer(
            ServiceBuilder::new()
                .layer(SetResponseHeaderLayer::overriding(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(CSP),
                ))
                .layer(SetResponseHeaderLayer::overriding(
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ))
                .layer(SetResponseHeaderLayer::overriding(
                    header::X_FRAME_OPTIONS,
                    HeaderValue::from_static("DENY"),
                ))
                .layer(SetResponseHeaderLayer::overriding(
                    header::REFERRER_POLICY,
                    HeaderValue::from_static("same-origin"),
                ))
                .layer(SetResponseHeaderLayer::if_not_present(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-store"),
                )),
        )
}

/// A page that could not be shown, rendered as HTML with its status.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    title: String,
    detail: String,
}

impl PageError {
    fn new(status: StatusCode, title: &str, detail: impl Into<String>) -> Self {
        Self {
            status,
            title: title.to_owned(),
            detail: detail.into(),
        }
    }

    fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Forbidden", detail)
    }
}

impl From<LockError> for PageError {
    fn from(e: LockError) -> Self {
        let detail = e.to_string();
        let kind = Problem::from(e).kind();
        if kind == ProblemKind::Internal {
            tracing::error!(error = %detail, "a dashboard page failed");
            return Self::new(kind.status(), kind.title(), "internal error");
        }
        Self::new(kind.status(), kind.title(), detail)
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        tracing::error!(error = %e, "a dashboard template failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal error",
            "internal error",
        )
    }
}

impl From<Problem> for PageError {
    fn from(p: Problem) -> Self {
        let kind = p.kind();
        Self::new(kind.status(), kind.title(), p.detail().to_owned())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            nav: Nav::default(),
            status: self.status.as_u16(),
            title: self.title,
            detail: self.detail,
        };
        match askama::Template::render(&page) {
            Ok(html) => (self.status, Html(html)).into_response(),
            Err(_) => self.status.into_response(),
        }
    }
}

type PageResult = Result<Response, PageError>;

fn render(page: &impl askama::Template) -> PageResult {
    Ok(Html(page.render()?).into_response())
}

/// Who is looking at a page, and the header's state for them.
struct Viewer {
    nav: Nav,
    principal: Principal,
}

/// The viewer of this request: signed in, sending a key, or anonymous where that is allowed;
/// else the redirect to sign-in.
async fn viewer(
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
        return Err(
            PageError::forbidden("this key has neither the reader nor the admin role")
                .into_response(),
        );
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
    };
    Ok(Viewer { nav, principal })
}

/// Whether anything can sign in: the admin token, or API keys.
async fn sign_in_possible(state: &AppState) -> bool {
    !matches!(state.access.admin, AdminAuth::Disabled)
        || matches!(state.access.keys.any_exist().await, Ok(true))
}

/// The header's badge for a signed-in principal.
fn badge(p: &Principal) -> String {
    match &p.who {
        Who::Key { name, .. } => name.clone(),
        _ => "admin".to_owned(),
    }
}

fn parse_prefix(raw: Option<&str>) -> Result<NamePrefix, PageError> {
    NamePrefix::parse(raw.unwrap_or("").trim()).map_err(|e| {
        PageError::new(
            StatusCode::BAD_REQUEST,
            "Invalid name prefix",
            e.to_string(),
        )
    })
}

#[derive(Debug, Default, Deserialize)]
struct OverviewQuery {
    prefix: Option<String>,
    cursor: Option<String>,
    sort: Option<String>,
}

/// `GET /`: one page of live locks and semaphores.
async fn overview(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<OverviewQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let prefix = parse_prefix(query.prefix.as_deref())?;
    let cursor = ListCursor::parse(query.cursor.as_deref().unwrap_or("")).map_err(|_| {
        PageError::new(
            StatusCode::BAD_REQUEST,
            "Invalid cursor",
            "cursor must be the name a page's Next link carries",
        )
    })?;
    let locks = state.locks_for(&principal);
    let first_page = cursor.is_first();
    // As `GET /v1/locks`: a page costs one request per name it may show.
    state
        .access
        .charge(&principal, u32::try_from(PAGE_SIZE).unwrap_or(u32::MAX))?;
    let page = locks.live(&prefix, cursor, PAGE_SIZE).await?;
    let entries: Vec<_> = page
        .entries
        .into_iter()
        .filter(|e| principal.patterns.allows(e.name().as_str()))
        .collect();
    let names: Vec<_> = entries.iter().map(|e| e.name()).collect();
    let waiting = locks.waiting_counts(&names).await?;
    let sort = insight::Sort::parse(query.sort.as_deref());
    let p = prefix.as_str();
    render(&OverviewPage {
        nav,
        prefix: p.to_owned(),
        sort: sort.as_str(),
        rows: insight::overview_rows(&entries, &waiting, sort, now_ms()),
        events_url: format!("/v1/events?prefix={p}"),
        next_href: page
            .next_cursor
            .map(|c| format!("/?prefix={p}&cursor={}", c.as_str())),
        first_href: format!("/?prefix={p}"),
        first_page,
        rendered_at: crate::locks::Timestamp(pages::now_ms()).rfc3339(),
    })
}

fn lock_name(raw: &str) -> Result<LockName, PageError> {
    LockName::parse(raw)
        .map_err(|e| PageError::new(StatusCode::NOT_FOUND, "No such lock", e.to_string()))
}

#[derive(Debug, Default, Deserialize)]
struct LockQuery {
    released: Option<u32>,
    evicted: Option<String>,
    /// The timeline's window: 1h (default), 15m, 5m, 1m.
    window: Option<String>,
}

/// `GET /locks/{name}`: a lock's (or semaphore's) holders, queue and history.
async fn lock_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Query(query): Query<LockQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let name = lock_name(&raw)?;
    principal.check_name(&name)?;
    let domain = state.locks_for(&principal);
    let lock = domain.lock(&name).await?;
    // The history records holds and waits when they end; those going on come from the view.
    let (lock_state, ongoing) = match &lock {
        Some(view) if !view.kind.is_some_and(HeldAs::is_semaphore) => {
            (Some(LockState::of_lock(view)), locks::ongoing(view))
        }
        _ => match domain.semaphore(&name).await? {
            Some(s) => (
                Some(LockState::of_semaphore(&s)),
                locks::ongoing_permits(&s),
            ),
            None => (None, Vec::new()),
        },
    };
    let history = locks::merged(
        domain.history(&name, HISTORY_SHOWN).await?,
        ongoing,
        HISTORY_SHOWN,
    );
    let lock_state = match (lock_state, lock) {
        (Some(s), _) => s,
        (None, Some(view)) => LockState::of_lock(&view),
        (None, None) if !history.is_empty() => LockState::free(),
        (None, None) => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "No such lock",
                format!("nothing named {name} was ever held"),
            ));
        }
    };
    let (waiting, waiting_count) = domain.waiters_of(&name).await?;
    let now = pages::now_ms();
    let held_since = lock_state.held_since;
    let n = name.as_str();
    render(&LockPage {
        timeline: insight::timeline(
            &history,
            &waiting,
            now,
            insight::window(query.window.as_deref()),
        ),
        waiting: waiting
            .iter()
            .map(|w| insight::WaiterRow::of(w, now))
            .collect(),
        waiting_count,
        held_since: insight::when(held_since, now),
        nav,
        name: n.to_owned(),
        self_href: format!("/locks/{n}"),
        force_release_href: format!("/locks/{n}/force-release"),
        events_url: format!("/v1/events?prefix={n}"),
        flash: query
            .released
            .map(|count| match count {
                0 => "Force release done: nobody held it.".to_owned(),
                1 => "Force-released: removed 1 holder.".to_owned(),
                n => format!("Force-released: removed {n} holders."),
            })
            .or_else(|| insight::evicted_flash(query.evicted.as_deref())),
        kind: lock_state.kind,
        mode: lock_state.mode,
        semaphore: lock_state.semaphore,
        ttl: lock_state.ttl,
        fence: lock_state.fence,
        queue_length: lock_state.queue_length,
        queue_more: lock_state.queue_more,
        write_holder: lock_state.write_holder,
        read_holders: lock_state.read_holders,
        holders: lock_state.holders,
        queue: lock_state.queue,
        history: history.iter().map(HistoryRow::from_event).collect(),
    })
}

#[derive(Debug, Default, Deserialize)]
struct EventsQuery {
    prefix: Option<String>,
}

/// `GET /events`: the live feed (filled by the page's script from `/v1/events`).
async fn events_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<EventsQuery>,
) -> PageResult {
    let Viewer { nav, .. } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let prefix = parse_prefix(query.prefix.as_deref())?;
    render(&EventsPage {
        nav,
        prefix: prefix.as_str().to_owned(),
        // The page starts with the latest events kept in Redis, then goes on live.
        events_url: format!("/v1/events?prefix={}&backlog=100", prefix.as_str()),
    })
}

#[derive(Debug, Default, Deserialize)]
struct ForceReleaseForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
}

/// `POST /locks/{name}/force-release`: removes every holder, as `DELETE /v1/admin/locks` does,
/// recorded as done by [`FORCE_RELEASED_BY`] (or the key signed in with) with the given
/// reason, in the lock's history and the audit log.
async fn force_release(
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
    principal.check_name(&name)?;
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
    // The routes of whatever the name is held as now (a lock, or a semaphore).
    let resource = locks
        .lock(&name)
        .await?
        .and_then(|view| view.kind)
        .map_or(Resource::Lock, HeldAs::resource);
    let forced = locks
        .force_release(resource, &name, &by, &reason, false)
        .await?;
    state
        .audit
        .record(&AuditEntry {
            at_ms: now_ms(),
            by,
            action: "force_release".to_owned(),
            tenant: principal.tenant.clone(),
            target: name.to_string(),
            reason,
            details: audit::removed(&forced),
        })
        .await;
    Ok(Redirect::to(&format!(
        "/locks/{}?released={}",
        name.as_str(),
        forced.removed.len()
    ))
    .into_response())
}

/// The signed-in admin behind a form that changes something (force release, eviction): the
/// request came from a page of this server, a session with the admin role sent it with its
/// CSRF token, and the confirmation box was ticked. `what` names the action in refusals.
pub(crate) async fn admin_form(
    state: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    csrf: &str,
    confirm: &str,
    what: &str,
) -> Result<Principal, PageError> {
    if !same_origin(authority(uri), headers) {
        return Err(PageError::forbidden(
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
            StatusCode::UNAUTHORIZED,
            "Sign-in required",
            format!("sign in as admin to {what}"),
        ));
    };
    if !principal.has(Role::Admin) {
        return Err(PageError::forbidden(format!(
            "{what} needs the admin role, which this sign-in does not have"
        )));
    }
    if !sessions.accepts_csrf(&session, csrf).await {
        return Err(PageError::forbidden(
            "refused: the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    if confirm != "yes" {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Not confirmed",
            format!("tick the confirmation box to {what}"),
        ));
    }
    Ok(principal)
}

/// Who a dashboard action is recorded as done by: the key signed in with, or
/// [`FORCE_RELEASED_BY`] for the admin token.
pub(crate) fn done_by(principal: &Principal) -> String {
    match &principal.who {
        Who::Key { name, .. } => format!("{name} (dashboard)"),
        _ => FORCE_RELEASED_BY.to_owned(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct LoginQuery {
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
async fn login_form(State(state): State<AppState>, Query(query): Query<LoginQuery>) -> PageResult {
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
struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /login`: trades the admin token (or an API key with the reader or admin role) for a
/// session cookie. Wrong attempts are limited per address: a few, then one every few seconds
/// (429). A right one is never refused by that limit, so one client guessing from an address
/// (loopback: every local user's) locks nobody else out.
async fn login(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<LoginForm>,
) -> PageResult {
    if !same_origin(authority(&uri), &headers) {
        return Err(PageError::forbidden(
            "refused: the request did not come from a page of this server",
        ));
    }
    let access = &state.access;
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
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Try again",
                    "Redis did not answer",
                ));
            }
        }
    } else {
        None
    };
    let Some(who) = who else {
        tracing::warn!(%peer, "dashboard sign-in with a wrong admin token or key");
        if let Err(wait) = access.rates.check_sign_in(peer) {
            let secs = wait.as_secs().max(1);
            let mut response = PageError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-in attempts",
                format!("wait {secs} s before trying again"),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return Ok(response);
        }
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
        PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "Redis did not answer",
        )
    })?;
    let mut response = Redirect::to(&next).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Default, Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`: ends the session on every instance and drops the cookie.
async fn logout(
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
        return Err(PageError::forbidden(
            "refused: sign out from a page of this server",
        ));
    };
    if let Err(e) = sessions.revoke(&session).await {
        tracing::warn!(error = %e, "cannot end a dashboard session");
        return Err(PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "Redis did not answer, so the session is still open",
        ));
    }
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&sessions.clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

/// The host an HTTP/2 request names in its URI (HTTP/1.1's is in its `Host` header).
fn authority(uri: &Uri) -> Option<&str> {
    uri.authority().map(|a| a.as_str())
}

/// Percent-encodes a query parameter value.
fn encode_component(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
