//! The operators' dashboard: server-rendered HTML pages (askama templates in `templates/`),
//! live through `GET /v1/events` (server-sent events) and a small plain script, with admin
//! sign-in, force release and eviction. One page per file:
//!
//! - [`overview`] `GET /`: live locks and semaphores, filtered by name prefix, sortable.
//! - [`lock`] `GET /locks/{name}`: holders, fair queue, waiters, read/write holds, the
//!   [`timeline`] and the [`history`]; [`lock_state`] turns the lock's view into its rows.
//! - [`elections`] `GET /elections`: the live elections; `GET /elections/{name}`: an
//!   election's leader, line of candidates and history of terms, live from its observe stream.
//! - [`events`] `GET /events`: the live event feed (an election's lock events shown as the
//!   election's).
//! - [`login`] `GET|POST /login`, `POST /logout`: a session (signed in with the admin token or
//!   an API key); sign-in attempts are rate-limited per address.
//! - [`actions`] `POST /locks/{name}/force-release`, `POST /locks/{name}/evict`,
//!   `POST /locks/{name}/revoke` (ask to release),
//!   `POST /elections/{name}/end-term`: adapters
//!   over [`crate::operator`], signed in with the admin role only, with a CSRF token, a
//!   same-origin check and a confirmation; GET never changes anything.
//!
//! [`viewer`] says who is looking (pages show the viewer's tenant only: the locks of the key
//! it signed in with or sent in `Leasehold-Key`, or the default tenant's for the admin token
//! and anonymous viewers, who are let in where the API lets them in, unless
//! `--dashboard-private`); [`error`] renders the API's problems as pages; [`format`] writes
//! times and holders one way everywhere.
//!
//! Every page is HTML-escaped by its template and sent with a strict Content-Security-Policy
//! (scripts and styles from this server only, no inline code).

mod actions;
mod elections;
mod error;
mod events;
mod format;
mod history;
mod lock;
mod lock_state;
mod login;
mod nav;
mod overview;
mod redis;
mod redlock;
mod timeline;
mod viewer;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower::ServiceBuilder;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::state::AppState;

/// Locks per overview page (about: see [`crate::locks::Locks::live`]).
const PAGE_SIZE: usize = 50;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

static CSS: &str = include_str!("../../static/dashboard.css");
static JS: &str = include_str!("../../static/dashboard.js");

/// The dashboard's routes, with their security headers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/locks/{name}", get(lock::lock_page))
        .route("/locks/{name}/force-release", post(actions::force_release))
        .route("/locks/{name}/evict", post(actions::evict))
        .route("/locks/{name}/revoke", post(actions::revoke))
        .route("/elections", get(elections::elections_page))
        .route("/elections/{name}", get(elections::election_page))
        .route("/elections/{name}/end-term", post(actions::end_term))
        .route("/events", get(events::events_page))
        .route("/redis", get(redis::redis_page))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(login::logout))
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
