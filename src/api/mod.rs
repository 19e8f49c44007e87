//! The HTTP API (transport only): parses requests, calls [`crate::locks::Locks`], and maps its
//! answers and errors to JSON and problem+json.

mod admin;
mod events;
mod extract;
mod health;
mod leases;
mod locks;
pub mod problem;
mod semaphores;

use std::any::Any;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use self::extract::Path;
use self::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// Request bodies are small JSON documents.
const BODY_LIMIT_BYTES: usize = 64 * 1024;

/// The whole route table.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/locks/{name}", get(locks::inspect))
        .route("/v1/locks/{name}/leases", post(leases::acquire))
        .route(
            "/v1/locks/{name}/leases/{lease_id}",
            get(leases::inspect).delete(leases::release),
        )
        .route(
            "/v1/locks/{name}/leases/{lease_id}/heartbeat",
            post(leases::heartbeat),
        )
        .route(
            "/v1/locks/{name}/tickets/{ticket_id}",
            post(leases::poll_ticket).delete(leases::leave_queue),
        )
        .route("/v1/semaphores/{name}", get(semaphores::inspect))
        .route("/v1/semaphores/{name}/leases", post(semaphores::acquire))
        .route(
            "/v1/semaphores/{name}/leases/{lease_id}",
            get(semaphores::inspect_lease).delete(semaphores::release),
        )
        .route(
            "/v1/semaphores/{name}/leases/{lease_id}/heartbeat",
            post(semaphores::heartbeat),
        )
        .route("/v1/events", get(events::stream))
        .route("/v1/admin/locks/{name}", delete(admin::force_release))
        .route(
            "/v1/admin/semaphores/{name}",
            delete(admin::force_release_semaphore),
        )
        // Responses carry lease tokens and live state: never cache them.
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ));

    Router::new()
        .merge(v1)
        .merge(crate::dashboard::router())
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/problems/{code}", get(describe_problem))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(
            ServiceBuilder::new()
                // Outside the trace layer, so tokens never reach a log line.
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                ]))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
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
                .layer(CatchPanicLayer::custom(panic_problem)),
        )
        .with_state(state)
}

async fn not_found() -> Problem {
    Problem::new(
        ProblemKind::NotFound,
        "no such route; the API lives under /v1",
    )
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        ProblemKind::MethodNotAllowed,
        "this route does not take that method",
    )
}

/// `GET /problems/{code}`: what a problem `type` means, for people who follow the link.
async fn describe_problem(Path(code): Path<String>) -> Response {
    match ProblemKind::from_code(&code) {
        Some(kind) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!(
                "{} ({} {})\n",
                kind.title(),
                kind.status().as_u16(),
                kind.code()
            ),
        )
            .into_response(),
        None => Problem::new(ProblemKind::NotFound, "no such problem type").into_response(),
    }
}

fn panic_problem(_: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    Problem::new(ProblemKind::Internal, "internal error").into_response()
}
