//! The HTTP API (transport only): parses requests, calls [`crate::locks::Locks`], and maps its
//! answers into the wire format ([`crate::wire`]) and its errors into problem+json
//! ([`crate::problem`]). [`routes`] is the route table; the server adds the dashboard's routes
//! and the middleware ([`crate::server::app`]).

mod admin;
mod admission;
mod backlog;
mod bodies;
mod contention;
mod events;
mod eviction;
mod extract;
mod health;
mod keys;
mod leases;
mod locks;
pub(crate) mod metrics;
mod semaphores;
mod watch;

use std::any::Any;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::Number;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr, Schema};
use utoipa::{Modify, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use self::extract::Path;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::{ApiLimits, AppState};

/// Where the OpenAPI document and its human docs page are served.
pub const OPENAPI_PATH: &str = "/openapi.json";
pub const DOCS_PATH: &str = "/docs";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Leasehold",
        description = "A distributed lock service over HTTP, with lock state in Redis in Redisson's layout. \
            Every error is application/problem+json with a stable `code`. Callers prove themselves with an \
            API key in the `Leasehold-Key` header (its roles are the scopes each operation names); a \
            loopback server with no key lets anonymous callers in.",
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

/// The credentials: an API key (its roles are the scopes an operation names), a lease's
/// bearer token (shown once at acquisition) and the operator's admin token.
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
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Leasehold-Key",
                "An API key (lhk_...) or the admin token; its roles must include the scope the \
                 operation names (client, reader or admin)",
            ))),
        );
    }
}

/// Answers many operations can give, documented once: 503 while Redis does not answer (or
/// the instance stops), 500 on an internal error, 504 for a stuck request on every `/v1`
/// operation; the answers of who may call (401, 403, 429) wherever an operation takes a
/// credential; 408 where it takes a body; 403 for browser requests from other sites
/// everywhere but the health checks. Applied to the finished document (see [`finish`]).
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in &mut openapi.paths.paths {
            let api = path.starts_with("/v1/");
            let guarded = !matches!(path.as_str(), "/healthz" | "/readyz");
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let credentials = operation.security.as_ref().is_some_and(|s| !s.is_empty());
                let body = operation.request_body.is_some();
                let responses = &mut operation.responses.responses;
                let mut add = |status: &str, codes: &str| match responses.get_mut(status) {
                    Some(RefOr::T(existing)) => {
                        existing.description = format!("{}; {codes}", existing.description);
                    }
                    Some(RefOr::Ref(_)) => {}
                    None => {
                        responses.insert(status.to_owned(), problem(codes));
                    }
                };
                if api {
                    add(
                        "503",
                        "redis_unavailable, shutting_down (with Retry-After): nothing was done",
                    );
                    add("500", "internal: a bug, logged on the server");
                    add(
                        "504",
                        "request_timeout: the request was abandoned; it may or may not have taken effect",
                    );
                }
                if credentials {
                    add(
                        "401",
                        "api_key_required, api_key_invalid (with WWW-Authenticate: Leasehold-Key)",
                    );
                    add(
                        "403",
                        "role_missing: the key lacks the role; name_not_allowed: outside the key's name patterns",
                    );
                    add(
                        "429",
                        "rate_limited, quota_exceeded (with Retry-After): over the caller's request rate or quotas",
                    );
                }
                if guarded {
                    add(
                        "403",
                        "cross_origin: a page of another site sent it; host_not_allowed: the Host is not served",
                    );
                }
                if body {
                    add("408", "body_timeout: the body came too slowly");
                }
            }
        }
    }
}

/// OpenAPI links from a new lease to what reads it (the lease, its lock or semaphore), so a
/// client, or a stateful tester, can follow a 201 to the resources it made.
struct Links;

