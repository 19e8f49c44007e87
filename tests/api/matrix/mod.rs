//! The authorisation matrix: every route of the router (the API's, read from the OpenAPI
//! document and the router itself, and the dashboard's) × every kind of caller → the status
//! it must get. The role each API route needs comes from its `api_key` scope in the document;
//! a route with neither a scope nor a place in the public list, or without a probe below,
//! fails the test, so a new route cannot be forgotten.

mod elections;
mod fixture;
pub(crate) mod kinds;
mod probes;
mod revocations;
mod routes;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use self::fixture::fixture;
use self::probes::{Probe, probe};
use self::routes::{EXTRA_ROUTES, check_extra_routes_cover_the_router, documented_routes};
use crate::helpers::{TestApp, spawn_app};

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
    /// Dashboard forms: a signed-in session (covered in dashboard/session.rs), never a header key.
    Session,
}

/// One caller's view of the app, and what it is.
struct Caller {
    col: Col,
    view: TestApp,
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

    let (_, owner) = app
        .create_key(key(json!(["client"]), "a", json!(["*"]), "owner"))
        .await;
    let owner = app.with_key(&owner);
    let mut callers = Vec::new();
    for col in COLS {
        let secret = secret_of(&app, col).await;
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
            // A multilease names its locks in its body (or its record).
            let named = template.contains("{name}") || template.starts_with("/v1/multileases");
            let want = expected(caller.col, *need, named, &probe);
            let response = probe.request.send().await.expect("request");
            let got = response.status().as_u16();
            table
                .entry((method.clone(), template.clone()))
                .or_default()
                .push(got);
            if got != want {
                wrong.push(format!(
                    "{method} {template} as {:?}: {got}, expected {want} ({})",
                    caller.col,
                    body_start(response).await
                ));
            }
        }
    }
    report(&table, n, &wrong);
}

/// A key's body: its roles in `tenant`, limited to names matching `patterns`.
fn key(roles: Value, tenant: &str, patterns: Value, name: &str) -> Value {
    json!({"name": name, "tenant": tenant, "roles": roles, "patterns": patterns})
}

/// The credential a caller of `col` sends (a key made for it), if any.
async fn secret_of(app: &TestApp, col: Col) -> Option<String> {
    match col {
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
    }
}

/// The first 160 characters of a wrong cell's body (none of an event stream's, never read
/// to its end).
async fn body_start(response: reqwest::Response) -> String {
    let body = if response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
    {
        String::new()
    } else {
        response.text().await.unwrap_or_default()
    };
    body.chars().take(160).collect()
}

/// Prints the statuses each route answered every column, and fails with the wrong cells.
fn report(table: &BTreeMap<(String, String), Vec<u16>>, n: usize, wrong: &[String]) {
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
