//! Signing in and what a signed-in browser may do: the session cookie, force release from the
//! lock page's form (CSRF refused), hostile input escaped, a private dashboard's gate.

use serde_json::json;

use super::Browser;
use crate::helpers::{ADMIN_TOKEN, AppOptions, next_event, spawn_app, spawn_app_with};

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_without_the_token() {
    let app = spawn_app().await;
    let mut browser = Browser::new(&app);
    browser
        .get("/login")
        .await
        .assert_status(200)
        .assert_contains(r#"type="password""#);

    browser
        .sign_in("wrong-token-0123456789")
        .await
        .assert_status(401)
        .assert_contains("Wrong admin token");
    assert!(browser.cookie.is_none());

    // A sign-in form posted from another site is refused.
    let forged = browser
        .post_form(
            "/login",
            &[("token", ADMIN_TOKEN)],
            Some("http://evil.example"),
        )
        .await;
    forged.assert_status(403);
    assert!(forged.header("set-cookie").is_none());

    let page = browser.sign_in(ADMIN_TOKEN).await;
    page.assert_status(303);
    let set = page.header("set-cookie").expect("a session cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(ADMIN_TOKEN), "{set}");

    let overview = browser.get("/").await;
    overview.assert_contains("Sign out");
    let csrf = overview.csrf();
    let origin = browser.origin();
    // Signing out needs the CSRF token too.
    browser
        .post_form("/logout", &[], Some(&origin))
        .await
        .assert_status(403);
    let out = browser
        .post_form("/logout", &[("csrf", &csrf)], Some(&origin))
        .await;
    out.assert_status(303);
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
}

#[tokio::test]
async fn force_release_from_the_lock_page() {
    let app = spawn_app().await;
    let mut events = app.events().await;
    let lease = app
        .lease("stuck", json!({"holder": "crashed-job", "ttl_ms": 600_000}))
        .await;
    let waiter = app.spawn_waiter("stuck", 20_000);
    app.wait_for_waiters(1).await;

    let mut browser = Browser::new(&app);
    let origin = browser.origin();
    refused_while_signed_out(&browser, &origin).await;

    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let page = browser.get("/locks/stuck").await;
    page.assert_contains(r#"id="force-release""#);
    let csrf = page.csrf();
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", "job <crashed>"),
        ("confirm", "yes"),
    ];
    refused_when_signed_in(&browser, &origin, &csrf, &form).await;
    app.heartbeat(&lease, json!({})).await.assert_status(200);

    let done = browser
        .post_form("/locks/stuck/force-release", &form, Some(&origin))
        .await;
    done.assert_status(303);
    assert_eq!(done.header("location"), Some("/locks/stuck?released=1"));

    // The waiter got the lock, the old lease is gone (410), and the event says who and why.
    waiter.await.expect("waiter").assert_status(201);
    app.heartbeat(&lease, json!({}))
        .await
        .assert_problem(410, "lease_lost");
    let event = next_event(&mut events, "force_released").await;
    assert_eq!(event["by"], "dashboard admin");
    assert_eq!(event["reason"], "job <crashed>");
    assert_eq!(event["lease_ids"], json!([lease.id]));

    let page = browser.get("/locks/stuck?released=1").await;
    page.assert_contains("Force-released: removed 1 holder.")
        .assert_contains("by dashboard admin; reason: job &#60;crashed&#62;; removed ")
        .assert_contains(&lease.id);
}

/// Not signed in: the lock page has no form, but a sign-in link; the POST is refused.
async fn refused_while_signed_out(browser: &Browser, origin: &str) {
    browser
        .get("/locks/stuck")
        .await
        .assert_lacks(r#"id="force-release""#)
        .assert_contains("/login?next=/locks/stuck");
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("confirm", "yes")],
            Some(origin),
        )
        .await
        .assert_status(401);
}

/// Signed in, what the force release still refuses: a GET (it changes nothing), `form` with
/// no Origin or a foreign one, a wrong CSRF token, no confirmation, and a reason too long.
async fn refused_when_signed_in(
    browser: &Browser,
    origin: &str,
    csrf: &str,
    form: &[(&str, &str)],
) {
    browser
        .get("/locks/stuck/force-release")
        .await
        .assert_status(405);
    browser
        .post_form("/locks/stuck/force-release", form, None)
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            form,
            Some("http://evil.example"),
        )
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("csrf", "00ff"), ("reason", "x"), ("confirm", "yes")],
            Some(origin),
        )
        .await
        .assert_status(403);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("csrf", csrf), ("reason", "x")],
            Some(origin),
        )
        .await
        .assert_status(400);
    // The API's reason policy, one owner (`operator`): too long is 422 here too (it used to
    // be cut silently), told as a page with the problem's title.
    let long = "x".repeat(501);
    browser
        .post_form(
            "/locks/stuck/force-release",
            &[("csrf", csrf), ("reason", &long), ("confirm", "yes")],
            Some(origin),
        )
        .await
        .assert_status(422)
        .assert_contains("The reason is too long")
        .assert_contains("at most 500 characters");
}

