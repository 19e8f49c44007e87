//! The HTTP API (transport only): parses requests, calls [`crate::locks::Locks`], and maps its
//! answers and errors to JSON and problem+json.

mod admin;
mod events;
mod extract;
mod health;
mod leases;
mod locks;
mod metrics;
pub mod problem;
mod semaphores;

use std::any::Any;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request, header};
use axum::response::{IntoResponse, Response};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use self::extract::Path;
use self::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

/// Request bodies are small JSON documents.
const BODY_LIMIT_BYTES: usize = 64 * 1024;

/// Where the OpenAPI document and its human docs page are served.
pub const OPENAPI_PATH: &str = "/openapi.json";
pub const DOCS_PATH: &str = "/docs";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Leasehold",
        description = "A distributed lock service over HTTP, with lock state in Redis in Redisson's layout. \
            Every error is application/problem+json with a stable `code`.",
    ),
    components(schemas(ProblemDetails)),
    modifiers(&BearerSchemes),
    tags(
        (name = "locks", description = "Who holds a lock"),
        (name = "leases", description = "Acquire, heartbeat, release and inspect leases; fair-queue tickets"),
        (name = "semaphores", description = "Semaphores with expirable permits"),
        (name = "admin", description = "Operator actions, behind the admin token"),
        (name = "events", description = "The live feed of lock events (server-sent events)"),
        (name = "health", description = "Liveness, readiness, metrics, problem types"),
    )
)]
struct ApiDoc;

/// The two bearer tokens: a lease's (shown once at acquisition) and the admin token.
struct BearerSchemes;

impl Modify for BearerSchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["lease_token", "admin_token"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

/// The route table of everything the OpenAPI document describes: each `routes!` both routes
/// its handlers and adds their `#[utoipa::path]` to the document, so the two cannot drift.
fn documented() -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::new()
        .routes(routes!(locks::inspect))
        .routes(routes!(leases::acquire))
        .routes(routes!(leases::inspect, leases::release))
        .routes(routes!(leases::heartbeat))
        .routes(routes!(leases::poll_ticket, leases::leave_queue))
        .routes(routes!(semaphores::inspect))
        .routes(routes!(semaphores::acquire))
        .routes(routes!(semaphores::inspect_lease, semaphores::release))
        .routes(routes!(semaphores::heartbeat))
        .routes(routes!(events::stream))
        .routes(routes!(admin::force_release))
        .routes(routes!(admin::force_release_semaphore))
        .routes(routes!(admin::set_semaphore_limit))
        // Responses carry lease tokens and live state: never cache them.
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ));
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(v1)
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::scrape))
        .routes(routes!(describe_problem))
}

/// The OpenAPI 3.1 document served at [`OPENAPI_PATH`].
pub fn openapi() -> OpenApi {
    documented().into_openapi()
}

/// Every route, before state and middleware: the documented API, plus the docs page and the
/// document itself (served from assets vendored into the binary; nothing is fetched).
pub fn routes() -> Router<AppState> {
    let (api, doc) = documented().split_for_parts();
    api.merge(SwaggerUi::new(DOCS_PATH).url(OPENAPI_PATH, doc))
        .merge(crate::dashboard::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// The whole application: [`routes`] with state and middleware.
pub fn router(state: AppState) -> Router {
    routes()
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        // Inside the router (each route is wrapped), where the matched route is known.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
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

#[utoipa::path(
    get,
    path = "/problems/{code}",
    tag = "health",
    params(("code" = String, Path, description = "A problem code, as in a problem's `code`")),
    responses(
        (status = 200, description = "What the problem type means", body = String, content_type = "text/plain"),
        (status = 404, description = "not_found: no such problem type", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
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
