//! The authorisation matrix: every route of the router (the API's, read from the OpenAPI
//! document and the router itself, and the dashboard's) × every kind of caller → the status
//! it must get. The role each API route needs comes from its `api_key` scope in the document;
//! a route with neither a scope nor a place in the public list, or without a probe below,
//! fails the test, so a new route cannot be forgotten.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::RequestBuilder;
use serde_json::{Value, json};

use crate::helpers::{Lease, TestApp, Ticket, default_limits, spawn_app};

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Col {
    /// No credential, with keys existing (so no anonymous access on loopback either).
    NoKey,
    /// A key that was revoked.
    Revoked,
    Reader,
    Client,
    Admin,
    /// Every role, in another tenant.
    OtherTenant,
    /// Every role in the right tenant, but name patterns that match none of the names used.
    OutsidePatterns,
}

const COLS: [Col; 7] = [
    Col::NoKey,
    Col::Revoked,
    Col::Reader,
    Col::Client,
    Col::Admin,
    Col::OtherTenant,
    Col::OutsidePatterns,
];

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Public,
    Role(&'static str),
    /// Dashboard pages: reader or admin; without a credential, a redirect to sign-in.
    Page,
    /// Dashboard forms: a signed-in session (covered in dashboard.rs), never a header key.
    Session,
}

/// One caller's view of the app, and what it is.
struct Caller {
    col: Col,
    view: TestApp,
}

/// What one cell's requests act on: tenant A's lock, semaphore, fair ticket and key.
struct Fixture {
    n: usize,
    lease: Lease,
    sem_lease: Lease,
    ticket: Ticket,
    key_id: String,
}

impl Fixture {
    fn lock(&self) -> String {
        format!("m{}", self.n)
    }

    fn sem(&self) -> String {
        format!("s{}", self.n)
    }

    fn fair(&self) -> String {
        format!("f{}", self.n)
    }
}

