//! Fixtures: a private redis-server per test and a real Leasehold server on 127.0.0.1:0, and
//! a request helper for every resource (locks, semaphores, tickets, admin routes), so tests
//! read as what they check.

pub mod browser;
pub mod certs;
pub mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::limits::{ClientLimits, LockLimits};
use leasehold::server::listener::HttpLimits;
use leasehold::server::tls::TlsFiles;
use leasehold::server::{self, ServerConfig, ServerError};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A redis-server on a Unix socket in its own temp dir, killed on drop. It can be stopped and
/// started again on the same socket, to test outages.
pub struct RedisServer {
    child: Option<Child>,
    dir: std::sync::Arc<TempDir>,
    /// A handle to a server another fixture owns: dropping it stops nothing.
    shared: bool,
}

impl RedisServer {
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lh-redis")
            .tempdir()
            .expect("temp dir");
        let mut server = Self {
            child: None,
            dir: std::sync::Arc::new(dir),
            shared: false,
        };
        server.restart();
        server
    }

    /// Another handle on this running server, for a second Leasehold instance.
    pub fn shared(&self) -> Self {
        Self {
            child: None,
            dir: self.dir.clone(),
            shared: true,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("r.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url().as_str()).expect("redis url")
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// How many pattern subscriptions the server has (`PUBSUB NUMPAT`): what every PUBLISH
    /// on it is matched against.
    pub async fn pattern_subscriptions(&self) -> u64 {
        redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query_async(&mut self.conn().await)
            .await
            .expect("PUBSUB NUMPAT")
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: a Redis that accepts bytes and never
    /// answers, as under a long fork or a swap storm.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let child = self.child.as_ref().expect("a running server");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal redis-server");
    }

    /// Kills the server (as a crash would: no shutdown, no persistence).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// (Re)starts the server on the same socket and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-server is installed (the test command installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = self.client();
        while Instant::now() < deadline {
            if let Ok(mut conn) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not start");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if !self.shared {
            self.stop();
        }
    }
}

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
            clients: ClientLimits::default(),
            per_lock: LockLimits::default(),
            http: HttpLimits::default(),
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
    serve_on(RedisServer::start(), options).await
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
async fn serve_on(redis: RedisServer, options: AppOptions) -> TestApp {
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
    let config = config_for(&redis, options.clone());
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
        serve_on(self.redis.shared(), AppOptions::default()).await
    }

    /// A second instance on the same Redis with the same options as this one.
    pub async fn spawn_twin(&self) -> TestApp {
        serve_on(self.redis.shared(), self.options.clone()).await
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
        serve_on(self.redis.shared(), options).await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// An HTTP response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| panic!("body is not JSON: {}", String::from_utf8_lossy(&bytes)))
        };
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts a problem+json answer with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) -> &Self {
        self.assert_status(status);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.body["code"], code, "body: {}", self.body);
        assert_eq!(self.body["status"], status);
        assert_eq!(self.body["type"], format!("/problems/{code}"));
        assert!(self.body["title"].is_string() && self.body["detail"].is_string());
        self
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn str(&self, field: &str) -> String {
        self.body[field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field} in {}", self.body))
            .into()
    }

    pub fn u64(&self, field: &str) -> u64 {
        self.body[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {}", self.body))
    }
}

/// A lease (of a lock or a semaphore) as its holder knows it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub lock: String,
    pub id: String,
    pub token: String,
    pub fencing_token: u64,
    /// Its URL path (`/v1/locks/{lock}/leases/{id}` or `/v1/semaphores/...`).
    pub path: String,
}

impl Lease {
    /// The lease a 201 (or a ticket's 201) answered with, at its `Location`.
    pub fn from_reply(lock: &str, reply: &Reply) -> Self {
        reply.assert_status(201);
        let id = reply.str("lease_id");
        Self {
            lock: lock.into(),
            path: reply
                .header("location")
                .map_or_else(|| format!("/v1/locks/{lock}/leases/{id}"), str::to_owned),
            id,
            token: reply.str("token"),
            fencing_token: reply.u64("fencing_token"),
        }
    }
}

/// A fair lock's ticket (a 202) as its waiter knows it.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub lock: String,
    pub id: String,
    pub token: String,
    /// Its URL path (`/v1/locks/{lock}/tickets/{id}`).
    pub path: String,
}

impl Ticket {
    pub fn from_reply(lock: &str, reply: &Reply) -> Self {
        reply.assert_status(202);
        Self {
            lock: lock.into(),
            id: reply.str("ticket_id"),
            token: reply.str("token"),
            path: reply.header("location").expect("Location").to_owned(),
        }
    }