#[tokio::test]
async fn hostile_holder_metadata_and_reason_are_escaped() {
    let app = spawn_app().await;
    let hostile = "<script>alert(1)</script>";
    let lease = app
        .lease(
            "target",
            json!({
                "holder": hostile,
                "metadata": {"note": "</code><img src=x onerror=alert(2)>", "<b>": "\"'&"}
            }),
        )
        .await;
    let mut browser = Browser::new(&app);
    for path in ["/", "/locks/target"] {
        let page = browser.get(path).await;
        page.assert_status(200)
            .assert_lacks("<script>alert")
            .assert_lacks("<img src=x")
            .assert_lacks("<b>")
            .assert_contains("&#60;script&#62;alert(1)&#60;/script&#62;");
    }
    browser.sign_in(ADMIN_TOKEN).await;
    let csrf = browser.get("/locks/target").await.csrf();
    let origin = browser.origin();
    browser
        .post_form(
            "/locks/target/force-release",
            &[
                ("csrf", &csrf),
                ("reason", "<img src=y onerror=alert(3)>"),
                ("confirm", "yes"),
            ],
            Some(&origin),
        )
        .await
        .assert_status(303);
    let page = browser.get("/locks/target").await;
    page.assert_lacks("<img src=y").assert_contains(&lease.id);
}

#[tokio::test]
async fn a_private_dashboard_needs_a_session_or_the_admin_token() {
    let app = spawn_app_with(AppOptions {
        dashboard_private: true,
        ..AppOptions::default()
    })
    .await;
    let mut browser = Browser::new(&app);
    let page = browser.get("/locks/x").await;
    page.assert_status(303);
    assert_eq!(page.header("location"), Some("/login?next=/locks/x"));
    app.get("/v1/events")
        .await
        .assert_problem(401, "admin_token_required");
    let sse = app
        .http
        .get(app.url("/v1/events"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(sse.status(), 200);
    browser.sign_in(ADMIN_TOKEN).await;
    browser.get("/").await.assert_status(200);
}

#[tokio::test]
async fn ask_to_release_from_the_lock_page_shows_the_pending_revocation() {
    let app = spawn_app().await;
    let lease = app
        .lease("slow-job", json!({"holder": "nightly", "ttl_ms": 600_000}))
        .await;
    let mut watch = app.watch(&lease).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(ADMIN_TOKEN).await.assert_status(303);
    let page = browser.get("/locks/slow-job").await;
    page.assert_contains(r#"id="revoke""#);
    let csrf = page.csrf();
    let origin = browser.origin();
    // Without the confirmation: refused, nothing asked.
    browser
        .post_form(
            "/locks/slow-job/revoke",
            &[("csrf", csrf.as_str()), ("grace_s", "60")],
            Some(&origin),
        )
        .await
        .assert_status(400);
    let asked = browser
        .post_form(
            "/locks/slow-job/revoke",
            &[
                ("csrf", csrf.as_str()),
                ("grace_s", "60"),
                ("reason", "disk <full>"),
                ("confirm", "yes"),
            ],
            Some(&origin),
        )
        .await;
    asked.assert_status(303);
    let event = watch
        .until("revocation_requested", std::time::Duration::from_secs(10))
        .await
        .expect("the holder is told");
    assert!(event.data.contains("disk <full>"), "{}", event.data);
    browser
        .get("/locks/slow-job?revoked=1")
        .await
        .assert_contains("Asked the holder to release")
        .assert_contains("asked to release by")
        .assert_contains("disk &#60;full&#62;");
    app.release(&lease, true).await.assert_status(200);
}
