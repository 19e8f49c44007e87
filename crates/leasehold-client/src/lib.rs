//! The Rust client of Leasehold: a typed HTTP client for the `/v1` lease API, what `leasehold
//! run` and the scripting subcommands (`acquire`, `heartbeat`, `release`, `status`, `ls`)
//! speak, and what a Rust program adds to call a Leasehold server.
//!
//! It knows the wire format only ([`leasehold_wire`]), never the lock domain: it depends on
//! neither axum, Redis nor askama. Every call returns the typed body together with the JSON the server sent
//! (scripts print the latter verbatim, so fields added later reach them), or a [`ClientError`]
//! that keeps the problem's `code`, `detail` and status. It speaks `http://` and `https://`
//! (rustls; the system's trusted roots plus an optional CA file) and sends an API key, when
//! given one, in the `Leasehold-Key` header of every request.

use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};
use reqwest::{RequestBuilder, StatusCode, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use leasehold_wire::{
    AcquireBody, FenceCheckBody, FenceCheckReply, GrantBody, KeyBody, KeyCreateBody, KeyListBody,
    KeyQuotasBody, KeyRole, KeyRotateBody, KeySecretBody, LeaseBody, LeaseId, LeaseState, ListBody,
    LiveBody, LockBody, LockKind, LostEvent, PermitBody, ReleaseBody, RenewalBody, SemaphoreBody,
    TicketBody,
};

/// The header the API key travels in.
pub const KEY_HEADER: &str = "leasehold-key";

/// Which routes a lease lives under: `/v1/locks` or `/v1/semaphores`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Lock,
    Semaphore,
}

impl Resource {
    fn segment(self) -> &'static str {
        match self {
            Self::Lock => "locks",
            Self::Semaphore => "semaphores",
        }
    }
}

/// How long a call other than a waiting acquire may take before it fails as a transport error.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for a TCP connection: a server that is down should fail fast, not eat the
/// heartbeat budget of `leasehold run`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The base URL of a Leasehold server (`http://host:port`, optionally with a path prefix when
/// it sits behind a proxy).
#[derive(Debug, Clone)]
pub struct ServerUrl(Url);

/// Why a server URL was refused.
#[derive(Debug, thiserror::Error)]
pub enum InvalidServerUrl {
    #[error("not a URL ({0}); write it like http://127.0.0.1:8080")]
    Syntax(String),
    #[error("only http:// and https:// server URLs are supported, not {0}://")]
    Scheme(String),
}

impl FromStr for ServerUrl {
    type Err = InvalidServerUrl;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let url = Url::parse(raw).map_err(|e| InvalidServerUrl::Syntax(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(InvalidServerUrl::Scheme(url.scheme().to_owned()));
        }
        Ok(Self(url))
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A lease's bearer token. Its `Debug` hides the secret, so it cannot leak through logs or
/// error messages.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(String);

impl LeaseToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(..)")
    }
}

/// The token was empty (an unset variable expanded in a script, most likely).
#[derive(Debug, thiserror::Error)]
#[error("the lease token is empty")]
pub struct EmptyToken;

impl FromStr for LeaseToken {
    type Err = EmptyToken;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(EmptyToken);
        }
        Ok(Self(raw.to_owned()))
    }
}

/// An API key (or the admin token). Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// The key was empty (an unset variable expanded in a script, most likely).
#[derive(Debug, thiserror::Error)]
#[error("the API key is empty")]
pub struct EmptyKey;

impl FromStr for ApiKey {
    type Err = EmptyKey;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(EmptyKey);
        }
        Ok(Self(raw.to_owned()))
    }
}

/// How a client proves itself and whom it trusts.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Sent in the `Leasehold-Key` header of every request.
    pub api_key: Option<ApiKey>,
    /// A PEM file of CA certificates trusted beside the system's (a private CA).
    pub ca_file: Option<PathBuf>,
}

/// What an acquire asks for; `None` leaves the choice to the server.
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    pub ttl: Option<Duration>,
    pub holder: Option<String>,
    /// A small JSON object kept with the lease.
    pub metadata: Option<Value>,
    pub kind: Option<LockKind>,
    /// How long the server should wait while someone else holds the lock.
    pub wait: Duration,
}