async fn fixture(app: &TestApp, owner: &TestApp, n: usize) -> Fixture {
    let lease = owner
        .lease(&format!("m{n}"), json!({"ttl_ms": 60_000}))
        .await;
    let sem_lease = owner
        .permits(&format!("s{n}"), json!({"limit": 5, "ttl_ms": 60_000}))
        .await;
    owner
        .lease(&format!("f{n}"), json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let queued = owner
        .acquire_with(&format!("f{n}"), 50, json!({"kind": "fair"}), None)
        .await;
    let ticket = Ticket::from_reply(&format!("f{n}"), &queued);
    let (key_id, _) = app
        .create_key(json!({"name": format!("victim-{n}"), "tenant": "a", "roles": ["client"]}))
        .await;
    Fixture {
        n,
        lease,
        sem_lease,
        ticket,
        key_id,
    }
}

/// The request a route's probe sends, and the status an authorised caller of tenant A gets,
/// and the one a caller of another tenant (with every role) gets: the route then acts in that
/// tenant's own space, where A's lock, lease, ticket or key does not exist.
struct Probe {
    request: RequestBuilder,
    success: u16,
    other_tenant: u16,
}

fn probe(view: &TestApp, method: &str, template: &str, fx: &Fixture) -> Option<Probe> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (lock, sem, fair) = (fx.lock(), fx.sem(), fx.fair());
    let (lease, sem_lease, ticket) = (&fx.lease, &fx.sem_lease, &fx.ticket);
    let (request, success, other_tenant) = match (method, template) {
        ("GET", "/v1/locks/{name}") => (http.get(url(format!("/v1/locks/{lock}"))), 200, 404),
        ("GET", "/v1/locks") => (http.get(url("/v1/locks".into())), 200, 200),
        // Another tenant's lock of that name is free there: not current, but answered.
        ("POST", "/v1/locks/{name}/fence/check") => (
            http.post(url(format!("/v1/locks/{lock}/fence/check")))
                .json(&json!({"fencing_token": lease.fencing_token})),
            200,
            200,
        ),
        // The watches' streams are never read: the status is all a cell needs.
        ("GET", "/v1/locks/{name}/leases/{lease_id}/watch") => (
            http.get(url(format!("{}/watch", lease.path)))
                .bearer_auth(&lease.token),
            200,
            404,
        ),
        ("GET", "/v1/semaphores/{name}/leases/{lease_id}/watch") => (
            http.get(url(format!("{}/watch", sem_lease.path)))
                .bearer_auth(&sem_lease.token),
            200,
            404,
        ),
        ("POST", "/v1/locks/{name}/leases") => (
            http.post(url(format!("/v1/locks/new{}/leases", fx.n)))
                .json(&json!({})),
            201,
            201,
        ),
        ("GET", "/v1/locks/{name}/leases/{lease_id}") => {
            (http.get(url(lease.path.clone())), 200, 404)
        }
        ("DELETE", "/v1/locks/{name}/leases/{lease_id}") => (
            http.delete(url(lease.path.clone()))
                .bearer_auth(&lease.token),
            200,
            404,
        ),
        ("POST", "/v1/locks/{name}/leases/{lease_id}/heartbeat") => (
            http.post(url(format!("{}/heartbeat", lease.path)))
                .bearer_auth(&lease.token),
            200,
            404,
        ),
        ("POST", "/v1/locks/{name}/tickets/{ticket_id}") => (
            http.post(url(format!("{}?wait_ms=0", ticket.path)))
                .bearer_auth(&ticket.token),
            202,
            404,
        ),
        ("DELETE", "/v1/locks/{name}/tickets/{ticket_id}") => (
            http.delete(url(ticket.path.clone()))
                .bearer_auth(&ticket.token),
            200,
            404,
        ),
        ("GET", "/v1/semaphores/{name}") => {
            (http.get(url(format!("/v1/semaphores/{sem}"))), 200, 404)
        }
        ("POST", "/v1/semaphores/{name}/leases") => (
            http.post(url(format!("/v1/semaphores/{sem}/leases")))
                .json(&json!({"limit": 5})),
            201,
            201,
        ),
        ("GET", "/v1/semaphores/{name}/leases/{lease_id}") => {
            (http.get(url(sem_lease.path.clone())), 200, 404)
        }
        ("DELETE", "/v1/semaphores/{name}/leases/{lease_id}") => (
            http.delete(url(sem_lease.path.clone()))
                .bearer_auth(&sem_lease.token),
            200,
            404,
        ),
        ("POST", "/v1/semaphores/{name}/leases/{lease_id}/heartbeat") => (
            http.post(url(format!("{}/heartbeat", sem_lease.path)))
                .bearer_auth(&sem_lease.token),
            200,
            404,
        ),
        ("GET", "/v1/events") => (http.get(url("/v1/events".into())), 200, 200),
        ("DELETE", "/v1/admin/locks/{name}") => (
            http.delete(url(format!("/v1/admin/locks/{lock}?reason=matrix"))),
            200,
            200,
        ),
        ("DELETE", "/v1/admin/semaphores/{name}") => (
            http.delete(url(format!("/v1/admin/semaphores/{sem}?reason=matrix"))),
            200,
            200,
        ),
        ("DELETE", "/v1/admin/locks/{name}/leases/{lease_id}") => (
            http.delete(url(format!(
                "/v1/admin/locks/{lock}/leases/{}?reason=matrix",
                lease.id
            ))),
            200,
            404,
        ),
        ("DELETE", "/v1/admin/semaphores/{name}/leases/{lease_id}") => (
            http.delete(url(format!(
                "/v1/admin/semaphores/{sem}/leases/{}?reason=matrix",
                sem_lease.id
            ))),
            200,
            404,
        ),
        ("PUT", "/v1/admin/semaphores/{name}/limit") => (
            http.put(url(format!("/v1/admin/semaphores/{sem}/limit")))
                .json(&json!({"limit": 6})),
            200,
            404,
        ),
        ("POST", "/v1/admin/keys") => (
            http.post(url("/v1/admin/keys".into()))
                .json(&json!({"name": format!("made-{}", fx.n)})),
            201,
            201,
        ),
        ("GET", "/v1/admin/keys") => (http.get(url("/v1/admin/keys".into())), 200, 200),
        ("POST", "/v1/admin/keys/{key_id}/rotate") => (
            http.post(url(format!("/v1/admin/keys/{}/rotate", fx.key_id))),
            200,
            404,
        ),
        ("DELETE", "/v1/admin/keys/{key_id}") => (
            http.delete(url(format!("/v1/admin/keys/{}", fx.key_id))),
            200,
            404,
        ),
        ("GET", "/v1/admin/audit") => (http.get(url("/v1/admin/audit".into())), 200, 200),
        // Every key here is a named tenant's; the metrics count every tenant's locks, so only
        // the deployment's readers get them (tested in `input`).
        ("GET", "/metrics") => (http.get(url("/metrics".into())), 403, 403),
        ("GET", "/healthz") => (http.get(url("/healthz".into())), 200, 200),
        ("GET", "/readyz") => (http.get(url("/readyz".into())), 200, 200),
        ("GET", "/problems/{code}") => (http.get(url("/problems/lock_held".into())), 200, 200),
        ("GET", "/openapi.json") => (http.get(url("/openapi.json".into())), 200, 200),
        ("GET", "/openapi-3.0.json") => (http.get(url("/openapi-3.0.json".into())), 200, 200),
        ("GET", "/docs/") => (http.get(url("/docs/".into())), 200, 200),
        // The dashboard's pages.
        ("GET", "/") => (http.get(url("/".into())), 200, 200),
        ("GET", "/locks/{name}") => (http.get(url(format!("/locks/{lock}"))), 200, 404),
        ("GET", "/events") => (http.get(url("/events".into())), 200, 200),
        ("POST", "/locks/{name}/force-release") => (
            http.post(url(format!("/locks/{fair}/force-release")))
                .header("origin", view.url(""))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("confirm=yes"),
            401,
            401,
        ),
        ("POST", "/locks/{name}/evict") => (
            http.post(url(format!("/locks/{lock}/evict")))
                .header("origin", view.url(""))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("confirm=yes&lease_id={}", lease.id)),
            401,
            401,
        ),
        ("GET", "/login") => (http.get(url("/login".into())), 200, 200),
        // Without an Origin: refused before the sign-in's own rate limit counts it (the
        // sign-in itself is covered in dashboard.rs).
        ("POST", "/login") => (
            http.post(url("/login".into()))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("token=not-a-token"),
            403,
            403,
        ),
        ("POST", "/logout") => (
            http.post(url("/logout".into()))
                .header("origin", view.url(""))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("csrf=x"),
            403,
            403,
        ),
        ("GET", "/static/dashboard.css") => {
            (http.get(url("/static/dashboard.css".into())), 200, 200)
        }
        ("GET", "/static/dashboard.js") => (http.get(url("/static/dashboard.js".into())), 200, 200),
        _ => return None,
    };
    Some(Probe {
        request,
        success,
        other_tenant,
    })
}

