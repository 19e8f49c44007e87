//! The OpenAPI document's post-processing: its root (info, tags, security schemes), the
//! answers many operations share documented once, links from a new lease to what reads it,
//! the bounds this server's flags set ([`super::bounds`]), optional request bodies as
//! generators expect them, and the OpenAPI 3.0 rendering served beside the 3.1 document.

use serde_json::{Map, Value};
use utoipa::Modify;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr, Required, Schema};

use crate::locks::LockName;
use crate::problem::ProblemDetails;
use crate::state::ApiLimits;
use crate::wire::{LockEventMessage, LostEvent, WatchSignal};

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Leasehold",
        description = "A distributed lock service over HTTP, with lock state in Redis in Redisson's layout. \
            Every error is application/problem+json with a stable `code`. Callers prove themselves with an \
            API key in the `Leasehold-Key` header (its roles are the scopes each operation names); a \
            loopback server with no key lets anonymous callers in.",
    ),
    components(schemas(ProblemDetails, LostEvent, LockEventMessage, WatchSignal)),
    modifiers(&BearerSchemes),
    tags(
        (name = "locks", description = "The live locks, who holds a lock, fence checks"),
        (name = "leases", description = "Acquire, heartbeat, release and inspect leases; fair-queue tickets"),
        (name = "multileases", description = "Several locks held as one lease, all or nothing (MultiLock)"),
        (name = "semaphores", description = "Semaphores with expirable permits"),
        (name = "elections", description = "Leader election: one leader per name, a term that fences its writes, a line of candidates"),
        (name = "admin", description = "Operator actions, behind the admin token"),
        (name = "events", description = "The live feed of lock events (server-sent events)"),
        (name = "health", description = "Liveness, readiness, metrics, problem types"),
    )
)]
pub(super) struct ApiDoc;

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

/// Answers many operations can give, documented once (in the finished document, [`finish`]):
/// on every `/v1` operation 503 (Redis does not answer, or the instance stops), 500, 504; 401,
/// 403, 429 where it takes a credential; 408 where it takes a body; 403 for browser requests
/// from other sites everywhere but the health checks.
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

/// What is added to the document once its paths are in (the `#[openapi]` modifiers run
/// before the routes are merged in, when there are no paths yet).
pub(super) fn finish(doc: &mut OpenApi, limits: &ApiLimits) {
    CommonResponses.modify(doc);
    Links.modify(doc);
    OptionalBodies.modify(doc);
    LockNames.modify(doc);
    RedlockResponses.modify(doc);
    super::problem_codes::list_in(doc);
    super::bounds::write(doc, limits);
}

/// What `"kind": "redlock"` adds to the routes it uses (see `crate::leases::redlock`): 503
/// `no_quorum` where a majority of the RedLock nodes must answer (a heartbeat, a release, an
/// admin's force release or eviction), 422 `redlock_disabled` on acquire. Added to the finished document, like [`CommonResponses`], so the routes' own
/// lists stay as they are.
struct RedlockResponses;

impl Modify for RedlockResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        let quorum = "no_quorum (kind redlock, with Retry-After): fewer than a majority of the \
                      RedLock nodes acknowledged it within its validity; what it got was let go";
        let admin = "no_quorum (with Retry-After): fewer than a majority of the RedLock nodes \
                     answered; what the others did stands, repeat it";
        let changes: [(&str, &str, &str); 6] = [
            ("acquireLock", "503", quorum),
            (
                "acquireLock",
                "422",
                "redlock_disabled: kind redlock on a server without --redlock-nodes",
            ),
            ("heartbeatLockLease", "503", quorum),
            (
                "releaseLockLease",
                "503",
                "no_quorum (kind redlock): a majority of the RedLock nodes did not answer",
            ),
            ("forceReleaseLock", "503", admin),
            ("evictLockLease", "503", admin),
        ];
        for item in openapi.paths.paths.values_mut() {
            for operation in [&mut item.post, &mut item.delete].into_iter().flatten() {
                let id = operation.operation_id.as_deref().unwrap_or_default();
                for (op, status, codes) in changes {
                    if op != id {
                        continue;
                    }
                    let responses = &mut operation.responses.responses;
                    match responses.get_mut(status) {
                        Some(RefOr::T(existing)) => {
                            existing.description = format!("{}; {codes}", existing.description);
                        }
                        Some(RefOr::Ref(_)) => {}
                        None => {
                            responses.insert(status.to_owned(), problem(codes));
                        }
                    }
                }
            }
        }
    }
}

/// The lock-name path parameter, declared once: every operation names it `("name" = String,
/// Path)` and gets here what a name may be ([`LockName::PATTERN`]) and what it names (a lock,
/// or on `/v1/semaphores` paths a semaphore).
struct LockNames;