/// What a semaphore acquire asks for.
#[derive(Debug, Clone, Default)]
pub struct PermitOptions {
    /// The semaphore's size; every party must name the same.
    pub limit: u32,
    /// Permits to take (the server's default is 1).
    pub permits: Option<u32>,
    pub ttl: Option<Duration>,
    pub holder: Option<String>,
    /// A small JSON object kept with the lease.
    pub metadata: Option<Value>,
    pub wait: Duration,
}

/// A new lease (201): the grant, and the token only this answer carries.
#[derive(Debug, Clone)]
pub struct Lease {
    pub grant: GrantBody,
    pub token: LeaseToken,
}

/// A fair lock's place in line (202): poll it with [`Client::poll`] until it is granted.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub ticket: TicketBody,
    /// Proves the ticket and, once granted, its lease.
    pub token: LeaseToken,
}

/// An acquire's success: a lease, or (fair locks) a place in line.
#[derive(Debug, Clone)]
pub enum Acquired {
    Lease(Lease),
    Queued(Ticket),
}

/// A successful answer: the typed body and the JSON document it was read from.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub body: T,
    pub json: Value,
}

/// An `application/problem+json` answer.
#[derive(Debug, Clone, Deserialize, thiserror::Error)]
#[error("{detail} ({status} {code})")]
pub struct Problem {
    pub status: u16,
    /// The stable machine code, e.g. `lock_held`, `lease_lost`.
    pub code: String,
    pub detail: String,
    /// On 409 `lock_held`: when the holder's lease runs out unless renewed.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// On 410 `lease_lost`: `expired`, `released` or `force_released`.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Problem {
    /// Someone else holds the lock (409).
    pub fn is_lock_held(&self) -> bool {
        self.status == StatusCode::CONFLICT.as_u16()
    }

    /// The server no longer knows this lease as a holder: lost (410), long gone (404), or
    /// the token does not prove it (403). Retrying cannot bring it back.
    pub fn is_lease_gone(&self) -> bool {
        matches!(self.status, 403 | 404 | 410)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request and said why.
    #[error(transparent)]
    Problem(#[from] Problem),
    /// No answer: connection refused or reset, timeout, DNS.
    #[error("no answer from the server")]
    Transport(#[from] reqwest::Error),
    /// An answer that is neither the expected JSON nor a problem document (a proxy's error
    /// page, say).
    #[error("unexpected answer {status}: {excerpt}")]
    Unexpected { status: StatusCode, excerpt: String },
    /// The base URL cannot take a path (checked when parsing, so only a bug gets here).
    #[error("the server URL cannot take a path: {0}")]
    BadBase(ServerUrl),
    /// The CA file cannot be read or holds no certificate.
    #[error("cannot use the CA file {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    /// A lease watch ended without saying the lease was lost (the server stopped, or the
    /// connection broke): the lease may well still hold; watch again.
    #[error("the lease watch ended without news")]
    WatchEnded,
}

impl ClientError {
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::Problem(p) => Some(p),
            _ => None,
        }
    }
}

/// A reqwest builder with the crypto provider installed first ([`install_crypto_provider`]:
/// reqwest panics on `build()` without one). Every HTTP client of this crate, and of the
/// server's tests and benches, starts here.
pub fn http_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Makes ring the process's TLS crypto provider; later calls do nothing. reqwest is built here
/// without a provider of its own (its default would bring aws-lc-rs, a long C build), so it
/// panics on `build()` until one is installed; the server's listener and `rediss://` clients
/// ask rustls for the same default.
pub fn install_crypto_provider() {
    // Err means another call (or another crate) installed it first: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A handle on one Leasehold server; cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: ServerUrl,
    timeout: Duration,
    api_key: Option<ApiKey>,
}

impl Client {
    /// A client of `base` without a key, trusting the system's roots.
    pub fn new(base: ServerUrl) -> Result<Self, ClientError> {
        Self::with_options(base, &ClientOptions::default())
    }

    /// A client of `base` with `options` (an API key, a private CA).
    pub fn with_options(base: ServerUrl, options: &ClientOptions) -> Result<Self, ClientError> {
        let mut builder = http_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &options.ca_file {
            for cert in read_ca(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            http: builder.build()?,
            base,
            timeout: DEFAULT_TIMEOUT,
            api_key: options.api_key.clone(),
        })
    }

