//! The OpenAPI document and the router describe the same API: every documented operation is
//! served, and every routed (method, path) is documented unless it is listed below with why.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::helpers::{AppOptions, TestApp, default_limits, spawn_app, spawn_app_with};

/// Routes outside the document, by exact path or path prefix (`/docs` covers `/docs/..`), each
/// with the reason. The dashboard's HTML routes (`/`, `/locks/..`, `/events`, `/login`,
/// `/static/..`) belong here too: they are pages, not API.
const NOT_IN_DOCUMENT: &[(&str, &str)] = &[
    (
        "/docs",
        "the human docs page (Swagger UI from vendored assets)",
    ),
    ("/openapi.json", "the document itself"),
    (
        "/openapi-3.0.json",
        "the document itself, rendered as OpenAPI 3.0",
    ),
    ("/", "the dashboard's overview page (HTML)"),
    (
        "/locks",
        "the dashboard's lock pages and their force-release form (HTML)",
    ),
    ("/events", "the dashboard's live event page (HTML)"),
    ("/login", "the dashboard's sign-in form (HTML)"),
    ("/logout", "the dashboard's sign-out (HTML form post)"),
    ("/static", "the dashboard's stylesheet and script"),
];

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn excluded(path: &str) -> bool {
    NOT_IN_DOCUMENT
        .iter()
        .any(|(p, _)| path == *p || path.starts_with(&format!("{p}/")))
}

/// (METHOD, path template) of every operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut ops = BTreeSet::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method.to_ascii_lowercase()).is_some() {
                ops.insert((method.to_owned(), path.clone()));
            }
        }
    }
    ops
}

/// Every path template the router routes, read from its `Debug` output (axum lists its route
/// table there). The sanity checks below fail loudly should that format ever change.
fn routed_paths() -> BTreeSet<String> {
    let debug = format!("{:?}", leasehold::api::routes(&default_limits()));
    debug
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with('/') && !s.contains("__private__"))
        .map(str::to_owned)
        .collect()
}

/// A concrete path for a template: parameters get values that parse.
fn concrete(template: &str) -> String {
    template
        .replace("{name}", "probe")
        .replace("{lease_id}", "0190c5f0-0000-7000-8000-000000000000")
        .replace("{ticket_id}", "0190c5f0-0000-7000-8000-000000000000")
        .replace("{code}", "lock_held")
}

/// Status and problem code (if any) of `method path`.
async fn probe(app: &TestApp, method: &str, path: &str) -> (u16, Option<String>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let response = app
        .http
        .request(method, app.url(path))
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let streaming = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if streaming {
        // An event stream never ends on its own: its status is the answer.
        return (status, None);
    }
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn the_document_and_the_router_describe_the_same_routes() {
    let doc = serde_json::to_value(leasehold::api::openapi(
        &leasehold::server::ServerConfig::new("redis://unused").limits,
    ))
    .expect("document");
    assert!(
        doc["openapi"].as_str().expect("version").starts_with("3.1"),
        "OpenAPI 3.1"
    );
    let documented = documented(&doc);
    let routed = routed_paths();
    let documented_paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    assert!(
        documented_paths.iter().all(|p| routed.contains(*p)),
        "could not read the route table from the router's Debug output: {routed:?}"
    );
    let app = spawn_app().await;

    // Every documented operation is served: not the fallback's 404 or 405.
    for (method, template) in &documented {
        let (status, code) = probe(&app, method, &concrete(template)).await;
        assert!(
            !(status == 405 || status == 404 && code.as_deref() == Some("not_found")),
            "{method} {template} is documented but not served ({status} {code:?})"
        );
    }

    // Every routed (method, path) is documented, or excluded with a reason.
    for template in routed.iter().filter(|p| !excluded(p)) {
        for method in METHODS {
            let (status, code) = probe(&app, method, &concrete(template)).await;
            // The fallbacks' answers: nothing is routed there for this method.
            let fallback = matches!(
                (status, code.as_deref()),
                (405, Some("method_not_allowed")) | (404, Some("not_found"))
            );
            if fallback {
                continue;
            }
            assert!(
                documented.contains(&(method.to_owned(), template.clone())),
                "{method} {template} is served ({status} {code:?}) but not in the OpenAPI document"
            );
        }
    }
}

#[tokio::test]
async fn the_document_and_the_docs_page_are_served() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await;
    doc.assert_status(200);
    assert_eq!(doc.body["info"]["title"], "Leasehold");
    assert!(doc.body["components"]["schemas"]["Problem"].is_object());
    let page = app
        .http
        .get(app.url("/docs/"))
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("swagger-ui"), "{html}");
    // The page's script and style come from this server, not from a CDN.
    assert!(
        !html.contains("https://"),
        "the docs page loads remote assets:\n{html}"
    );
}