    /// The lease the ticket turns into (same id, same token) once granted.
    pub fn lease(&self, granted: &Reply) -> Lease {
        granted.assert_status(201);
        Lease {
            lock: self.lock.clone(),
            id: self.id.clone(),
            token: self.token.clone(),
            fencing_token: granted.u64("fencing_token"),
            path: granted.header("location").expect("Location").to_owned(),
        }
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// POST /v1/locks/{lock}/leases?wait_ms=.. with a JSON body and an optional bearer token.
    pub async fn acquire_with(
        &self,
        lock: &str,
        wait_ms: u64,
        body: Value,
        token: Option<&str>,
    ) -> Reply {
        let mut req = self
            .http
            .post(self.url(&format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}")))
            .json(&body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::read(req.send().await.expect("request")).await
    }

    /// Starts a waiting acquire (`wait_ms`) in the background; await the handle for its reply.
    pub fn spawn_waiter(&self, lock: &str, wait_ms: u64) -> JoinHandle<Reply> {
        self.spawn_post(
            &format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}"),
            serde_json::json!({}),
        )
    }

    /// Starts a POST of `body` to `path` in the background (a waiting acquire of any kind).
    pub fn spawn_post(&self, path: &str, body: Value) -> JoinHandle<Reply> {
        let http = self.http.clone();
        let url = self.url(path);
        tokio::spawn(async move {
            Reply::read(http.post(url).json(&body).send().await.expect("request")).await
        })
    }

    /// Acquires a semaphore's permits.
    pub async fn acquire_permits(&self, name: &str, wait_ms: u64, body: Value) -> Reply {
        let url = self.url(&format!("/v1/semaphores/{name}/leases?wait_ms={wait_ms}"));
        self.send(self.http.post(url).json(&body)).await
    }

    /// Acquires permits and expects a new lease.
    pub async fn permits(&self, name: &str, body: Value) -> Lease {
        Lease::from_reply(name, &self.acquire_permits(name, 0, body).await)
    }

    /// Acquires a fair lock and expects a ticket (202).
    pub async fn ticket(&self, lock: &str, body: Value) -> Ticket {
        Ticket::from_reply(lock, &self.acquire(lock, body).await)
    }

    /// `DELETE` on a ticket: leaves the queue.
    pub async fn leave(&self, ticket: &Ticket) -> Reply {
        let url = self.url(&ticket.path);
        self.send(self.http.delete(url).bearer_auth(&ticket.token))
            .await
    }

    /// Sends any request and reads its answer.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        Reply::read(request.send().await.expect("request")).await
    }

    /// Sends a request with an `Idempotency-Key`.
    pub async fn send_with_key(&self, request: reqwest::RequestBuilder, key: &str) -> Reply {
        self.send(request.header("idempotency-key", key)).await
    }

    /// An admin route (`/v1/admin/...`) with the admin token.
    pub async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut request = self
            .http
            .request(method, self.url(path))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    /// POSTs to a fair ticket's Location with its token.
    pub async fn poll_ticket(&self, location: &str, token: &str, wait_ms: u64) -> Reply {
        let url = self.url(&format!("{location}?wait_ms={wait_ms}"));
        Reply::read(
            self.http
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn acquire(&self, lock: &str, body: Value) -> Reply {
        self.acquire_with(lock, 0, body, None).await
    }

    /// Acquires and expects a new lease.
    pub async fn lease(&self, lock: &str, body: Value) -> Lease {
        Lease::from_reply(lock, &self.acquire(lock, body).await)
    }

    pub async fn heartbeat(&self, lease: &Lease, body: Value) -> Reply {
        self.heartbeat_as(lease, &lease.token, body).await
    }

    pub async fn heartbeat_as(&self, lease: &Lease, token: &str, body: Value) -> Reply {
        let url = self.url(&format!("{}/heartbeat", lease.path));
        Reply::read(
            self.http
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn release(&self, lease: &Lease, all: bool) -> Reply {
        self.release_as(lease, &lease.token, all).await
    }

    pub async fn release_as(&self, lease: &Lease, token: &str, all: bool) -> Reply {
        self.release_with(lease, token, &format!("all={all}")).await
    }

    /// `DELETE` on a lease with a query (`mode=read`, `all=true`, ...).
    pub async fn release_with(&self, lease: &Lease, token: &str, query: &str) -> Reply {
        let url = self.url(&format!("{}?{query}", lease.path));
        Reply::read(
            self.http
                .delete(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        Reply::read(self.http.get(self.url(path)).send().await.expect("request")).await
    }

    pub async fn inspect_lock(&self, lock: &str) -> Reply {
        self.get(&format!("/v1/locks/{lock}")).await
    }

    pub async fn inspect_lease(&self, lease: &Lease) -> Reply {
        self.get(&lease.path).await
    }

    pub async fn force_release(&self, lock: &str, admin_token: Option<&str>) -> Reply {
        let mut req = self
            .http
            .delete(self.url(&format!("/v1/admin/locks/{lock}?reason=stuck")));
        if let Some(token) = admin_token {
            req = req.bearer_auth(token);
        }
        Reply::read(req.send().await.expect("request")).await
    }

    /// Waits (bounded) until /readyz answers 200: the subscriber is connected.
    pub async fn wait_until_ready(&self) {
        self.wait_for("the server to become ready", |r| r.status == StatusCode::OK)
            .await;
    }

    /// Waits (bounded) until `n` requests wait for a lock in this server.
    pub async fn wait_for_waiters(&self, n: u64) {
        self.wait_for(&format!("{n} waiting requests"), |r| {
            r.status == StatusCode::OK && r.body["waiting_requests"] == n
        })
        .await;
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&Reply) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(response) = self.http.get(self.url("/readyz")).send().await
                && done(&Reply::read(response).await)
            {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Subscribes to the events channel; messages arrive on the returned receiver.
    pub async fn events(&self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        use futures_util::StreamExt as _;
        let mut pubsub = self
            .redis
            .client()
            .get_async_pubsub()
            .await
            .expect("pubsub");
        pubsub
            .subscribe("leasehold:events")
            .await
            .expect("subscribe");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stream = pubsub.into_on_message();
            while let Some(msg) = stream.next().await {
                let payload: String = msg.get_payload().expect("payload");
                // Instances publish their events in batches: JSON arrays.
                let batch = match serde_json::from_str(&payload).expect("event JSON") {
                    Value::Array(events) => events,
                    event => vec![event],
                };
                for event in batch {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        });
        rx
    }
}

/// An open lease watch (`GET <lease>/watch`): its events as they come.
pub struct Watch {
    events: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<
                        eventsource_stream::Event,
                        eventsource_stream::EventStreamError<reqwest::Error>,
                    >,
                > + Send,
        >,
    >,
}

impl Watch {
    /// The next event (bounded by `within`); `None` when the stream ended.
    pub async fn next(&mut self, within: Duration) -> Option<eventsource_stream::Event> {
        use futures_util::StreamExt as _;
        tokio::time::timeout(within, self.events.next())
            .await
            .unwrap_or_else(|_| panic!("no event and no end within {within:?}"))
            .map(|event| event.expect("a well-formed event stream"))
    }

    /// Asserts that nothing comes (no event, no end) for `quiet`.
    pub async fn assert_quiet(&mut self, quiet: Duration) {
        use futures_util::StreamExt as _;
        if let Ok(news) = tokio::time::timeout(quiet, self.events.next()).await {
            panic!("the watch said something within {quiet:?}: {news:?}");
        }
    }
}

impl TestApp {
    /// Opens a watch on `lease` with `token`: the watch on success, else the problem reply.
    pub async fn watch_as(&self, lease: &Lease, token: &str) -> Result<Watch, Reply> {
        use eventsource_stream::Eventsource as _;
        let response = self
            .http
            .get(self.url(&format!("{}/watch", lease.path)))
            .bearer_auth(token)
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .expect("request");
        if response.status() != StatusCode::OK {
            return Err(Reply::read(response).await);
        }
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Ok(Watch {
            events: Box::pin(response.bytes_stream().eventsource()),
        })
    }

    /// Opens a watch on `lease` with its own token.
    pub async fn watch(&self, lease: &Lease) -> Watch {
        match self.watch_as(lease, &lease.token).await {
            Ok(watch) => watch,
            Err(reply) => panic!("watch refused: {} {}", reply.status, reply.body),
        }
    }
}

/// Waits (bounded) for the next event of `kind`, skipping others.
pub async fn next_event(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, kind: &str) -> Value {
    let wait = async {
        loop {
            let event = rx.recv().await.expect("event stream open");
            if event["type"] == kind {
                return event;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no {kind} event within 10 s"))
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

/// The lock's only holder right now.
pub async fn holder_of(app: &TestApp, lock: &str) -> Value {
    let view = app.inspect_lock(lock).await;
    assert_eq!(
        view.body["holders"].as_array().map(Vec::len),
        Some(1),
        "{}",
        view.body
    );
    view.body["holders"][0].clone()
}
