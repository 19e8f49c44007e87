//! Every route to probe: the API's from the OpenAPI document (with the role its scope names),
//! the dashboard's and the docs' beside them, checked against the router itself.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Need;
use crate::helpers::default_limits;

/// What the dashboard and the docs serve beyond the OpenAPI document, with what they need.
pub(super) const EXTRA_ROUTES: &[(&str, &str, Need)] = &[
    ("GET", "/openapi.json", Need::Public),
    ("GET", "/openapi-3.0.json", Need::Public),
    ("GET", "/docs/", Need::Public),
    ("GET", "/", Need::Page),
    ("GET", "/locks/{name}", Need::Page),
    ("GET", "/events", Need::Page),
    ("GET", "/elections", Need::Page),
    ("GET", "/elections/{name}", Need::Page),
    ("POST", "/elections/{name}/end-term", Need::Session),
    ("GET", "/redis", Need::Page),
    ("POST", "/locks/{name}/force-release", Need::Session),
    ("POST", "/locks/{name}/evict", Need::Session),
    ("POST", "/locks/{name}/revoke", Need::Session),
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
pub(super) fn documented_routes() -> Vec<(String, String, Need)> {
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
pub(super) fn check_extra_routes_cover_the_router() {
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