/// The served document's bounds are the ones requests are held to: a client generated from it
/// (or a fuzzer) asks for what is accepted. Checked at each edge: the bound itself is
/// accepted, one past it refused.
#[tokio::test]
async fn the_document_states_the_bounds_requests_are_held_to() {
    let app = spawn_app_with(AppOptions {
        min_ttl_ms: 250,
        ..AppOptions::default()
    })
    .await;
    let doc = app.get("/openapi.json").await;
    doc.assert_status(200);
    let schemas = &doc.body["components"]["schemas"];
    let ttl = &schemas["AcquireBody"]["properties"]["ttl_ms"];
    let (min, max) = (
        ttl["minimum"].as_u64().expect("a minimum TTL"),
        ttl["maximum"].as_u64().expect("a maximum TTL"),
    );
    assert_eq!(
        (min, max),
        (250, 3_600_000),
        "this server's --min/--max-ttl-ms"
    );
    for body in ["PermitBody", "HeartbeatBody"] {
        assert_eq!(
            schemas[body]["properties"]["ttl_ms"]["minimum"], min,
            "{body}"
        );
        assert_eq!(
            schemas[body]["properties"]["ttl_ms"]["maximum"], max,
            "{body}"
        );
    }
    for (n, ttl_ms, status) in [
        (1, min, 201),
        (2, max, 201),
        (3, min - 1, 422),
        (4, max + 1, 422),
    ] {
        app.acquire(&format!("ttl-{n}"), json!({"ttl_ms": ttl_ms}))
            .await
            .assert_status(status);
    }

    let max_permits = schemas["LimitBody"]["properties"]["limit"]["maximum"]
        .as_u64()
        .expect("a maximum limit");
    assert_eq!(
        schemas["PermitBody"]["properties"]["limit"]["maximum"],
        max_permits
    );
    for (n, limit, status) in [
        (1, max_permits, 201),
        (2, max_permits + 1, 422),
        (3, 0, 422),
    ] {
        app.acquire_permits(&format!("limit-{n}"), 0, json!({"limit": limit}))
            .await
            .assert_status(status);
    }

    let holder = &schemas["AcquireBody"]["properties"]["holder"];
    assert_eq!(holder["minLength"], 1);
    let longest = usize::try_from(holder["maxLength"].as_u64().expect("a maximum")).expect("fits");
    assert_eq!(
        holder["pattern"],
        "^[^\\x00-\\x1F\\x7F-\\x9F\u{00AD}\u{061C}\u{180E}\u{200B}-\u{200F}\u{202A}-\u{202E}\u{2060}-\u{2064}\u{2066}-\u{2069}\u{FEFF}\u{2028}\u{2029}\u{034F}\u{115F}\u{1160}\u{3164}\u{FFA0}\u{FE00}-\u{FE0F}]*$"
    );
    for key in ["minLength", "maxLength", "pattern"] {
        assert_eq!(
            schemas["PermitBody"]["properties"]["holder"][key],
            holder[key]
        );
    }
    let cases = [
        ("é".repeat(longest), 201),
        ("é".repeat(longest + 1), 422),
        (String::new(), 422),
        ("bell\u{7}".to_owned(), 422),
        ("next line\u{85}".to_owned(), 422),
        ("zero\u{200B}width".to_owned(), 422),
        ("turned\u{202E}round".to_owned(), 422),
        // Allowed by category, not denied by list (issue 59): separators, tags, fillers,
        // joiners and variation selectors show as nothing.
        ("line\u{2028}sep".to_owned(), 422),
        ("para\u{2029}sep".to_owned(), 422),
        ("tag\u{E0041}".to_owned(), 422),
        ("filler\u{3164}".to_owned(), 422),
        ("filler\u{115F}".to_owned(), 422),
        ("cgj\u{034F}".to_owned(), 422),
        ("heart\u{2764}\u{FE0F}".to_owned(), 422),
        ("private\u{E000}".to_owned(), 422),
        ("deploy cron #7 (ü, 東京, ☕)".to_owned(), 201),
    ];
    for (n, (label, status)) in cases.into_iter().enumerate() {
        app.acquire(&format!("holder-{n}"), json!({"holder": label}))
            .await
            .assert_status(status);
    }
}

