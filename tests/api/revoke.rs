//! Cooperative revocation (issue 56): `POST /v1/admin/{locks|semaphores|elections}/{name}/
//! revoke` asks the holder to let go within a grace. Honoured, it is an ordinary release;
//! ignored, the lease is force-released at the deadline and its holder told `lost` with
//! reason `revoked`; meanwhile heartbeats extend it no further than the deadline. Each step
//! is in the history and the audit log.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::dashboard::elections::stand;
use crate::helpers::{next_event, spawn_app};

const SOON: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_revocation_honoured_is_an_ordinary_release() {
    let app = spawn_app().await;
    let lease = app
        .lease("deploy", json!({"ttl_ms": 60_000, "holder": "worker-1"}))
        .await;
    let mut watch = app.watch(&lease).await;
    let mut events = app.events().await;
    let asked = app
        .admin(
            Method::POST,
            "/v1/admin/locks/deploy/revoke",
            Some(json!({"grace_ms": 5000, "reason": "deploy v2"})),
        )
        .await;
    asked.assert_status(200);
    assert_eq!(asked.body["lock"], "deploy");
    let revoked = &asked.body["leases"][0];
    assert_eq!(revoked["lease_id"], lease.id.as_str());
    assert_eq!(revoked["holder"], "worker-1");
    assert_eq!(revoked["again"], false);
    assert_eq!(revoked["revocation"]["reason"], "deploy v2");
    assert_eq!(revoked["revocation"]["requested_by"], "admin token");

    let signal = watch.told("revocation_requested").await;
    assert_eq!(signal["revocation"]["reason"], "deploy v2");
    assert_eq!(
        signal["revocation"]["deadline"],
        revoked["revocation"]["deadline"]
    );
    // A heartbeat now extends the lease no further than the deadline, and says why.
    let beat = app.heartbeat(&lease, json!({})).await;
    beat.assert_status(200);
    assert!(beat.u64("ttl_ms") <= 5000, "{}", beat.body);
    assert_eq!(
        beat.body["revocation"]["reason"], "deploy v2",
        "{}",
        beat.body
    );
    // Asked again: the first deadline stands.
    let again = app
        .admin(
            Method::POST,
            "/v1/admin/locks/deploy/revoke",
            Some(json!({"grace_ms": 60_000, "reason": "later"})),
        )
        .await;
    again.assert_status(200);
    assert_eq!(again.body["leases"][0]["again"], true);
    assert_eq!(
        again.body["leases"][0]["revocation"]["deadline"],
        revoked["revocation"]["deadline"]
    );
    app.release(&lease, true).await.assert_status(200);
    assert_eq!(watch.told("lost").await["reason"], "released");
    // The request is a live event (and in the lock's history); the audit log has it too.
    let event = next_event(&mut events, "revocation_requested").await;
    assert_eq!(event["lock"], "deploy");
    assert_eq!(event["reason"], "deploy v2");
    assert_eq!(event["lease_id"], lease.id.as_str());
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"revoke"), "{actions:?}");
}

#[tokio::test]
async fn a_revocation_ignored_ends_the_lease_at_its_deadline_as_revoked() {
    let app = spawn_app().await;
    let lease = app.lease("stuck", json!({"ttl_ms": 60_000})).await;
    let mut watch = app.watch(&lease).await;
    let asked_at = Instant::now();
    app.admin(
        Method::POST,
        "/v1/admin/locks/stuck/revoke",
        Some(json!({"grace_ms": 700, "reason": "stuck job"})),
    )
    .await
    .assert_status(200);
    watch.told("revocation_requested").await;
    let lost = watch.told("lost").await;
    let ended = asked_at.elapsed();
    assert_eq!(lost["reason"], "revoked", "{lost}");
    assert!(
        ended >= Duration::from_millis(650),
        "ended early: {ended:?}"
    );
    println!("revocation ignored: lost after {ended:?} (grace 700 ms)");
    let beat = app.heartbeat(&lease, json!({})).await;
    beat.assert_problem(410, "lease_lost");
    assert_eq!(
        beat.body["reason"], "revoked",
        "as the watch said: {}",
        beat.body
    );
    // A watch opened now says the same.
    let again = app.watch_with(&lease, &lease.token, "", Some("2")).await;
    let Err(reply) = again else {
        panic!("a watch of a revoked lease opened")
    };
    reply.assert_problem(410, "lease_lost");
    assert_eq!(reply.body["reason"], "revoked");
    // The name is free for the next holder.
    app.lease("stuck", json!({})).await;
    // Both steps are audited.
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"revoke_enforced"), "{actions:?}");
}

#[tokio::test]
async fn a_semaphore_lease_and_an_election_leader_can_be_revoked_too() {
    let app = spawn_app().await;
    let permits = app
        .permits("pool", json!({"limit": 3, "permits": 2, "ttl_ms": 60_000}))
        .await;
    let mut watch = app.watch(&permits).await;
    app.admin(
        Method::POST,
        "/v1/admin/semaphores/pool/revoke",
        Some(json!({"grace_ms": 300})),
    )
    .await
    .assert_status(200);
    watch.told("revocation_requested").await;
    assert_eq!(watch.told("lost").await["reason"], "revoked");

    let leader = stand(&app, "scheduler", "node-a", "10.0.0.1:8080").await;
    let asked = app
        .admin(
            Method::POST,
            "/v1/admin/elections/scheduler/revoke",
            Some(json!({"grace_ms": 300, "reason": "maintenance"})),
        )
        .await;
    asked.assert_status(200);
    assert_eq!(asked.body["lock"], "election/scheduler");
    assert_eq!(asked.body["leases"][0]["lease_id"], leader.id.as_str());
}

