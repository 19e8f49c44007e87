//! No credential on any page, log, metric or error (issue 59): RedLock nodes reached with
//! passwords (in a Unix socket URL's `pass`, in a TCP URL's user info) run a real server
//! whose every surface is read for the planted secrets: its logs (a node that does not
//! answer yet is warned of, by URL), the dashboard's pages, the API's answers (the lock with
//! its nodes, the Redis status, readiness, metrics, the document), and the refusal of a
//! configuration that names a node twice.

use std::time::Duration;

use serde_json::json;

use crate::helpers::RedisServer;
use crate::helpers::serve::{Serve, http_client, private_dir, serve_command};

const ADMIN: &str = "secrets-test-admin-token-0123456789";

async fn require_password(node: &RedisServer, password: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query_async(&mut node.conn().await)
        .await
        .expect("CONFIG SET requirepass");
}

#[tokio::test]
async fn no_planted_secret_shows_on_any_surface() {
    let secrets = [
        "planted-secret-one",
        "planted-secret-two",
        "planted-secret-3",
    ];
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for (node, secret) in nodes.iter().zip(secrets) {
        require_password(node, secret).await;
    }
    let urls = [
        format!("{}?pass={}", nodes[0].url(), secrets[0]),
        format!("{}?db=0&pass={}", nodes[1].url(), secrets[1]),
        // A node that does not answer yet (warned of at start, by URL).
        format!("redis://:{}@127.0.0.1:1/", secrets[2]),
    ];
    let dir = private_dir();
    let serve = Serve::start_with(
        dir.path(),
        &["--redlock-nodes", &urls.join(","), "--admin-token", ADMIN],
    );
    let http = http_client();
    let granted = http
        .post(serve.url("/v1/locks/jobs/leases"))
        .json(&json!({"kind": "redlock", "ttl_ms": 30_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(granted.status(), 201);
    let mut seen = String::new();
    for path in [
        "/",
        "/locks/jobs",
        "/redis",
        "/events",
        "/v1/locks/jobs",
        "/v1/admin/redis",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        let body = http
            .get(serve.url(path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("text");
        seen.push_str(&format!("\n--- {path}\n{body}"));
    }
    // The start-up warnings come within the first seconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    seen.push_str(&serve.log.lock().expect("log").clone());
    assert!(
        seen.contains("127.0.0.1:1"),
        "the unanswering node is named somewhere (the check reads what it should)"
    );
    // A node named twice is refused, and the refusal names it without its secret.
    let refused = serve_command(private_dir().path())
        .args(["--redlock-nodes", &format!("{0},{0},{1}", urls[0], urls[1])])
        .output()
        .expect("serve");
    assert!(!refused.status.success());
    seen.push_str(&String::from_utf8_lossy(&refused.stderr));
    for secret in secrets {
        assert!(!seen.contains(secret), "{secret} shown:\n{seen}");
    }
}