/// What the dashboard and the docs serve beyond the OpenAPI document, with what they need.
const EXTRA_ROUTES: &[(&str, &str, Need)] = &[
    ("GET", "/openapi.json", Need::Public),
    ("GET", "/openapi-3.0.json", Need::Public),
    ("GET", "/docs/", Need::Public),
    ("GET", "/", Need::Page),
    ("GET", "/locks/{name}", Need::Page),
    ("GET", "/events", Need::Page),
    ("POST", "/locks/{name}/force-release", Need::Session),
    ("POST", "/locks/{name}/evict", Need::Session),
    ("GET", "/login", Need::Public),
    ("POST", "/login", Need::Public),
    ("POST", "/logout", Need::Session),
    ("GET", "/static/dashboard.css", Need::Public),
    ("GET", "/static/dashboard.js", Need::Public),
];

/// Routes the document may leave without a credential.
const PUBLIC: &[&str] = &["/healthz", "/readyz", "/problems/{code}"];

/// Every (method, path template) of the API from the document, with the role its
/// `api_key` scope names.
fn documented_routes() -> Vec<(String, String, Need)> {
    let doc = serde_json::to_value(leasehold::api::openapi(
        &leasehold::server::ServerConfig::new("redis://unused").limits,
    ))
    .expect("document");
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let scopes: BTreeSet<String> = op["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|req| req.get("api_key"))
                .filter_map(Value::as_array)
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let need = match scopes.len() {
                0 => {
                    assert!(
                        PUBLIC.contains(&path.as_str()),
                        "{method} {path} names no api_key scope and is not public: say which role it needs"
                    );
                    Need::Public
                }
                1 => Need::Role(match scopes.first().map(String::as_str) {
                    Some("client") => "client",
                    Some("reader") => "reader",
                    Some("admin") => "admin",
                    other => panic!("{method} {path}: unknown scope {other:?}"),
                }),
                _ => panic!("{method} {path} names several roles: {scopes:?}"),
            };
            routes.push((method.to_ascii_uppercase(), path.clone(), need));
        }
    }
    routes
}

/// Every path the router serves outside the document must be in [`EXTRA_ROUTES`].
fn check_extra_routes_cover_the_router() {
    let debug = format!(
        "{:?} {:?}",
        leasehold::api::routes(&default_limits()),
        leasehold::dashboard::router()
    );
    let doc = serde_json::to_value(leasehold::api::openapi(
        &leasehold::server::ServerConfig::new("redis://unused").limits,
    ))
    .expect("document");
    let documented: BTreeSet<&str> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    let extra: BTreeSet<&str> = EXTRA_ROUTES.iter().map(|(_, p, _)| *p).collect();
    for path in debug
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with('/') && !s.contains("__private__"))
    {
        // Swagger UI's own asset paths hang off /docs.
        let covered = documented.contains(path)
            || extra.contains(path)
            || path.starts_with("/docs")
            || path == "/";
        assert!(covered, "{path} is routed but has no row in the matrix");
    }
}

