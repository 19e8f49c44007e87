//! The Rust client held to the server's tables and to `clients/PROTOCOL.md`: its
//! [`ProblemCode`] is exactly the codes the API can answer (read from the served OpenAPI
//! document, which the server writes from its problem table), every operation of that
//! document is a call of it or is not offered for a reason (`clients/parity.json`), and its
//! multileases, lock-delays, kept leases (`keeper`), elections (`elections`) and the fields the server added
//! (`wire`) behave as the protocol says, through the client, against a real server. (The
//! Python, Go and TypeScript clients' parity tests read the same document.)

mod elections;
mod keeper;
mod wire;

use std::time::Duration;

use leasehold::client::{
    AcquireOptions, Acquired, Client, ClientError, ClientOptions, KeptLease, LockKind, ProblemCode,
    Resource, Term,
};
use leasehold::problem::ProblemKind;
use serde_json::Value;

use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};

fn client(app: &TestApp) -> Client {
    Client::new(app.url("").parse().expect("url")).expect("client")
}

/// A client that sends the admin token as its key (as an admin API key would be sent).
fn admin_client(app: &TestApp) -> Client {
    let options = ClientOptions {
        api_key: Some(ADMIN_TOKEN.parse().expect("a key")),
        ..ClientOptions::default()
    };
    Client::with_options(app.url("").parse().expect("url"), &options).expect("client")
}

fn problem(result: Result<impl std::fmt::Debug, ClientError>) -> leasehold::client::Problem {
    match result {
        Err(ClientError::Problem(p)) => p,
        other => panic!("expected a problem, got {other:?}"),
    }
}

/// The calls `clients/parity.json` may name for the Rust client, as `Type.method`: the
/// compiler checks that each exists.
macro_rules! calls {
    ($($ty:ident . $method:ident),+ $(,)?) => {{
        $(let _ = $ty::$method;)+
        [$(concat!(stringify!($ty), ".", stringify!($method))),+]
    }};
}

#[tokio::test]
async fn every_operation_of_the_document_is_a_call_of_the_rust_client_or_not_offered_for_a_reason()
{
    let calls = calls![
        Client.acquire,
        Client.poll,
        Client.leave,
        Client.heartbeat,
        Client.release,
        Client.watch,
        Client.lease_status,
        Client.lock_status,
        Client.list,
        Client.check_fence,
        Client.acquire_permits,
        Client.semaphore_status,
        Client.acquire_multi,
        Client.multilease_status,
        Client.force_release,
        Client.revoke,
        Client.create_key,
        Client.list_keys,
        Client.rotate_key,
        Client.revoke_key,
        Client.list_key_leases,
        Client.keep,
        KeptLease.release,
        Client.campaign,
        Client.stand,
        Client.poll_candidate,
        Client.resign,
        Client.proclaim,
        Client.election,
        Client.leader,
        Client.check_term,
        Client.observe,
        Client.end_term,
        Term.proclaim,
        Term.resign,
    ];
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await;
    doc.assert_status(200);
    let mut served: Vec<&str> = doc.body["paths"]
        .as_object()
        .expect("paths")
        .values()
        .flat_map(|item| item.as_object().expect("operations").values())
        .filter_map(|op| op["operationId"].as_str())
        .collect();
    served.sort_unstable();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/parity.json");
    let parity: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("parity.json")).expect("json");
    let operations = parity["operations"].as_object().expect("operations");
    let mut listed: Vec<&str> = operations.keys().map(String::as_str).collect();
    listed.sort_unstable();
    assert_eq!(
        listed, served,
        "clients/parity.json lists the server's operations"
    );
    for (operation, by) in operations {
        match &by["rust"] {
            Value::String(call) => assert!(
                calls.contains(&call.as_str()),
                "{operation}: the Rust client has no {call}"
            ),
            Value::Null => assert!(
                by["why_not"].as_str().is_some_and(|why| !why.is_empty()),
                "{operation}: not offered by the Rust client, and parity.json says not why"
            ),
            other => panic!("{operation}: {other}"),
        }
    }
}