#[tokio::test]
async fn what_cannot_be_revoked_says_why() {
    let app = spawn_app().await;
    app.admin(
        Method::POST,
        "/v1/admin/locks/free/revoke",
        Some(json!({"grace_ms": 1000})),
    )
    .await
    .assert_problem(404, "lock_not_found");
    let lease = app.lease("held", json!({"ttl_ms": 60_000})).await;
    app.admin(
        Method::POST,
        "/v1/admin/locks/held/revoke",
        Some(json!({"grace_ms": 3_600_001})),
    )
    .await
    .assert_problem(422, "invalid_body");
    app.admin(
        Method::POST,
        "/v1/admin/locks/held/revoke",
        Some(json!({"grace_ms": 1000, "lease_id": "0190f0b2-0000-7000-8000-000000000000"})),
    )
    .await
    .assert_problem(404, "lease_not_found");
    app.admin(Method::POST, "/v1/admin/locks/held/revoke", Some(json!({})))
        .await
        .assert_problem(422, "invalid_body");
    // A reason is one line (its refusal names the body, not the query) of at most
    // --max-reason-chars characters; white space around it is trimmed.
    let revoke = |reason: String| {
        app.admin(
            Method::POST,
            "/v1/admin/locks/held/revoke",
            Some(json!({"grace_ms": 60_000, "reason": reason})),
        )
    };
    revoke("one\ntwo".to_owned())
        .await
        .assert_problem(422, "invalid_body");
    revoke("x".repeat(501))
        .await
        .assert_problem(422, "reason_too_long");
    let anon = app
        .send(
            app.http
                .post(app.url("/v1/admin/locks/held/revoke"))
                .json(&json!({"grace_ms": 1000})),
        )
        .await;
    anon.assert_problem(401, "admin_token_required");
    let asked = revoke(format!("  {}\n", "x".repeat(500))).await;
    asked.assert_status(200);
    assert_eq!(
        asked.body["leases"][0]["revocation"]["reason"],
        "x".repeat(500)
    );
    app.release(&lease, true).await.assert_status(200);
}

#[tokio::test]
async fn a_multilease_holder_is_told_of_a_members_revocation() {
    let app = spawn_app().await;
    let asked = app
        .send(
            app.http
                .post(app.url("/v1/multileases"))
                .json(&json!({"locks": [{"name": "ma"}, {"name": "mb"}], "ttl_ms": 60_000})),
        )
        .await;
    asked.assert_status(201);
    let (path, token) = (
        format!("/v1/multileases/{}", asked.str("lease_id")),
        asked.str("token"),
    );
    let response = app
        .http
        .get(app.url(&format!("{path}/watch")))
        .bearer_auth(&token)
        .send()
        .await
        .expect("watch");
    assert_eq!(response.status(), 200);
    let mut events = {
        use eventsource_stream::Eventsource as _;
        use futures_util::StreamExt as _;
        response.bytes_stream().eventsource().boxed()
    };
    app.admin(
        Method::POST,
        "/v1/admin/locks/mb/revoke",
        Some(json!({"grace_ms": 500, "reason": "rebalance"})),
    )
    .await
    .assert_status(200);
    let mut seen = Vec::new();
    let lost = tokio::time::timeout(SOON, async {
        use futures_util::StreamExt as _;
        loop {
            let event = events.next().await.expect("stream open").expect("event");
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            if event.event == "lost" {
                return data;
            }
            seen.push((event.event, data));
        }
    })
    .await
    .expect("lost");
    let (kind, data) = seen
        .iter()
        .find(|(kind, _)| kind == "revocation_requested")
        .expect("the revocation was told before the end");
    assert_eq!(kind, "revocation_requested");
    assert_eq!(data["lock"], "mb");
    assert_eq!(data["revocation"]["reason"], "rebalance");
    assert_eq!(lost["lock"], "mb");
    assert_eq!(lost["reason"], "revoked");
}

/// Without a watch (a proxy that cuts server-sent events), the multilease's heartbeat tells
/// the holder which member is asked for, as a lease's heartbeat does.
#[tokio::test]
async fn a_multilease_heartbeat_names_the_member_asked_for() {
    let app = spawn_app().await;
    let asked = app
        .send(
            app.http
                .post(app.url("/v1/multileases"))
                .json(&json!({"locks": [{"name": "ha"}, {"name": "hb"}], "ttl_ms": 60_000})),
        )
        .await;
    asked.assert_status(201);
    let path = format!("/v1/multileases/{}/heartbeat", asked.str("lease_id"));
    let beat = || {
        app.http
            .post(app.url(&path))
            .bearer_auth(asked.str("token"))
    };
    let before = app.send(beat()).await;
    before.assert_status(200);
    assert!(before.body["members"][1].get("revocation").is_none());
    app.admin(
        Method::POST,
        "/v1/admin/locks/hb/revoke",
        Some(json!({"grace_ms": 5_000, "reason": "rebalance"})),
    )
    .await
    .assert_status(200);
    let after = app.send(beat()).await;
    after.assert_status(200);
    let members = after.body["members"].as_array().expect("members");
    assert!(members[0].get("revocation").is_none(), "{members:?}");
    assert_eq!(members[1]["lock"], "hb");
    assert_eq!(members[1]["revocation"]["reason"], "rebalance");
    assert!(members[1]["revocation"]["deadline"].is_string());
    // Extended no further than the deadline: the multilease's answer says so.
    assert!(after.u64("ttl_ms") <= 5_000, "{}", after.body);
    assert_eq!(
        after.body["expires_at"],
        members[1]["revocation"]["deadline"]
    );
}
