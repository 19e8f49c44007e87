//! Targeted eviction: an admin removes one lease (a dead reader among three, one trainer's
//! permits) and the others keep theirs; recorded like a force release. Also a force release
//! of a semaphore's name on the lock route.

use std::time::Duration;

use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::json;

use crate::helpers::browser::{Driver, browser, sign_in, skip_without_browser, wait_for};
use crate::helpers::{next_event, spawn_app};

#[tokio::test]
async fn evicting_one_reader_leaves_the_others_and_is_recorded() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let mut readers = Vec::new();
    for name in ["r1", "r2", "r3"] {
        readers.push(
            app.lease(
                "doc",
                json!({"kind": "read", "holder": name, "ttl_ms": 60_000}),
            )
            .await,
        );
    }
    let path = format!("/v1/admin/locks/doc/leases/{}?reason=dead", readers[1].id);
    let reply = app.admin(Method::DELETE, &path, None).await;
    reply.assert_status(200);
    assert_eq!(reply.body["removed"][0]["lease_id"], readers[1].id);
    assert_eq!(reply.body["removed"][0]["holder"], "r2");
    app.heartbeat(&readers[1], json!({}))
        .await
        .assert_problem(410, "lease_lost");
    for kept in [&readers[0], &readers[2]] {
        app.heartbeat(kept, json!({})).await.assert_status(200);
    }
    let lock = app.inspect_lock("doc").await;
    assert_eq!(lock.body["holders"].as_array().map(Vec::len), Some(2));
    let event = next_event(&mut events, "force_released").await;
    assert_eq!(event["scope"], "lease");
    assert_eq!(event["by"], "admin token");
    assert_eq!(event["reason"], "dead");
    assert_eq!(event["lease_ids"], json!([readers[1].id]));
    assert_eq!(event["holders"][0]["holder"], "r2");
    // The audit log has it too, as an eviction, by whom and why.
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    audit.assert_status(200);
    let entry = &audit.body["entries"][0];
    assert_eq!(entry["action"], "evict");
    assert_eq!(entry["by"], "admin token");
    assert_eq!(entry["target"], "doc");
    assert_eq!(entry["reason"], "dead");
    // Again: that lease holds nothing now.
    app.admin(Method::DELETE, &path, None)
        .await
        .assert_problem(404, "lease_not_found");
    // Without the admin token: refused.
    let anon = app.send(app.http.delete(app.url(&path))).await;
    anon.assert_problem(401, "admin_token_required");
}

#[tokio::test]
async fn evicting_one_semaphore_lease_returns_its_permits_only() {
    let app = spawn_app().await;
    let a = app
        .permits(
            "gpus",
            json!({"limit": 4, "permits": 3, "holder": "trainer-1"}),
        )
        .await;
    let b = app
        .permits(
            "gpus",
            json!({"limit": 4, "permits": 1, "holder": "trainer-2"}),
        )
        .await;
    let reply = app
        .admin(
            Method::DELETE,
            &format!("/v1/admin/semaphores/gpus/leases/{}", a.id),
            None,
        )
        .await;
    reply.assert_status(200);
    let sem = app.get("/v1/semaphores/gpus").await;
    assert_eq!(sem.body["used"], 1);
    assert_eq!(sem.body["available"], 3);
    app.heartbeat(&b, json!({})).await.assert_status(200);
    app.heartbeat(&a, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    // A lock's lease is not a semaphore's.
    app.lease("jobs", json!({})).await;
    let lock_lease = app.lease("other", json!({})).await;
    app.admin(
        Method::DELETE,
        &format!("/v1/admin/semaphores/other/leases/{}", lock_lease.id),
        None,
    )
    .await
    .assert_problem(404, "lease_not_found");
}

#[tokio::test]
async fn force_release_on_the_lock_route_works_for_a_semaphore() {
    let app = spawn_app().await;
    let held = app.permits("pool", json!({"limit": 2})).await;
    let reply = app
        .admin(Method::DELETE, "/v1/admin/locks/pool", None)
        .await;
    reply.assert_status(200);
    assert_eq!(reply.body["removed"][0]["lease_id"], held.id);
    app.heartbeat(&held, json!({}))
        .await
        .assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn an_admin_evicts_one_reader_from_the_lock_page_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    let mut readers = Vec::new();
    for name in ["reader-1", "reader-2", "reader-3"] {
        readers.push(
            app.lease(
                "catalog",
                json!({"kind": "read", "holder": name, "ttl_ms": 60_000}),
            )
            .await,
        );
    }
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;
    sign_in(&client, &app, "/locks/catalog").await;
    wait_for(
        &client,
        "document.querySelector('#evict')",
        Duration::from_secs(10),
        "the evict form",
    )
    .await;
    evict_with_the_form(&client, &readers[1].id, "reader-2 is dead").await;
    wait_for(
        &client,
        "document.querySelector('.flash')",
        Duration::from_secs(10),
        "the eviction's confirmation",
    )
    .await;
    let page = client.source().await.expect("source");
    assert!(
        page.contains(&format!("Evicted lease {}", readers[1].id)),
        "flash"
    );
    assert!(
        page.contains("removed reader-2 (lease"),
        "the history names the holder"
    );
    let holders = client
        .execute(
            "return Array.from(document.querySelectorAll('table.holders tbody tr')).map(r => r.textContent);",
            vec![],
        )
        .await
        .expect("script");
    let holders = holders.to_string();
    assert!(
        holders.contains("reader-1") && holders.contains("reader-3"),
        "{holders}"
    );
    assert!(!holders.contains("reader-2"), "{holders}");
    app.heartbeat(&readers[1], json!({}))
        .await
        .assert_problem(410, "lease_lost");
    client.close().await.expect("close");
}

/// Chooses `lease_id` in the lock page's evict form, gives `reason`, ticks the confirmation
/// and submits it.
async fn evict_with_the_form(client: &Client, lease_id: &str, reason: &str) {
    client
        .execute(
            "document.querySelector('#evict select').value = arguments[0];",
            vec![json!(lease_id)],
        )
        .await
        .expect("choose the lease");
    client
        .find(Locator::Css("#evict input[name=reason]"))
        .await
        .expect("reason")
        .send_keys(reason)
        .await
        .expect("type");
    client
        .find(Locator::Css("#evict input[name=confirm]"))
        .await
        .expect("confirm")
        .click()
        .await
        .expect("tick");
    client
        .find(Locator::Css("#evict button[type=submit]"))
        .await
        .expect("evict")
        .click()
        .await
        .expect("evict");
}
