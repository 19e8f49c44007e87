//! Fixtures: a private redis-server per test and a real Leasehold server on 127.0.0.1:0, and
//! a request helper for every resource (locks, semaphores, tickets, admin routes), so tests
//! read as what they check.

pub mod browser;
pub mod certs;
pub mod children;
pub mod cli;
pub mod cluster;
mod redis_server;
mod replies;
mod requests;
pub mod sentinel;
pub mod serve;

pub use redis_server::RedisServer;
pub use replies::{Lease, Reply, Ticket};
pub use requests::{Watch, holder_of, next_event};

use std::net::SocketAddr;
use std::time::Duration;

use leasehold::limits::{ClientLimits, LockLimits};
use leasehold::server::listener::HttpLimits;
use leasehold::server::tls::TlsFiles;
use leasehold::server::{self, ServerConfig, ServerError};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// Settings a test may change before the app starts.
#[derive(Clone)]
pub struct AppOptions {
    pub min_ttl_ms: u64,
    pub max_wait_ms: u64,
    pub admin_token: Option<String>,
    pub key_prefix: String,
    pub ticket_timeout_ms: u64,
    pub metrics_lock_names: bool,
    pub dashboard_private: bool,
    pub allow_anonymous: bool,
    /// What one caller may do; the server's defaults unless set.
    pub clients: ClientLimits,
    pub per_lock: LockLimits,
    pub http: HttpLimits,
    pub body_timeout: Duration,
    /// Serve HTTPS with these files.
    pub tls: Option<TlsFiles>,
    pub max_watches: usize,
    /// Lock operations sent to Redis at once, at most (`--max-redis-calls`).
    pub calls_in_flight: usize,
    /// How long an ended lease's record stays (`--tombstone-ms`).
    pub tombstone_ms: u64,
}

impl Default for AppOptions {
    fn default() -> Self {
        Self {
            min_ttl_ms: 100,
            max_wait_ms: 30_000,
            admin_token: Some(ADMIN_TOKEN.into()),
            key_prefix: String::new(),
            ticket_timeout_ms: 5_000,
            metrics_lock_names: false,
            dashboard_private: false,
            allow_anonymous: false,
            clients: ServerConfig::new("").clients,
            per_lock: ServerConfig::new("").limits.per_lock,
            http: ServerConfig::new("").http,
            body_timeout: Duration::from_secs(10),
            tls: None,
            max_watches: 10_000,
            calls_in_flight: 256,
            tombstone_ms: 60_000,
        }
    }
}

/// A running Leasehold server with its own Redis.
pub struct TestApp {
    pub addr: SocketAddr,
    /// `http` or `https`.
    pub scheme: &'static str,
    pub http: reqwest::Client,
    pub redis: RedisServer,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<Result<(), ServerError>>>,
    pub options: AppOptions,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(AppOptions::default()).await
}

pub async fn spawn_app_with(options: AppOptions) -> TestApp {
    serve_on(RedisServer::start(), options, |_| {}).await
}

/// A server whose configuration `tweak` changes last: Sentinel mode, replica acks. (In
/// Sentinel mode the app's own `redis` is a bystander: the server goes where the Sentinels
/// say.)
pub async fn spawn_app_tweaked(
    options: AppOptions,
    tweak: impl FnOnce(&mut ServerConfig),
) -> TestApp {
    serve_on(RedisServer::start(), options, tweak).await
}

/// The server configuration the tests use, on `redis`.
fn config_for(redis: &RedisServer, options: AppOptions) -> ServerConfig {
    let mut config = ServerConfig::new(redis.url());
    config.locks.key_prefix = options.key_prefix;
    config.locks.ticket_timeout_ms = options.ticket_timeout_ms;
    config.limits.ttl.min_ms = options.min_ttl_ms;
    config.limits.ttl.max_ms = 3_600_000;
    config.limits.max_wait = Duration::from_millis(options.max_wait_ms);
    config.limits.ticket_timeout_ms = options.ticket_timeout_ms;
    config.admin_token = options.admin_token;
    config.metrics_lock_names = options.metrics_lock_names;
    config.dashboard.private = options.dashboard_private;
    config.allow_anonymous = options.allow_anonymous;
    config.clients = options.clients;
    config.limits.per_lock = options.per_lock;
    config.http = options.http;
    config.body_timeout = options.body_timeout;
    config.tls = options.tls;
    config.limits.max_watches = options.max_watches;
    config.locks.calls_in_flight = options.calls_in_flight;
    config.locks.tombstone_ms = options.tombstone_ms;
    config
}