/// The status `col` must get on a route needing `need` whose probe answers `probe`.
fn expected(col: Col, need: Need, named: bool, probe: &Probe) -> u16 {
    let has = |role: &str| match col {
        Col::Reader => role == "reader",
        Col::Client => role == "client",
        Col::Admin => role == "admin",
        Col::OtherTenant | Col::OutsidePatterns => true,
        Col::NoKey | Col::Revoked => false,
    };
    match need {
        Need::Public | Need::Session => probe.success,
        Need::Role(role) => match col {
            Col::NoKey | Col::Revoked => 401,
            _ if !has(role) => 403,
            Col::OtherTenant => probe.other_tenant,
            Col::OutsidePatterns if named => 403,
            _ => probe.success,
        },
        Need::Page => match col {
            Col::NoKey | Col::Revoked => 303,
            Col::Client => 403,
            Col::OtherTenant => probe.other_tenant,
            Col::OutsidePatterns if named => 403,
            _ => probe.success,
        },
    }
}

#[tokio::test]
async fn every_route_answers_every_kind_of_caller_as_its_role_says() {
    check_extra_routes_cover_the_router();
    let app = spawn_app().await;
    let mut routes = documented_routes();
    routes.extend(
        EXTRA_ROUTES
            .iter()
            .map(|(m, p, n)| ((*m).to_owned(), (*p).to_owned(), *n)),
    );

    let key = |roles: Value, tenant: &str, patterns: Value, name: &str| json!({"name": name, "tenant": tenant, "roles": roles, "patterns": patterns});
    let (_, owner) = app
        .create_key(key(json!(["client"]), "a", json!(["*"]), "owner"))
        .await;
    let owner = app.with_key(&owner);
    let mut callers = Vec::new();
    for col in COLS {
        let secret = match col {
            Col::NoKey => None,
            Col::Revoked => {
                let (id, secret) = app
                    .create_key(key(
                        json!(["client", "reader", "admin"]),
                        "a",
                        json!(["*"]),
                        "revoked",
                    ))
                    .await;
                app.revoke_key(&id).await;
                Some(secret)
            }
            Col::Reader => Some(
                app.create_key(key(json!(["reader"]), "a", json!(["*"]), "reader"))
                    .await
                    .1,
            ),
            Col::Client => Some(
                app.create_key(key(json!(["client"]), "a", json!(["*"]), "client"))
                    .await
                    .1,
            ),
            Col::Admin => Some(
                app.create_key(key(json!(["admin"]), "a", json!(["*"]), "admin"))
                    .await
                    .1,
            ),
            Col::OtherTenant => Some(
                app.create_key(key(
                    json!(["client", "reader", "admin"]),
                    "b",
                    json!(["*"]),
                    "other",
                ))
                .await
                .1,
            ),
            Col::OutsidePatterns => Some(
                app.create_key(key(
                    json!(["client", "reader", "admin"]),
                    "a",
                    json!(["nothing:*"]),
                    "outside",
                ))
                .await
                .1,
            ),
        };
        let view = app.view(secret.as_deref(), false);
        callers.push(Caller { col, view });
    }

    let mut n = 0;
    let mut wrong = Vec::new();
    let mut table: BTreeMap<(String, String), Vec<u16>> = BTreeMap::new();
    for (method, template, need) in &routes {
        for caller in &callers {
            n += 1;
            let fx = fixture(&app, &owner, n).await;
            let Some(probe) = probe(&caller.view, method, template, &fx) else {
                panic!("no probe for {method} {template}: add one to the matrix");
            };
            let named = template.contains("{name}");
            let want = expected(caller.col, *need, named, &probe);
            let response = probe.request.send().await.expect("request");
            let got = response.status().as_u16();
            table
                .entry((method.clone(), template.clone()))
                .or_default()
                .push(got);
            if got != want {
                let body = if response
                    .headers()
                    .get("content-type")
                    .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
                {
                    String::new()
                } else {
                    response.text().await.unwrap_or_default()
                };
                wrong.push(format!(
                    "{method} {template} as {:?}: {got}, expected {want} ({})",
                    caller.col,
                    body.chars().take(160).collect::<String>()
                ));
            }
        }
    }
    let printed: Vec<String> = table
        .iter()
        .map(|((m, p), statuses)| format!("{m:6} {p:55} {statuses:?}"))
        .collect();
    eprintln!(
        "authorisation matrix, columns {COLS:?}:\n{}\n{} routes x {} callers = {n} cells, {} wrong",
        printed.join("\n"),
        table.len(),
        COLS.len(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} cells wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
