//! What each route's probe sends, on what (one cell's [`Fixture`]: tenant A's lock, semaphore,
//! fair ticket and key), and what an authorised caller gets.

use reqwest::RequestBuilder;
use serde_json::json;

use super::fixture::Fixture;
use crate::helpers::TestApp;

/// The request a route's probe sends, and the status an authorised caller of tenant A gets,
/// and the one a caller of another tenant (with every role) gets: the route then acts in that
/// tenant's own space, where A's lock, lease, ticket or key does not exist.
pub(super) struct Probe {
    pub(super) request: RequestBuilder,
    pub(super) success: u16,
    pub(super) other_tenant: u16,
}

/// A probe's parts: its request, an authorised caller's status, another tenant's.
type ProbeParts = (RequestBuilder, u16, u16);

/// The probes of one group of routes: `None` for a route not of that group.
type RouteProbes = fn(&TestApp, (&str, &str), &Fixture) -> Option<ProbeParts>;

const PROBES: [RouteProbes; 8] = [
    lock_probe,
    semaphore_probe,
    multilease_probe,
    election_probe,
    operator_probe,
    key_probe,
    service_probe,
    dashboard_probe,
];

/// The probe of the route `method template`, if the matrix has one. The watches' streams
/// are never read: the status is all a cell needs.
pub(super) fn probe(view: &TestApp, method: &str, template: &str, fx: &Fixture) -> Option<Probe> {
    let (request, success, other_tenant) = PROBES
        .iter()
        .find_map(|group| group(view, (method, template), fx))?;
    Some(Probe {
        request,
        success,
        other_tenant,
    })
}

/// A lock, its leases and its fair tickets.
fn lock_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (lock, lease, ticket) = (fx.lock(), &fx.lease, &fx.ticket);
    Some(match route {
        ("GET", "/v1/locks/{name}") => (http.get(url(format!("/v1/locks/{lock}"))), 200, 404),
        ("GET", "/v1/locks") => (http.get(url("/v1/locks".into())), 200, 200),
        // Another tenant's lock of that name is free there: not current, but answered.
        ("POST", "/v1/locks/{name}/fence/check") => (
            http.post(url(format!("/v1/locks/{lock}/fence/check")))
                .json(&json!({"fencing_token": lease.fencing_token})),
            200,
            200,
        ),
        ("GET", "/v1/locks/{name}/leases/{lease_id}/watch") => (
            http.get(url(format!("{}/watch", lease.path)))
                .bearer_auth(&lease.token),
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
        _ => return None,
    })
}

/// A semaphore and its leases.
fn semaphore_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (sem, sem_lease) = (fx.sem(), &fx.sem_lease);
    Some(match route {
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
        ("GET", "/v1/semaphores/{name}/leases/{lease_id}/watch") => (
            http.get(url(format!("{}/watch", sem_lease.path)))
                .bearer_auth(&sem_lease.token),
            200,
            404,
        ),
        _ => return None,
    })
}

/// Multileases.
fn multilease_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (multi, multi_token) = (&fx.multi.0, &fx.multi.1);
    Some(match route {
        ("POST", "/v1/multileases") => (
            http.post(url("/v1/multileases".into()))
                .json(&json!({"locks": [{"name": format!("newm{}", fx.n)}]})),
            201,
            201,
        ),
        ("GET", "/v1/multileases/{lease_id}") => (http.get(url(multi.clone())), 200, 404),
        ("DELETE", "/v1/multileases/{lease_id}") => (
            http.delete(url(multi.clone())).bearer_auth(multi_token),
            200,
            404,
        ),
        ("POST", "/v1/multileases/{lease_id}/heartbeat") => (
            http.post(url(format!("{multi}/heartbeat")))
                .bearer_auth(multi_token),
            200,
            404,
        ),
        ("GET", "/v1/multileases/{lease_id}/watch") => (
            http.get(url(format!("{multi}/watch")))
                .bearer_auth(multi_token),
            200,
            404,
        ),
        _ => return None,
    })
}

/// An election and its candidates.
fn election_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (leader, leader_token) = (&fx.leader.0, &fx.leader.1);
    Some(match route {
        // Another tenant's election of that name is its own: empty, but answered.
        ("POST", "/v1/elections/{name}/candidates") => (
            http.post(url(format!("/v1/elections/new{}/candidates", fx.n)))
                .json(&json!({"value": "v"})),
            201,
            201,
        ),
        ("GET", "/v1/elections/{name}") => (
            http.get(url(format!("/v1/elections/{}", fx.election()))),
            200,
            200,
        ),
        ("POST", "/v1/elections/{name}/fence/check") => (
            http.post(url(format!("/v1/elections/{}/fence/check", fx.election())))
                .json(&json!({"term": 1})),
            200,
            200,
        ),
        ("GET", "/v1/elections/{name}/observe") => (
            http.get(url(format!("/v1/elections/{}/observe", fx.election()))),
            200,
            200,
        ),
        ("GET", "/v1/elections/{name}/candidates/{candidate_id}") => (
            http.get(url(leader.clone())).bearer_auth(leader_token),
            200,
            404,
        ),
        ("DELETE", "/v1/elections/{name}/candidates/{candidate_id}") => (
            http.delete(url(leader.clone())).bearer_auth(leader_token),
            200,
            404,
        ),
        ("POST", "/v1/elections/{name}/candidates/{candidate_id}/heartbeat") => (
            http.post(url(format!("{leader}/heartbeat")))
                .bearer_auth(leader_token),
            200,
            404,
        ),
        ("PUT", "/v1/elections/{name}/candidates/{candidate_id}/value") => (
            http.put(url(format!("{leader}/value")))
                .bearer_auth(leader_token)
                .json(&json!({"value": "proclaimed"})),
            200,
            404,
        ),
        ("GET", "/v1/elections/{name}/candidates/{candidate_id}/watch") => (
            http.get(url(format!("{leader}/watch")))
                .bearer_auth(leader_token),
            200,
            404,
        ),
        _ => return None,
    })
}