/// Runs a server on `redis` with the default options until it stops by itself (at most
/// 10 s): for what must refuse to start.
pub async fn serve_once(redis: &RedisServer) -> Result<(), ServerError> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let shutdown = CancellationToken::new();
    let config = config_for(redis, AppOptions::default());
    let run = server::run(listener, config, shutdown.clone());
    let result = tokio::time::timeout(Duration::from_secs(10), run).await;
    shutdown.cancel();
    result.unwrap_or(Ok(()))
}

/// Starts a Leasehold server on `redis`.
async fn serve_on(
    redis: RedisServer,
    options: AppOptions,
    tweak: impl FnOnce(&mut ServerConfig),
) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let ca = options
        .tls
        .as_ref()
        .map(|tls| tls.cert.with_file_name("ca.pem"));
    let mut config = config_for(&redis, options.clone());
    tweak(&mut config);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::run(listener, config, shutdown.clone()));
    let mut http = leasehold::client::http_builder().timeout(Duration::from_secs(30));
    if let Some(ca) = &ca {
        let pem = std::fs::read(ca).expect("the test CA");
        http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a CA"));
    }
    let app = TestApp {
        addr,
        scheme,
        http: http.build().expect("client"),
        redis,
        shutdown,
        task: Some(task),
        options,
    };
    app.wait_until_ready().await;
    app
}

impl TestApp {
    /// A second Leasehold instance on the same Redis, as a scaled-out deployment runs.
    pub async fn spawn_peer(&self) -> TestApp {
        serve_on(self.redis.shared(), AppOptions::default(), |_| {}).await
    }

    /// A second instance on the same Redis with the same options as this one.
    pub async fn spawn_twin(&self) -> TestApp {
        serve_on(self.redis.shared(), self.options.clone(), |_| {}).await
    }

    /// The same server, as seen by a caller sending `key` in `Leasehold-Key` with every
    /// request the helpers make (a view: dropping it stops nothing).
    pub fn with_key(&self, key: &str) -> TestApp {
        self.view(Some(key), true)
    }

    /// A view sending `key` (if any) with every request, following redirects or not.
    pub fn view(&self, key: Option<&str>, follow_redirects: bool) -> TestApp {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = key {
            headers.insert(
                "leasehold-key",
                reqwest::header::HeaderValue::from_str(key).expect("a header value"),
            );
        }
        let mut http = leasehold::client::http_builder()
            .timeout(Duration::from_secs(30))
            .default_headers(headers);
        if !follow_redirects {
            http = http.redirect(reqwest::redirect::Policy::none());
        }
        if let Some(tls) = &self.options.tls {
            let pem = std::fs::read(tls.cert.with_file_name("ca.pem")).expect("the test CA");
            http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a CA"));
        }
        TestApp {
            addr: self.addr,
            scheme: self.scheme,
            http: http.build().expect("client"),
            redis: self.redis.shared(),
            shutdown: CancellationToken::new(),
            task: None,
            options: self.options.clone(),
        }
    }

    /// Creates an API key with the admin token: `spec` is the body of `POST
    /// /v1/admin/keys`. Returns the key's id and secret.
    pub async fn create_key(&self, spec: Value) -> (String, String) {
        let reply = self
            .admin(reqwest::Method::POST, "/v1/admin/keys", Some(spec))
            .await;
        reply.assert_status(201);
        (
            reply.body["key"]["id"].as_str().expect("an id").to_owned(),
            reply.str("secret"),
        )
    }

    /// Revokes key `id` with the admin token.
    pub async fn revoke_key(&self, id: &str) {
        self.admin(
            reqwest::Method::DELETE,
            &format!("/v1/admin/keys/{id}"),
            None,
        )
        .await
        .assert_status(200);
    }

    /// A second instance on the same Redis, with other options.
    pub async fn spawn_peer_with(&self, options: AppOptions) -> TestApp {
        serve_on(self.redis.shared(), options, |_| {}).await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Form bodies for reqwest (built without its `form` feature).
pub trait FormFields {
    /// `fields` as an urlencoded form body (what a browser's form posts).
    fn form_fields(self, fields: &[(&str, &str)]) -> Self;
}

impl FormFields for reqwest::RequestBuilder {
    fn form_fields(self, fields: &[(&str, &str)]) -> Self {
        form(self, fields)
    }
}

fn form(request: reqwest::RequestBuilder, fields: &[(&str, &str)]) -> reqwest::RequestBuilder {
    let encode = |raw: &str| -> String {
        raw.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let body = fields
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
}

/// The limits a server has with its default flags (what `api::openapi` and `api::routes`
/// describe for tests that read the document without a server).
pub fn default_limits() -> leasehold::state::ApiLimits {
    ServerConfig::new("redis://unused").limits
}
