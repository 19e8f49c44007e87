//! The operators' dashboard: server-rendered HTML pages (askama templates in `templates/`),
//! live through `GET /v1/events` (server-sent events) and a small plain script, with admin
//! sign-in and force release.
//!
//! - `GET /`: live locks and semaphores, filtered by name prefix, paginated by SCAN cursor.
//! - `GET /locks/{name}`: holders, fair queue, read/write holds and the lock's history.
//! - `GET /events`: the live event feed.
//! - `GET|POST /login`, `POST /logout`: the admin session ([`session`]).
//! - `POST /locks/{name}/force-release`: signed-in admins only, with a CSRF token, a
//!   same-origin check and a confirmation; GET never changes anything.
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
use crate::auth::{AdminAuth, Session, same_origin};
use crate::locks::{
    self, HISTORY_SHOWN, HeldAs, ListCursor, LockError, LockName, NamePrefix, Resource,
};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// Locks per overview page (about: see [`crate::locks::Locks::live`]).
const PAGE_SIZE: usize = 50;
/// Longest force-release reason kept.
const REASON_MAX_CHARS: usize = 500;
/// Who the history names for releases done here.
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

    fn forbidden(detail: &str) -> Self {
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

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            nav: Nav {
                csrf: None,
                admin_enabled: false,
            },
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

/// The header's state for this request, or the redirect to sign-in a private dashboard
/// answers.
fn viewer(state: &AppState, headers: &HeaderMap, uri: &Uri) -> Result<Nav, Redirect> {
    let session = Session::from_headers(&state.admin, headers);
    if state.dashboard.private && session.is_none() {
        let next = uri.path_and_query().map_or("/", |p| p.as_str());
        return Err(Redirect::to(&format!(
            "/login?next={}",
            encode_component(next)
        )));
    }
    Ok(Nav {
        csrf: session.map(|s| s.csrf_token(&state.admin)),
        admin_enabled: !matches!(state.admin, AdminAuth::Disabled),
    })
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
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<OverviewQuery>,
) -> PageResult {
    let nav = match viewer(&state, &headers, &uri) {
        Ok(nav) => nav,
        Err(redirect) => return Ok(redirect.into_response()),
    };
    let prefix = parse_prefix(query.prefix.as_deref())?;
    let cursor = match query.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => ListCursor::default(),
        Some(raw) => ListCursor(raw.parse().map_err(|_| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                "Invalid cursor",
                "cursor must be a number from a page's Next link",
            )
        })?),
    };
    let page = state.locks.live(&prefix, cursor, PAGE_SIZE).await?;
    let names: Vec<_> = page.entries.iter().map(|e| e.name()).collect();
    let waiting = state.locks.waiting_counts(&names).await?;
    let sort = insight::Sort::parse(query.sort.as_deref());
    let p = prefix.as_str();
    render(&OverviewPage {
        nav,
        prefix: p.to_owned(),
        sort: sort.as_str(),
        rows: insight::overview_rows(&page.entries, &waiting, sort, pages::now_ms()),
        events_url: format!("/v1/events?prefix={p}"),
        next_href: page
            .next_cursor
            .map(|c| format!("/?prefix={p}&cursor={}", c.0)),
        first_href: format!("/?prefix={p}"),
        first_page: cursor == ListCursor::default(),
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
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Query(query): Query<LockQuery>,
) -> PageResult {
    let nav = match viewer(&state, &headers, &uri) {
        Ok(nav) => nav,
        Err(redirect) => return Ok(redirect.into_response()),
    };
    let name = lock_name(&raw)?;
    let lock = state.locks.lock(&name).await?;
    // The history records holds and waits when they end; those going on come from the view.
    let (lock_state, ongoing) = match &lock {
        Some(view) if !view.kind.is_some_and(HeldAs::is_semaphore) => {
            (Some(LockState::of_lock(view)), locks::ongoing(view))
        }
        _ => match state.locks.semaphore(&name).await? {
            Some(s) => (
                Some(LockState::of_semaphore(&s)),
                locks::ongoing_permits(&s),
            ),
            None => (None, Vec::new()),
        },
    };
    let history = locks::merged(
        state.locks.history(&name, HISTORY_SHOWN).await?,
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
    let (waiting, waiting_count) = state.locks.waiters_of(&name).await?;
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
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<EventsQuery>,
) -> PageResult {
    let nav = match viewer(&state, &headers, &uri) {
        Ok(nav) => nav,
        Err(redirect) => return Ok(redirect.into_response()),
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
/// recorded as done by [`FORCE_RELEASED_BY`] with the given reason.
async fn force_release(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    Form(form): Form<ForceReleaseForm>,
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
            "sign in as admin to force-release",
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
            "tick the confirmation box to force-release",
        ));
    }
    let name = lock_name(&raw)?;
    let reason: String = form.reason.trim().chars().take(REASON_MAX_CHARS).collect();
    // The routes of whatever the name is held as now (a lock, or a semaphore).
    let resource = state
        .locks
        .lock(&name)
        .await?
        .and_then(|view| view.kind)
        .map_or(Resource::Lock, HeldAs::resource);
    let forced = state
        .locks
        .force_release(resource, &name, FORCE_RELEASED_BY, &reason, false)
        .await?;
    tracing::info!(lock = %name, removed = forced.removed.len(), reason = %reason, "force release from the dashboard");
    Ok(Redirect::to(&format!(
        "/locks/{}?released={}",
        name.as_str(),
        forced.removed.len()
    ))
    .into_response())
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
            csrf: None,
            admin_enabled: !matches!(state.admin, AdminAuth::Disabled),
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

/// `POST /login`: trades the admin token for a signed session cookie.
async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> PageResult {
    if !same_origin(&headers) {
        return Err(PageError::forbidden(
            "refused: the request did not come from a page of this server",
        ));
    }
    let next = local_path(Some(&form.next));
    let session = state
        .admin
        .accepts(&form.token)
        .then(|| Session::issue(&state.admin))
        .flatten();
    let Some(session) = session else {
        tracing::warn!("dashboard sign-in with a wrong admin token");
        let page = LoginPage {
            nav: Nav {
                csrf: None,
                admin_enabled: !matches!(state.admin, AdminAuth::Disabled),
            },
            next,
            error: Some("Wrong admin token.".into()),
        };
        return Ok((StatusCode::UNAUTHORIZED, render(&page)?).into_response());
    };
    let mut response = Redirect::to(&next).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session.set_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Default, Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`: drops the session cookie.
async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> PageResult {
    let valid = same_origin(&headers)
        && Session::from_headers(&state.admin, &headers)
            .is_some_and(|s| s.accepts_csrf(&state.admin, &form.csrf));
    if !valid {
        return Err(PageError::forbidden(
            "refused: sign out from a page of this server",
        ));
    }
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&Session::clear_cookie()) {
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
