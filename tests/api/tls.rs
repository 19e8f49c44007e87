//! TLS everywhere it matters, with certificates the test makes for itself (a private CA):
//! `serve --tls-cert/--tls-key` answering curl and the CLI over https (HTTP/2 by ALPN), the
//! dashboard's cookie `Secure` and `__Host-` prefixed, and Redis over `rediss://`.

use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::server::{self, ServerConfig};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::helpers::certs::TestCerts;
use crate::helpers::children;
use crate::helpers::{ADMIN_TOKEN, AppOptions, FormFields, spawn_app_with};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// Runs `command` off the test's runtime thread (the server under test runs on it).
async fn run(mut command: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output().expect("the command runs"))
        .await
        .expect("joined")
}

async fn curl(args: &[&str]) -> std::process::Output {
    let mut command = Command::new("curl");
    command.args(["-sS", "--max-time", "10"]).args(args);
    run(command).await
}

#[tokio::test]
async fn curl_and_the_cli_speak_https_with_a_private_ca() {
    let certs = TestCerts::new();
    let app = spawn_app_with(AppOptions {
        tls: Some(certs.files()),
        ..AppOptions::default()
    })
    .await;
    let ca = certs.ca();
    let ca = ca.to_str().expect("a path");
    let base = app.url("");
    let base = base.trim_end_matches('/');
    assert!(base.starts_with("https://"));

    // curl with the CA: health, then a lease with a key made by the CLI.
    let health = curl(&["--cacert", ca, &format!("{base}/healthz")]).await;
    assert!(health.status.success(), "{health:?}");
    assert_eq!(
        String::from_utf8_lossy(&health.stdout),
        r#"{"status":"ok"}"#
    );
    let untrusted = curl(&[&format!("{base}/healthz")]).await;
    assert!(
        !untrusted.status.success(),
        "curl trusted a private CA by itself"
    );

    let mut create = Command::new(BIN);
    create
        .args([
            "keys",
            "create",
            "tls-client",
            "--role",
            "client",
            "--role",
            "reader",
        ])
        .args(["--secret-only", "--server", base, "--ca-file", ca])
        .env("LEASEHOLD_API_KEY", ADMIN_TOKEN);
    let made = run(create).await;
    assert!(made.status.success(), "{made:?}");
    let key = String::from_utf8_lossy(&made.stdout).trim().to_owned();
    assert!(key.starts_with("lhk_"), "{key}");

    let lease = curl(&[
        "--cacert",
        ca,
        "-X",
        "POST",
        "-H",
        &format!("Leasehold-Key: {key}"),
        &format!("{base}/v1/locks/over-tls/leases"),
    ])
    .await;
    assert!(lease.status.success(), "{lease:?}");
    let lease: Value = serde_json::from_slice(&lease.stdout).expect("JSON");
    assert_eq!(lease["lock"], "over-tls");

    // The CLI: status over https with the CA file, and a clear failure without it.
    let mut status = Command::new(BIN);
    status
        .args([
            "status",
            "over-tls",
            "--json",
            "--server",
            base,
            "--ca-file",
            ca,
        ])
        .env("LEASEHOLD_API_KEY", &key);
    let status = run(status).await;
    assert!(status.status.success(), "{status:?}");
    let body: Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(body["held"], true);
    let mut refused = Command::new(BIN);
    refused
        .args(["status", "over-tls", "--server", base])
        .env("LEASEHOLD_API_KEY", &key)
        .env_remove("LEASEHOLD_CA_FILE");
    let refused = run(refused).await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");

    // HTTP/2 by ALPN for clients that offer it.
    let h2 = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("request");
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
}

#[tokio::test]
async fn under_tls_the_session_cookie_is_secure_and_host_prefixed() {
    let certs = TestCerts::new();
    let app = spawn_app_with(AppOptions {
        tls: Some(certs.files()),
        ..AppOptions::default()
    })
    .await;
    let http = leasehold::client::http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(certs.ca()).expect("ca")).expect("ca"),
        )
        .build()
        .expect("client");
    let origin = app.url("");
    let signed_in = http
        .post(app.url("/login"))
        .header("origin", origin.trim_end_matches('/'))
        .form_fields(&[("token", ADMIN_TOKEN), ("next", "/")])
        .send()
        .await
        .expect("sign in");
    assert_eq!(signed_in.status(), 303);
    let set = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a cookie")
        .to_owned();
    assert!(set.starts_with("__Host-leasehold_session="), "{set}");
    assert!(
        set.contains("; Secure") && set.contains("Path=/") && !set.contains("Domain"),
        "{set}"
    );
    let cookie = set.split(';').next().expect("pair");
    let page = http
        .get(app.url("/"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("overview")
        .text()
        .await
        .expect("html");
    assert!(page.contains("Sign out"), "{page}");
}

/// A redis-server speaking TLS only (on a loopback port), killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    fn start(certs: &TestCerts) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // A port that was free a moment ago; redis-server cannot pick its own TLS port.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let files = certs.files();
        let mut command = children::guarded("redis-server");
        command
            .args([
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--tls-port",
                &port.to_string(),
            ])
            .arg("--tls-cert-file")
            .arg(&files.cert)
            .arg("--tls-key-file")
            .arg(&files.key)
            .arg("--tls-ca-cert-file")
            .arg(certs.ca())
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null());
        let child = children::spawn(command).expect("redis-server and setpriv are installed");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn redis_over_tls_with_a_private_ca() {
    let certs = TestCerts::new();
    let redis = TlsRedis::start(&certs);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let mut config = ServerConfig::new(format!("rediss://127.0.0.1:{}", redis.port));
    config.redis.ca_file = Some(certs.ca());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::run(listener, config, shutdown.clone()));
    let http = leasehold::client::http_builder()
        .build()
        .expect("an HTTP client");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = http.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "not ready over rediss://");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lease = http
        .post(format!("{base}/v1/locks/over-rediss/leases"))
        .json(&json!({}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(lease.status(), 201);
    shutdown.cancel();
    let _ = task.await;
}
