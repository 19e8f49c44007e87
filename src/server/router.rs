//! The router: the API, the dashboard and the OpenAPI document behind the middleware every
//! request passes (request ids, panics caught, sensitive headers kept out of logs, the
//! browser guard, deadlines, the body limit).

use super::front_door::FrontDoorLayer;
use crate::auth::browser::BrowserPolicy;
use crate::state::AppState;
use crate::{api, dashboard};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, header};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::RequestBodyDeadlineLayer;
use tower_http::trace::TraceLayer;

/// Request bodies are small JSON documents.
const BODY_LIMIT_BYTES: usize = 64 * 1024;

/// What every request passes before a handler runs: the browser guard (cross-site requests,
/// `Host`) and the request and body deadlines.
#[derive(Debug, Clone)]
pub struct Guards {
    pub browser: Arc<BrowserPolicy>,
    pub timeouts: Timeouts,
}

/// How long a request and its body may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub request: Duration,
    pub body: Duration,
    /// The longest server-side wait a request may ask for (added to `request`).
    pub max_wait: Duration,
}

/// The whole application: the API's routes and the dashboard's, with the middleware every
/// request passes through.
pub fn app(state: AppState, guards: Guards) -> Router {
    let body_deadline = guards.timeouts.body;
    api::routes(&state.limits)
        .merge(dashboard::router())
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        // One layer stack, applied once: each `Router::layer` call would box every request's
        // future again (a parked waiter carries each box for its whole wait). Outermost first;
        // all of it sits inside the router (each route is wrapped), where the front door knows
        // the matched route.
        .layer(
            ServiceBuilder::new()
                // Outside the trace layer, so tokens never reach a log line.
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                    HeaderName::from_static(crate::auth::KEY_HEADER),
                ]))
                .map_request(checked_request_id)
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
                        let request_id = req
                            .headers()
                            .get("x-request-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!(
                            "request",
                            method = %req.method(),
                            path = %req.uri().path(),
                            request_id = %request_id,
                        )
                    }),
                )
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(api::panic_problem))
                .layer(FrontDoorLayer::new(guards, state.metrics.clone()))
                .layer(RequestBodyDeadlineLayer::new(body_deadline))
                .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES)),
        )
        .with_state(state)
}

/// The longest `x-request-id` a client may choose.
const REQUEST_ID_MAX: usize = 64;

/// Keeps a client's `x-request-id` only when it is 1 to [`REQUEST_ID_MAX`] characters of
/// `A-Z a-z 0-9 . _ : -`; anything else (quotes that would forge fields in text logs, 8 KB
/// ids) is dropped, and the request gets a new UUID as if it had sent none.
fn checked_request_id(mut request: axum::extract::Request) -> axum::extract::Request {
    let valid = |id: &[u8]| {
        (1..=REQUEST_ID_MAX).contains(&id.len())
            && id
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    };
    if let Some(id) = request.headers().get("x-request-id")
        && !valid(id.as_bytes())
    {
        request.headers_mut().remove("x-request-id");
    }
    request
}
