//! The HTTP API (transport only): parses requests, calls [`crate::locks::Locks`], and maps its
//! answers into the wire format ([`crate::wire`]) and its errors into problem+json
//! ([`crate::problem`]). [`routes`] is the route table; the server adds the dashboard's routes
//! and the middleware ([`crate::server::app`]).

mod admin;
mod backlog;
mod bodies;
mod contention;
mod events;
mod eviction;
mod extract;
mod health;
mod leases;
mod locks;
pub(crate) mod metrics;
mod semaphores;
mod watch;

use std::any::Any;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tower_http::set_header::SetResponseHeaderLayer;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr};
use utoipa::{Modify, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use self::extract::Path;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

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
        (name = "locks", description = "The live locks, who holds a lock, fence checks"),
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

/// Answers every `/v1` operation can give, documented once: 503 while Redis does not answer
/// (or the instance stops), 500 on an internal error. Applied to the finished document (the
/// `#[openapi]` modifiers run before the routes are merged in, when there are no paths yet).
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        let problem = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/problem+json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("Problem")))
                            .build(),
                    )
                    .build(),
            )
        };
        for (path, item) in &mut openapi.paths.paths {
            if !path.starts_with("/v1/") {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                responses.entry("503".into()).or_insert_with(|| {
                    problem("redis_unavailable, shutting_down (with Retry-After): nothing was done")
                });
                responses
                    .entry("500".into())
                    .or_insert_with(|| problem("internal: a bug, logged on the server"));
            }
        }
    }
}

/// The route table of everything the OpenAPI document describes: each `routes!` both routes
/// its handlers and adds their `#[utoipa::path]` to the document, so the two cannot drift.
fn documented() -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::new()
        .routes(routes!(locks::list))
        .routes(routes!(locks::inspect))
        .routes(routes!(locks::check_fence))
        .routes(routes!(leases::acquire))
        .routes(routes!(leases::inspect, leases::release))
        .routes(routes!(leases::heartbeat))
        .routes(routes!(watch::watch_lock_lease))
        .routes(routes!(leases::poll_ticket, leases::leave_queue))
        .routes(routes!(semaphores::inspect))
        .routes(routes!(semaphores::acquire))
        .routes(routes!(semaphores::inspect_lease, semaphores::release))
        .routes(routes!(semaphores::heartbeat))
        .routes(routes!(watch::watch_semaphore_lease))
        .routes(routes!(events::stream))
        .routes(routes!(admin::force_release))
        .routes(routes!(admin::force_release_semaphore))
        .routes(routes!(admin::set_semaphore_limit))
        .routes(routes!(eviction::evict_lock_lease))
        .routes(routes!(eviction::evict_semaphore_lease))
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
    let mut doc = documented().into_openapi();
    CommonResponses.modify(&mut doc);
    doc
}

/// The API's routes: the documented ones, the docs page and the document itself (served
/// from assets vendored into the binary; nothing is fetched).
pub fn routes() -> Router<AppState> {
    let (api, mut doc) = documented().split_for_parts();
    CommonResponses.modify(&mut doc);
    api.merge(SwaggerUi::new(DOCS_PATH).url(OPENAPI_PATH, doc))
}

/// The answer to a path no route serves.
pub async fn not_found() -> Problem {
    Problem::new(
        ProblemKind::NotFound,
        "no such route; the API lives under /v1",
    )
}

/// The answer to a method a route does not take.
pub async fn method_not_allowed() -> Problem {
    Problem::new(
        ProblemKind::MethodNotAllowed,
        "this route does not take that method",
    )
}

#[utoipa::path(
    get,
    path = "/problems/{code}",
    operation_id = "describeProblem",
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

/// The answer when a handler panicked (never expected; logged).
pub fn panic_problem(_: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    Problem::new(ProblemKind::Internal, "internal error").into_response()
}