impl Modify for Links {
    fn modify(&self, openapi: &mut OpenApi) {
        let lease_ref = |path: &str| format!("#/paths/{}/get", path.replace('/', "~1"));
        let from_lease = |path: &str| {
            LinkBuilder::new()
                .operation_ref(lease_ref(path))
                .parameter("name", "$request.path.name")
                .parameter("lease_id", "$response.body#/lease_id")
                .build()
        };
        let from_name = |path: &str, method: &str| {
            LinkBuilder::new()
                .operation_ref(format!("#/paths/{}/{method}", path.replace('/', "~1")))
                .parameter("name", "$request.path.name")
                .build()
        };
        let links = [
            (
                "/v1/locks/{name}/leases",
                vec![
                    (
                        "InspectLease",
                        from_lease("/v1/locks/{name}/leases/{lease_id}"),
                    ),
                    ("InspectLock", from_name("/v1/locks/{name}", "get")),
                ],
            ),
            (
                "/v1/semaphores/{name}/leases",
                vec![
                    (
                        "InspectLease",
                        from_lease("/v1/semaphores/{name}/leases/{lease_id}"),
                    ),
                    (
                        "InspectSemaphore",
                        from_name("/v1/semaphores/{name}", "get"),
                    ),
                    (
                        "SetLimit",
                        from_name("/v1/admin/semaphores/{name}/limit", "put"),
                    ),
                ],
            ),
        ];
        for (path, out) in links {
            let created = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.post.as_mut())
                .and_then(|op| op.responses.responses.get_mut("201"));
            if let Some(RefOr::T(response)) = created {
                for (name, link) in out {
                    response.links.insert(name.to_owned(), RefOr::T(link));
                }
            }
        }
    }
}

/// A problem+json response documented with `description`.
fn problem(description: &str) -> RefOr<utoipa::openapi::Response> {
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
        .routes(routes!(keys::create, keys::list))
        .routes(routes!(keys::rotate))
        .routes(routes!(keys::revoke))
        .routes(routes!(keys::audit_log))
        .routes(routes!(eviction::evict_lock_lease))
        .routes(routes!(eviction::evict_semaphore_lease));
    // (Their answers carry lease tokens and live state: the front door marks every `/v1/`
    // answer `Cache-Control: no-store`, see server::front_door.)
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(v1)
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::scrape))
        .routes(routes!(describe_problem))
}

/// What is added to the document once its paths are in (the `#[openapi]` modifiers run
/// before the routes are merged in, when there are no paths yet).
fn finish(doc: &mut OpenApi) {
    CommonResponses.modify(doc);
    Links.modify(doc);
}

/// The OpenAPI 3.1 document a server with these limits serves at [`OPENAPI_PATH`].
pub fn openapi(limits: &ApiLimits) -> OpenApi {
    let mut doc = documented().into_openapi();
    finish(&mut doc);
    bounds(&mut doc, limits);
    doc
}

/// The API's routes: the documented ones, the docs page and the document itself (served
/// from assets vendored into the binary; nothing is fetched).
pub fn routes(limits: &ApiLimits) -> Router<AppState> {
    let (api, mut doc) = documented().split_for_parts();
    finish(&mut doc);
    bounds(&mut doc, limits);
    api.merge(SwaggerUi::new(DOCS_PATH).url(OPENAPI_PATH, doc))
}

/// Writes the bounds this server holds requests to (its flags: `--min-ttl-ms`,
/// `--max-ttl-ms`, `--max-permits`) into its document, so that a client generated from it, or
/// a fuzzer, asks for what is accepted rather than learn it from 422s.
fn bounds(doc: &mut OpenApi, limits: &ApiLimits) {
    let ttl = (limits.ttl.min_ms, limits.ttl.max_ms);
    let permits = (1, u64::from(limits.max_permits));
    let fields = [
        ("AcquireBody", "ttl_ms", ttl),
        ("PermitBody", "ttl_ms", ttl),
        ("HeartbeatBody", "ttl_ms", ttl),
        ("KeyQuotasBody", "max_ttl_ms", ttl),
        ("PermitBody", "limit", permits),
        ("PermitBody", "permits", permits),
        ("LimitBody", "limit", permits),
    ];
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let number = |n: u64| Number::UInt(usize::try_from(n).unwrap_or(usize::MAX));
    for (schema, field, (min, max)) in fields {
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema)
            && let Some(RefOr::T(Schema::Object(property))) = object.properties.get_mut(field)
        {
            property.minimum = Some(number(min));
            property.maximum = Some(number(max));
        }
    }
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
