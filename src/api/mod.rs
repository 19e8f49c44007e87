//! The HTTP API (transport only): parses requests, calls [`crate::locks::Locks`], and maps its
//! answers into the wire format ([`crate::wire`]) and its errors into problem+json
//! ([`crate::problem`]). [`routes`] is the route table; the server adds the dashboard's routes
//! and the middleware ([`crate::server::app`]).

mod acquire;
mod admin;
mod admission;
mod backlog;
mod bodies;
mod bounds;
mod charges;
mod contention;
mod elections;
mod events;
mod eviction;
mod extract;
mod health;
mod key_leases;
mod keys;
mod leases;
mod locks;
pub(crate) mod metrics;
mod multileases;
mod openapi;
mod problem_codes;
mod redis_status;
mod revoke;
mod semaphores;
mod watch;

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::OpenApi as _;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use self::extract::Path;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::{ApiLimits, AppState};

/// Where the OpenAPI document (3.1, and rendered as 3.0) and its human docs page are served.
pub const OPENAPI_PATH: &str = "/openapi.json";
pub const OPENAPI_30_PATH: &str = "/openapi-3.0.json";
pub const DOCS_PATH: &str = "/docs";

/// The route table of everything the OpenAPI document describes: each `routes!` both routes
/// its handlers and adds their `#[utoipa::path]` to the document, so the two cannot drift.
fn documented() -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::new()
        .routes(routes!(locks::list))
        .routes(routes!(locks::inspect))
        .routes(routes!(locks::check_fence))
        .routes(routes!(acquire::acquire))
        .routes(routes!(leases::inspect, leases::release))
        .routes(routes!(leases::heartbeat))
        .routes(routes!(watch::watch_lock_lease))
        .routes(routes!(acquire::poll_ticket, acquire::leave_queue))
        .routes(routes!(semaphores::inspect))
        .routes(routes!(semaphores::acquire))
        .routes(routes!(semaphores::inspect_lease, semaphores::release))
        .routes(routes!(semaphores::heartbeat))
        .routes(routes!(watch::watch_semaphore_lease))
        .routes(routes!(multileases::acquire))
        .routes(routes!(multileases::inspect, multileases::release))
        .routes(routes!(multileases::heartbeat))
        .routes(routes!(multileases::watch))
        .routes(routes!(elections::candidates::campaign))
        .routes(routes!(
            elections::candidates::poll,
            elections::candidates::resign
        ))
        .routes(routes!(elections::candidates::heartbeat))
        .routes(routes!(elections::candidates::watch))
        .routes(routes!(elections::candidates::proclaim))
        .routes(routes!(elections::reads::inspect))
        .routes(routes!(elections::reads::check_term))
        .routes(routes!(elections::reads::end_term))
        .routes(routes!(elections::observe::observe))
        .routes(routes!(events::stream))
        .routes(routes!(admin::force_release))
        .routes(routes!(admin::force_release_semaphore))
        .routes(routes!(admin::set_semaphore_limit))
        .routes(routes!(keys::create, keys::list))
        .routes(routes!(keys::rotate))
        .routes(routes!(key_leases::revoke))
        .routes(routes!(key_leases::list))
        .routes(routes!(keys::audit_log))
        .routes(routes!(redis_status::status))
        .routes(routes!(eviction::evict_lock_lease))
        .routes(routes!(eviction::evict_semaphore_lease))
        .routes(routes!(revoke::revoke_lock))
        .routes(routes!(revoke::revoke_semaphore))
        .routes(routes!(revoke::revoke_leader));
    // (Their answers carry lease tokens and live state: the front door marks every `/v1/`
    // answer `Cache-Control: no-store`, see server::front_door.)
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(v1)
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::scrape))
        .routes(routes!(describe_problem))
}

/// The OpenAPI 3.1 document a server with these limits serves at [`OPENAPI_PATH`].
pub fn openapi(limits: &ApiLimits) -> OpenApi {
    let mut doc = documented().into_openapi();
    openapi::finish(&mut doc, limits);
    doc
}

/// The API's routes: the documented ones, the docs page and the document itself, in OpenAPI
/// 3.1 and rendered as 3.0 for tools that read no 3.1 (served from assets vendored into the
/// binary; nothing is fetched).
pub fn routes(limits: &ApiLimits) -> Router<AppState> {
    let (api, mut doc) = documented().split_for_parts();
    openapi::finish(&mut doc, limits);
    let v30 = Arc::new(openapi::as_v30(&doc));
    api.route(
        OPENAPI_30_PATH,
        get(move || {
            let v30 = v30.clone();
            async move { axum::Json(v30.as_ref().clone()) }
        }),
    )
    .merge(SwaggerUi::new(DOCS_PATH).url(OPENAPI_PATH, doc))
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