/// An admin's force releases, evictions, revocations and limits.
fn operator_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (lock, sem, lease, sem_lease) = (fx.lock(), fx.sem(), &fx.lease, &fx.sem_lease);
    Some(match route {
        ("DELETE", "/v1/admin/elections/{name}") => (
            http.delete(url(format!(
                "/v1/admin/elections/{}?reason=matrix",
                fx.election()
            ))),
            200,
            200,
        ),
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
        ("POST", "/v1/admin/locks/{name}/revoke") => (
            http.post(url(format!("/v1/admin/locks/{lock}/revoke")))
                .json(&json!({"grace_ms": 60_000, "reason": "matrix"})),
            200,
            404,
        ),
        ("POST", "/v1/admin/semaphores/{name}/revoke") => (
            http.post(url(format!("/v1/admin/semaphores/{sem}/revoke")))
                .json(&json!({"grace_ms": 60_000, "reason": "matrix"})),
            200,
            404,
        ),
        ("POST", "/v1/admin/elections/{name}/revoke") => (
            http.post(url(format!("/v1/admin/elections/{}/revoke", fx.election())))
                .json(&json!({"grace_ms": 60_000, "reason": "matrix"})),
            200,
            404,
        ),
        ("PUT", "/v1/admin/semaphores/{name}/limit") => (
            http.put(url(format!("/v1/admin/semaphores/{sem}/limit")))
                .json(&json!({"limit": 6})),
            200,
            404,
        ),
        _ => return None,
    })
}

/// The keys and the audit log, for admins.
fn key_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    Some(match route {
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
        ("GET", "/v1/admin/keys/{key_id}/leases") => (
            http.get(url(format!("/v1/admin/keys/{}/leases", fx.key_id))),
            200,
            404,
        ),
        ("DELETE", "/v1/admin/keys/{key_id}") => (
            http.delete(url(format!("/v1/admin/keys/{}", fx.key_id))),
            200,
            404,
        ),
        ("GET", "/v1/admin/audit") => (http.get(url("/v1/admin/audit".into())), 200, 200),
        _ => return None,
    })
}

/// The service's own routes: its Redis, events, metrics, health and documents.
fn service_probe(view: &TestApp, route: (&str, &str), _fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    Some(match route {
        // The deployment's Redis (addresses) is for the default tenant's admins; every key
        // here is a named tenant's (the admin token's 200 is tested in `replication`).
        ("GET", "/v1/admin/redis") => (http.get(url("/v1/admin/redis".into())), 403, 403),
        ("GET", "/v1/events") => (http.get(url("/v1/events".into())), 200, 200),
        // The page answers every viewer; a named tenant's sees that it is not theirs.
        ("GET", "/redis") => (http.get(url("/redis".into())), 200, 200),
        // Every key here is a named tenant's; the metrics count every tenant's locks, so only
        // the deployment's readers get them (tested in `input`).
        ("GET", "/metrics") => (http.get(url("/metrics".into())), 403, 403),
        ("GET", "/healthz") => (http.get(url("/healthz".into())), 200, 200),
        ("GET", "/readyz") => (http.get(url("/readyz".into())), 200, 200),
        ("GET", "/problems/{code}") => (http.get(url("/problems/lock_held".into())), 200, 200),
        ("GET", "/openapi.json") => (http.get(url("/openapi.json".into())), 200, 200),
        ("GET", "/openapi-3.0.json") => (http.get(url("/openapi-3.0.json".into())), 200, 200),
        ("GET", "/docs/") => (http.get(url("/docs/".into())), 200, 200),
        _ => return None,
    })
}

/// The dashboard's pages and forms.
fn dashboard_probe(view: &TestApp, route: (&str, &str), fx: &Fixture) -> Option<ProbeParts> {
    let url = |path: String| view.url(&path);
    let http = &view.http;
    let (lock, fair, lease) = (fx.lock(), fx.fair(), &fx.lease);
    Some(match route {
        // The dashboard's pages.
        ("GET", "/") => (http.get(url("/".into())), 200, 200),
        ("GET", "/locks/{name}") => (http.get(url(format!("/locks/{lock}"))), 200, 404),
        ("GET", "/events") => (http.get(url("/events".into())), 200, 200),
        ("GET", "/elections") => (http.get(url("/elections".into())), 200, 200),
        // Another tenant's election of that name is its own: nobody stood there.
        ("GET", "/elections/{name}") => (
            http.get(url(format!("/elections/{}", fx.election()))),
            200,
            404,
        ),
        ("POST", "/elections/{name}/end-term") => (
            http.post(url(format!("/elections/{}/end-term", fx.election())))
                .header("origin", view.url(""))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("confirm=yes"),
            401,
            401,
        ),
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
        ("POST", "/locks/{name}/revoke") => (
            http.post(url(format!("/locks/{lock}/revoke")))
                .header("origin", view.url(""))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("confirm=yes&grace_s=60"),
            401,
            401,
        ),
        ("GET", "/login") => (http.get(url("/login".into())), 200, 200),
        // Without an Origin: refused before the sign-in's own rate limit counts it (the
        // sign-in itself is covered in dashboard/session.rs).
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
    })
}