impl Modify for LockNames {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in &mut openapi.paths.paths {
            let what = if path.starts_with("/v1/semaphores/")
                || path.starts_with("/v1/admin/semaphores/")
            {
                "Semaphore"
            } else {
                "Lock"
            };
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let parameters = operation.parameters.iter_mut().flatten();
                for parameter in parameters.filter_map(|p| match p {
                    RefOr::T(p) if p.name == "name" && p.parameter_in == ParameterIn::Path => {
                        Some(p)
                    }
                    _ => None,
                }) {
                    parameter.description = Some(format!(
                        "{what} name: 1-{} ASCII letters, digits and . _ - :",
                        LockName::MAX_LEN
                    ));
                    if let Some(RefOr::T(Schema::Object(schema))) = parameter.schema.as_mut() {
                        schema.pattern = Some(LockName::PATTERN.to_owned());
                    }
                }
            }
        }
    }
}

/// Optional request bodies (acquire, heartbeats, key rotation: an empty body is fine) as a
/// plain `$ref` with `required: false`. utoipa writes an `Option<Body>` as `oneOf [$ref,
/// null]`, which generators take for a body that must be sent, as null if need be
/// (openapi-python-client then failed to send an absent one).
struct OptionalBodies;

impl Modify for OptionalBodies {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                if let Some(RefOr::T(body)) = operation.request_body.as_mut() {
                    optional_body(body);
                }
            }
        }
    }
}

fn optional_body(body: &mut RequestBody) {
    let mut optional = false;
    for content in body.content.values_mut() {
        let RefOr::T(content) = content else {
            continue;
        };
        let Some(RefOr::T(Schema::OneOf(one))) = &content.schema else {
            continue;
        };
        let refs: Vec<&RefOr<Schema>> = one
            .items
            .iter()
            .filter(|item| matches!(item, RefOr::Ref(_)))
            .collect();
        if let [only] = refs[..]
            && one.items.len() == 2
        {
            content.schema = Some(only.clone());
            optional = true;
        }
    }
    if optional {
        body.required = Some(Required::False);
    }
}

/// The document rendered as OpenAPI 3.0.3, for tools that read no 3.1 (kin-openapi, which
/// oapi-codegen uses): `type: [T, "null"]` becomes `type: T, nullable: true`, a `oneOf` with
/// `null` becomes the other schema marked nullable, `examples` becomes `example`, and the
/// 3.1-only fields go.
pub(super) fn as_v30(doc: &OpenApi) -> Value {
    let mut value = serde_json::to_value(doc).unwrap_or(Value::Null);
    if let Value::Object(root) = &mut value {
        root.insert("openapi".into(), Value::String("3.0.3".into()));
        root.remove("jsonSchemaDialect");
        root.remove("webhooks");
        if let Some(Value::Object(license)) = root
            .get_mut("info")
            .and_then(|info| info.get_mut("license"))
        {
            license.remove("identifier");
        }
    }
    down_to_v30(&mut value);
    value
}

fn down_to_v30(value: &mut Value) {
    match value {
        Value::Object(object) => {
            nullable_type(object);
            nullable_one_of(object);
            if let Some(Value::Array(examples)) = object.remove("examples")
                && let Some(first) = examples.into_iter().next()
            {
                object.insert("example".into(), first);
            }
            for child in object.values_mut() {
                down_to_v30(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(down_to_v30),
        _ => {}
    }
}

/// `type: [T, "null"]` → `type: T, nullable: true`.
fn nullable_type(object: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = object.get("type") else {
        return;
    };
    let others: Vec<Value> = types
        .iter()
        .filter(|t| t.as_str() != Some("null"))
        .cloned()
        .collect();
    let nullable = others.len() < types.len();
    match others.len() {
        1 => {
            object.insert("type".into(), others[0].clone());
        }
        _ => return,
    }
    if nullable {
        object.insert("nullable".into(), Value::Bool(true));
    }
}

/// `oneOf: [X, {type: null}]` → X marked nullable (a `$ref` wrapped in `allOf`: 3.0 ignores
/// what stands beside a `$ref`).
fn nullable_one_of(object: &mut Map<String, Value>) {
    let Some(Value::Array(items)) = object.get("oneOf") else {
        return;
    };
    let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
    let others: Vec<Value> = items.iter().filter(|v| !is_null(v)).cloned().collect();
    if others.len() == items.len() || others.len() != 1 {
        return;
    }
    object.remove("oneOf");
    let other = others.into_iter().next().unwrap_or(Value::Null);
    if other.get("$ref").is_some() {
        object.insert("allOf".into(), Value::Array(vec![other]));
    } else if let Value::Object(fields) = other {
        for (k, v) in fields {
            object.entry(k).or_insert(v);
        }
    }
    object.insert("nullable".into(), Value::Bool(true));
}
