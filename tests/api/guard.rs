//! Requests a browser makes for a page of another site are refused (and curl's are not): an
//! `Origin` that is not this server, `Sec-Fetch-Site: cross-site`/`same-site`, a `Host`
//! outside the allowed names (DNS rebinding). One test drives real Chromium: a page on
//! another origin tries every request a browser sends without asking (no CORS preflight),
//! and the lock stays free.

use std::time::Duration;

use serde_json::json;

use crate::helpers::browser::{Driver, browser, skip_without_browser};
use crate::helpers::{Reply, spawn_app};

#[tokio::test]
async fn requests_from_pages_of_other_sites_are_refused() {
    let app = spawn_app().await;
    let post = |lock: &str, headers: &[(&str, &str)]| {
        let mut req = app
            .http
            .post(app.url(&format!("/v1/locks/{lock}/leases")))
            // A "simple" content type: a browser sends it cross-site without a preflight.
            .header("content-type", "application/x-www-form-urlencoded")
            .body("{}");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req
    };
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "no-cors"),
        ],
        // Another port of the same host is the same site, not the same origin.
        vec![("sec-fetch-site", "same-site"), ("sec-fetch-mode", "cors")],
    ] {
        let reply = app.send(post("target", &headers)).await;
        reply.assert_problem(403, "cross_origin");
    }
    app.inspect_lock("target")
        .await
        .assert_problem(404, "lock_not_found");
    // Reading is refused too, and so is a dashboard form.
    app.send(
        app.http
            .get(app.url("/v1/locks/target"))
            .header("origin", "http://evil.example"),
    )
    .await
    .assert_problem(403, "cross_origin");

    // A page of this server, and programs (no Origin at all), pass.
    let own = app.url("");
    let origin = own.trim_end_matches('/');
    app.send(post(
        "own-page",
        &[("origin", origin), ("sec-fetch-site", "same-origin")],
    ))
    .await
    .assert_status(201);
    app.send(post("curl", &[])).await.assert_status(201);
    // A link followed from elsewhere (a top-level navigation) opens the dashboard.
    let page = app
        .http
        .get(app.url("/"))
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "navigate")
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
}

#[tokio::test]
async fn a_host_outside_the_allowed_names_is_refused() {
    let app = spawn_app().await;
    // A DNS-rebound page: same origin to the browser, but its Host names the attacker's domain.
    let rebound = app
        .send(
            app.http
                .post(app.url("/v1/locks/target/leases"))
                .header("host", "attacker.example:8080")
                .json(&json!({})),
        )
        .await;
    rebound.assert_problem(403, "host_not_allowed");
    for host in ["localhost", "127.0.0.1:1", "[::1]:8080"] {
        let reply = app
            .send(app.http.get(app.url("/v1/locks/x")).header("host", host))
            .await;
        reply.assert_problem(404, "lock_not_found");
    }
    // Health checks answer whatever name a load balancer uses.
    let health = Reply::read(
        app.http
            .get(app.url("/healthz"))
            .header("host", "10.0.0.7")
            .send()
            .await
            .expect("healthz"),
    )
    .await;
    health.assert_status(200);
}

#[tokio::test]
async fn a_page_on_another_origin_cannot_take_a_lock_in_chromium() {
    if skip_without_browser() {
        return;
    }
    let app = spawn_app().await;
    // The attacker's page, served from another origin (another port on loopback): a form post
    // (urlencoded, like curl -d), a text/plain fetch, and a no-cors fetch, all "simple"
    // requests a browser sends without a preflight.
    let target = app.url("/v1/locks/stolen/leases");
    let page = format!(
        r#"<!doctype html><html><body>
<form id="f" method="post" action="{target}" enctype="application/x-www-form-urlencoded" target="sink">
  <input name='{{"holder":"evil","x":"' value='"}}'></form>
<iframe name="sink"></iframe>
<script>
  fetch("{target}", {{method: "POST", mode: "no-cors", headers: {{"content-type": "text/plain"}}, body: "{{}}"}})
    .finally(() => fetch("{target}", {{method: "POST", mode: "no-cors", body: "{{}}"}}))
    .finally(() => {{ document.getElementById("f").submit(); document.title = "sent"; }});
</script></body></html>"#
    );
    let attacker = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let attacker_url = format!(
        "http://localhost:{}/",
        attacker.local_addr().expect("addr").port()
    );
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        loop {
            let Ok((mut stream, _)) = attacker.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let client = browser(&driver, profile.path()).await;
    client
        .goto(&attacker_url)
        .await
        .expect("open the attacker's page");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client.title().await.unwrap_or_default() != "sent" {
        assert!(
            std::time::Instant::now() < deadline,
            "the page never sent its requests"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give the form post (a navigation of the iframe) its moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = client.close().await;
    server.abort();
    app.inspect_lock("stolen")
        .await
        .assert_problem(404, "lock_not_found");
}