/// What client generators stumbled on (issue 49): optional bodies written as `oneOf [$ref,
/// null]`, untyped stream payloads, bare operation ids, Rust notes in descriptions, and no
/// OpenAPI 3.0 rendering for tools that read no 3.1.
#[tokio::test]
async fn the_document_suits_client_generators() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await.body;
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("an item") {
            if let Some(body) = op.get("requestBody") {
                let text = body.to_string();
                assert!(!text.contains("\"null\""), "{method} {path}: {text}");
            }
            let description = op["description"].as_str().unwrap_or("");
            for rust in ["async fn", "future", "Box::pin", "boxed"] {
                assert!(
                    !description.contains(rust),
                    "{method} {path}: {description}"
                );
            }
            ids.push(op["operationId"].as_str().unwrap_or("").to_owned());
        }
    }
    let acquire = &doc["paths"]["/v1/locks/{name}/leases"]["post"]["requestBody"];
    assert_eq!(acquire["required"], false, "{acquire}");
    assert_eq!(
        acquire["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AcquireBody"
    );
    for id in [
        "createKey",
        "listKeys",
        "rotateKey",
        "revokeKey",
        "readAuditLog",
    ] {
        assert!(ids.iter().any(|i| i == id), "{id} in {ids:?}");
    }
    let watch = &doc["paths"]["/v1/locks/{name}/leases/{lease_id}/watch"]["get"]["responses"]["200"]
        ["content"]["text/event-stream"]["schema"]["$ref"];
    assert_eq!(watch, "#/components/schemas/LostEvent");
    let events = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"]["$ref"];
    assert_eq!(events, "#/components/schemas/LockEventMessage");

    let v30 = app.get("/openapi-3.0.json").await.body;
    assert_eq!(v30["openapi"], "3.0.3");
    let text = v30.to_string();
    assert!(!text.contains("\"null\""), "no null types in 3.0");
    assert_eq!(
        v30["paths"].as_object().map(|p| p.len()),
        doc["paths"].as_object().map(|p| p.len())
    );
    let holder = &v30["components"]["schemas"]["AcquireBody"]["properties"]["holder"];
    assert_eq!(holder["nullable"], true, "{holder}");
    assert_eq!(holder["type"], "string", "{holder}");
}

#[tokio::test]
async fn an_operators_reason_is_bounded_in_the_document_as_the_server_bounds_it() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await;
    let reason = &doc.body["components"]["schemas"]["RevokeBody"]["properties"]["reason"];
    assert_eq!(reason["maxLength"], 500, "--max-reason-chars: {reason}");
    let pattern = reason["pattern"].as_str().expect("a pattern");
    assert!(pattern.contains(r"[^\x00-\x1F\x7F-\x9F]*"), "{pattern}");
}