#[tokio::test]
async fn the_document_lists_every_code_the_api_answers_and_the_rust_client_types_them_all() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await;
    doc.assert_status(200);
    let listed: Vec<String> =
        doc.body["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
            .as_array()
            .expect("the Problem schema's code is an enum")
            .iter()
            .filter_map(|code| code.as_str().map(str::to_owned))
            .collect();
    let table: Vec<String> = ProblemKind::ALL
        .iter()
        .filter(|kind| kind.answered_by_api())
        .map(|kind| kind.code().to_owned())
        .collect();
    assert_eq!(
        listed, table,
        "the document's codes are the problem table's"
    );
    let typed: Vec<String> = ProblemCode::ALL
        .iter()
        .map(|code| code.as_str().to_owned())
        .collect();
    let missing: Vec<&String> = listed.iter().filter(|c| !typed.contains(c)).collect();
    let unknown: Vec<&String> = typed.iter().filter(|c| !listed.contains(c)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the Rust client lacks {missing:?} and knows codes the server never answers: {unknown:?}"
    );
}

#[tokio::test]
async fn a_multilease_through_the_rust_client_is_all_or_nothing_and_lost_with_a_member() {
    let app = spawn_app().await;
    let client = client(&app);
    let options = AcquireOptions {
        ttl: Some(Duration::from_secs(30)),
        ..AcquireOptions::default()
    };
    // All or nothing: "m2" is held (as the write lock the multilease asks for), so neither
    // lock is taken.
    let write = AcquireOptions {
        kind: Some(LockKind::Write),
        ..options.clone()
    };
    let Acquired::Lease(other) = client.acquire("m2", &write).await.expect("m2").body else {
        panic!("queued");
    };
    let locks = [
        ("m1".to_owned(), None),
        ("m2".to_owned(), Some(LockKind::Write)),
    ];
    let refused = problem(client.acquire_multi(&locks, &options).await);
    assert_eq!(refused.kind(), Some(ProblemCode::LockHeld));
    assert_eq!(
        refused
            .member("members")
            .and_then(|m| m[0]["lock"].as_str()),
        Some("m2")
    );
    assert!(
        !app.inspect_lock("m1").await.body["held"]
            .as_bool()
            .unwrap_or(false)
    );
    client
        .release(
            Resource::Lock,
            "m2",
            other.grant.lease_id,
            &other.token,
            true,
        )
        .await
        .expect("release m2");
    // Granted: one lease, a fencing token per member.
    let multi = client
        .acquire_multi(&locks, &options)
        .await
        .expect("granted")
        .body;
    assert_eq!(multi.members.len(), 2);
    let shown = client
        .multilease_status(multi.grant.lease_id)
        .await
        .expect("inspect")
        .body;
    assert_eq!(shown.members.len(), 2);
    assert!(multi.members.iter().all(|m| m.fencing_token > 0));
    // A member force-released is the multilease lost: the watch says so, naming the member,
    // and the next heartbeat is 410 lease_lost.
    let id = multi.grant.lease_id;
    let mut watch = client
        .watch(Resource::Multilease, "", id, &multi.token)
        .await
        .expect("watch");
    app.force_release("m1", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let lost = tokio::time::timeout(Duration::from_secs(10), watch.lost())
        .await
        .expect("told within 10 s")
        .expect("a lost event");
    assert_eq!(lost.lock, "m1");
    let beat = problem(
        client
            .heartbeat(Resource::Multilease, "", id, &multi.token)
            .await,
    );
    assert_eq!(beat.kind(), Some(ProblemCode::LeaseLost));
    assert_eq!(beat.member("member").and_then(|m| m.as_str()), Some("m1"));
    assert!(
        !app.inspect_lock("m2").await.body["held"]
            .as_bool()
            .unwrap_or(false)
    );
}

#[tokio::test]
async fn a_lock_delay_through_the_rust_client_refuses_the_next_lease_with_its_own_code() {
    let app = spawn_app().await;
    let client = client(&app);
    let options = AcquireOptions {
        ttl: Some(Duration::from_millis(300)),
        lock_delay: Some(Duration::from_secs(30)),
        ..AcquireOptions::default()
    };
    let Acquired::Lease(lease) = client
        .acquire("delayed", &options)
        .await
        .expect("granted")
        .body
    else {
        panic!("queued");
    };
    // Its TTL runs out (the watch says so: no sleep guessing when), and the name is delayed.
    let mut watch = client
        .watch(
            Resource::Lock,
            "delayed",
            lease.grant.lease_id,
            &lease.token,
        )
        .await
        .expect("watch");
    let lost = watch.lost().await.expect("lost");
    assert_eq!(lost.reason, "expired");
    let refused = problem(client.acquire("delayed", &AcquireOptions::default()).await);
    assert_eq!(refused.kind(), Some(ProblemCode::LockDelay));
    assert!(
        refused
            .member("delayed_until")
            .is_some_and(|v| v.is_string())
    );
}