    /// The same client with another per-call timeout (a waiting acquire adds its wait to it).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same client over another HTTP stack (an HTTP/2-only client, a custom pool).
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// `POST /v1/locks/{lock}/leases?wait_ms=N`: a new lease, or a ticket (fair locks still
    /// queued when the wait ended). The server cuts the wait to its `--max-wait-ms`. Dropping
    /// the returned future closes the connection, which makes the server drop the waiter (and
    /// roll back a grant it could not deliver).
    pub async fn acquire(
        &self,
        lock: &str,
        options: &AcquireOptions,
    ) -> Result<Reply<Acquired>, ClientError> {
        let mut url = self.endpoint(&["v1", "locks", lock, "leases"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(options.wait).to_string());
        let body = AcquireBody {
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            metadata: options.metadata.clone(),
            kind: options.kind,
            ..AcquireBody::default()
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .json(&body)
            .timeout(self.timeout.saturating_add(options.wait));
        Self::acquired(request, None).await
    }

    /// `POST /v1/locks/{lock}/tickets/{id}?wait_ms=N`: the fair lock's lease once it is the
    /// ticket's turn (or again, if it was granted before), else the ticket still in line.
    pub async fn poll(
        &self,
        lock: &str,
        ticket: LeaseId,
        token: &LeaseToken,
        wait: Duration,
    ) -> Result<Reply<Acquired>, ClientError> {
        let id = ticket.to_string();
        let mut url = self.endpoint(&["v1", "locks", lock, "tickets", &id])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(wait).to_string());
        let request = self
            .request(reqwest::Method::POST, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout.saturating_add(wait));
        Self::acquired(request, Some(token)).await
    }

    /// `DELETE /v1/locks/{lock}/tickets/{id}`: gives up the ticket's place.
    pub async fn leave(
        &self,
        lock: &str,
        ticket: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), ClientError> {
        let id = ticket.to_string();
        let url = self.endpoint(&["v1", "locks", lock, "tickets", &id])?;
        let request = self
            .request(reqwest::Method::DELETE, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout);
        Self::send::<Value>(request).await.map(|_| ())
    }

    /// `POST /v1/semaphores/{name}/leases?wait_ms=N`: permits for a new lease.
    pub async fn acquire_permits(
        &self,
        name: &str,
        options: &PermitOptions,
    ) -> Result<Reply<Lease>, ClientError> {
        let mut url = self.endpoint(&["v1", "semaphores", name, "leases"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(options.wait).to_string());
        let body = PermitBody {
            limit: Some(options.limit),
            permits: options.permits,
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            metadata: options.metadata.clone(),
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .json(&body)
            .timeout(self.timeout.saturating_add(options.wait));
        match Self::acquired(request, None).await? {
            Reply {
                body: Acquired::Lease(lease),
                json,
            } => Ok(Reply { body: lease, json }),
            Reply { json, .. } => Err(ClientError::Unexpected {
                status: StatusCode::ACCEPTED,
                excerpt: excerpt(json.to_string().as_bytes()),
            }),
        }
    }

    /// Reads a grant (201/200) or a ticket (202); `known` is the token the caller already
    /// has (a ticket's, when polling), for answers that do not repeat it.
    async fn acquired(
        request: RequestBuilder,
        known: Option<&LeaseToken>,
    ) -> Result<Reply<Acquired>, ClientError> {
        let reply: Reply<Value> = Self::send(request).await?;
        let unexpected = |what: &str| ClientError::Unexpected {
            status: StatusCode::OK,
            excerpt: what.to_owned(),
        };
        let token = reply.json["token"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| known.cloned())
            .ok_or_else(|| unexpected("an answer without the lease's token"))?;
        let body = if reply.json.get("ticket_id").is_some() {
            let ticket = TicketBody::deserialize(&reply.json)
                .map_err(|_| unexpected("a ticket the client cannot read"))?;
            Acquired::Queued(Ticket { ticket, token })
        } else {
            let grant = GrantBody::deserialize(&reply.json)
                .map_err(|_| unexpected("a grant the client cannot read"))?;
            Acquired::Lease(Lease { grant, token })
        };
        Ok(Reply {
            body,
            json: reply.json,
        })
    }

    /// `POST /v1/{locks|semaphores}/{name}/leases/{id}/heartbeat`: the lease's TTL starts
    /// again.
    pub async fn heartbeat(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Reply<RenewalBody>, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&["v1", resource.segment(), lock, "leases", &id, "heartbeat"])?;
        Self::send(
            self.request(reqwest::Method::POST, url)
                .bearer_auth(token.expose())
                .timeout(self.timeout),
        )
        .await
    }

    /// `DELETE /v1/{locks|semaphores}/{name}/leases/{id}[?all=true]`: one reentry level, or
    /// all of them (a semaphore lease always gives back all its permits).
    pub async fn release(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
    ) -> Result<Reply<ReleaseBody>, ClientError> {
        let id = id.to_string();
        let mut url = self.endpoint(&["v1", resource.segment(), lock, "leases", &id])?;
        if all {
            url.query_pairs_mut().append_pair("all", "true");
        }
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .bearer_auth(token.expose())
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/locks/{lock}`: who holds the lock (404 when free and never taken).
    pub async fn lock_status(&self, lock: &str) -> Result<Reply<LockBody>, ClientError> {
        let url = self.endpoint(&["v1", "locks", lock])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/semaphores/{name}`: its limit, permits in use and holders.
    pub async fn semaphore_status(&self, name: &str) -> Result<Reply<SemaphoreBody>, ClientError> {
        let url = self.endpoint(&["v1", "semaphores", name])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/{locks|semaphores}/{name}/leases/{id}`: one lease's state, also for a while
    /// after it ended (then 404).
    pub async fn lease_status(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
    ) -> Result<Reply<LeaseBody>, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&["v1", resource.segment(), lock, "leases", &id])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// A request with this client's API key.
    fn request(&self, method: reqwest::Method, url: Url) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.api_key {
            Some(key) => request.header(KEY_HEADER, key.expose()),
            None => request,
        }
    }

    /// `POST /v1/admin/keys`: a new key and its secret (shown only here).
    pub async fn create_key(
        &self,
        body: &KeyCreateBody,
    ) -> Result<Reply<KeySecretBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys"])?;
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/admin/keys`: every key the caller may see.
    pub async fn list_keys(&self) -> Result<Reply<KeyListBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys"])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `POST /v1/admin/keys/{id}/rotate`: a new secret; the old one works for `grace`.
    pub async fn rotate_key(
        &self,
        id: &str,
        grace: Duration,
    ) -> Result<Reply<KeySecretBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id, "rotate"])?;
        let body = KeyRotateBody {
            grace_ms: Some(millis(grace)),
        };
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `DELETE /v1/admin/keys/{id}`: the key stops working everywhere.
    pub async fn revoke_key(&self, id: &str) -> Result<Reply<KeyBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id])?;
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/locks?prefix=..&cursor=..`: one page of the live locks and semaphores.
    pub async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
    ) -> Result<Reply<ListBody>, ClientError> {
        let mut url = self.endpoint(&["v1", "locks"])?;
        url.query_pairs_mut().append_pair("prefix", prefix);
        if let Some(cursor) = cursor {
            url.query_pairs_mut().append_pair("cursor", cursor);
        }
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `POST /v1/locks/{lock}/fence/check`: whether `fencing_token` is the token of a lease
    /// that holds the lock now (stale as soon as it is answered).
    pub async fn check_fence(
        &self,
        lock: &str,
        fencing_token: u64,
    ) -> Result<Reply<FenceCheckReply>, ClientError> {
        let url = self.endpoint(&["v1", "locks", lock, "fence", "check"])?;
        let body = FenceCheckBody {
            fencing_token: Some(fencing_token),
        };
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/{locks|semaphores}/{name}/leases/{id}/watch`: a stream that says when the
    /// lease ends ([`Watch::lost`]). It has no timeout: it lasts as long as the lease.
    pub async fn watch(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Watch, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&["v1", resource.segment(), lock, "leases", &id, "watch"])?;
        let response = self
            .request(reqwest::Method::GET, url)
            .bearer_auth(token.expose())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await?;
            return Err(match serde_json::from_slice::<Problem>(&bytes) {
                Ok(problem) => problem.into(),
                Err(_) => ClientError::Unexpected {
                    status,
                    excerpt: excerpt(&bytes),
                },
            });
        }
        Ok(Watch {
            events: Box::pin(response.bytes_stream().eventsource()),
        })
    }

    /// The base URL with `segments` appended, each percent-encoded: a lock name with a `/` or
    /// `?` reaches the server as one segment and gets its 422, not someone else's route.
    fn endpoint(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.0.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|()| ClientError::BadBase(self.base.clone()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// Sends `request` and reads a success body as `T`, or a problem document as
    /// [`ClientError::Problem`].
    async fn send<T: DeserializeOwned>(request: RequestBuilder) -> Result<Reply<T>, ClientError> {
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let unexpected = || ClientError::Unexpected {
            status,
            excerpt: excerpt(&bytes),
        };
        if !status.is_success() {
            return Err(serde_json::from_slice::<Problem>(&bytes)
                .map_err(|_| unexpected())?
                .into());
        }
        let json: Value = serde_json::from_slice(&bytes).map_err(|_| unexpected())?;
        let body = T::deserialize(&json).map_err(|_| unexpected())?;
        Ok(Reply { body, json })
    }
}

/// An open lease watch.
pub struct Watch {
    events: Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, WatchError>> + Send>>,
}

type WatchError = eventsource_stream::EventStreamError<reqwest::Error>;

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch(..)")
    }
}

impl Watch {
    /// Waits for the server to say the lease is lost. [`ClientError::WatchEnded`] when the
    /// stream ends first (the lease may still hold).
    pub async fn lost(&mut self) -> Result<LostEvent, ClientError> {
        while let Some(event) = self.events.next().await {
            let Ok(event) = event else {
                return Err(ClientError::WatchEnded);
            };
            if event.event == "lost" {
                return serde_json::from_str(&event.data).map_err(|_| ClientError::Unexpected {
                    status: StatusCode::OK,
                    excerpt: excerpt(event.data.as_bytes()),
                });
            }
        }
        Err(ClientError::WatchEnded)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The certificates of a PEM file.
fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let error = |reason: String| ClientError::CaFile {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| error(e.to_string()))?;
    if certs.is_empty() {
        return Err(error("no certificate in it".into()));
    }
    Ok(certs)
}

/// The start of a body that is not what we expected, for an error message.
fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None if text.is_empty() => "(empty body)".to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> Client {
        Client::new(base.parse().expect("url")).expect("client")
    }

    #[test]
    fn endpoints_keep_a_path_prefix_and_encode_segments() {
        let url = client("http://h:1/prefix/")
            .endpoint(&["v1", "locks", "a/b?c", "leases"])
            .expect("url");
        assert_eq!(url.as_str(), "http://h:1/prefix/v1/locks/a%2Fb%3Fc/leases");
        let url = client("http://h:1").endpoint(&["v1"]).expect("url");
        assert_eq!(url.as_str(), "http://h:1/v1");
    }

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        assert!("https://h".parse::<ServerUrl>().is_ok());
        assert!(matches!(
            "ftp://h".parse::<ServerUrl>(),
            Err(InvalidServerUrl::Scheme(s)) if s == "ftp"
        ));
        assert!("h:8080".parse::<ServerUrl>().is_err());
        assert!("not a url".parse::<ServerUrl>().is_err());
    }

    #[test]
    fn the_acquire_body_names_only_what_was_asked() {
        let body = AcquireBody::default();
        assert_eq!(serde_json::to_string(&body).expect("json"), "{}");
        let body = AcquireBody {
            ttl_ms: Some(1500),
            holder: Some("me".into()),
            kind: Some(LockKind::Reentrant),
            ..AcquireBody::default()
        };
        assert_eq!(
            serde_json::to_value(&body).expect("json"),
            serde_json::json!({"ttl_ms": 1500, "holder": "me", "kind": "reentrant"})
        );
    }

    #[test]
    fn tokens_do_not_show_in_debug_output() {
        let token: LeaseToken = "lht_secret".parse().expect("token");
        assert!(!format!("{token:?}").contains("secret"));
        let key: ApiKey = "lhk_secret".parse().expect("key");
        assert!(!format!("{key:?}").contains("secret"));
        assert!(" ".parse::<LeaseToken>().is_err());
    }
}

/// The README's example, compiled by the doctests (`cargo test --doc`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeExample;
