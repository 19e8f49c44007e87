//! A light HTTP client for the loops whose figures the client's own cost would blur: the
//! uncontended loop and the parked waiters' drain. The client shares the cores with the server
//! and Redis, so what it spends per request is taken from them: reqwest on a multi-threaded
//! runtime spent ~49 µs of CPU per request, wrk (a thread and a Lua VM per connection) ~33 µs,
//! this one ~19 µs. hyper's connection API, no pool, no middleware: one keep-alive HTTP/1.1
//! connection per simulated client, or streams on a shared h2c connection.

use std::time::{Duration, Instant};

use hyper::client::conn::{http1, http2};
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Deserialize;

/// How long one request may take, a server-side wait included (waits here are at most 110 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

enum Sender {
    H1(http1::SendRequest<String>),
    H2(http2::SendRequest<String>),
}

/// One simulated client: its own HTTP/1.1 connection, or a handle on a shared h2c one.
pub struct Conn {
    send: Sender,
    /// host:port, and the same as the HTTP/1.1 Host header, parsed once per connection.
    host: String,
    host_header: HeaderValue,
}

/// A new lease as the loops need it: where to release it, and the token that proves it.
pub struct Held {
    pub path: String,
    pub token: String,
}

#[derive(Deserialize)]
struct Granted<'a> {
    #[serde(borrow)]
    token: &'a str,
}

/// `http://host:port` as the host:port to connect to.
pub fn authority(url: &str) -> anyhow::Result<String> {
    Ok(url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("the light client speaks plain http:// only: {url}"))?
        .trim_end_matches('/')
        .to_owned())
}

async fn connect(authority: &str) -> anyhow::Result<TokioIo<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(authority).await?;
    tcp.set_nodelay(true)?;
    Ok(TokioIo::new(tcp))
}

impl Conn {
    /// A new HTTP/1.1 connection to `authority` (host:port); its task runs on the current
    /// runtime.
    pub async fn open(authority: &str) -> anyhow::Result<Self> {
        let (send, conn) = http1::handshake(connect(authority).await?).await?;
        tokio::spawn(conn);
        Self::new(Sender::H1(send), authority)
    }

    /// A new h2c connection (HTTP/2 with prior knowledge) to `authority`; clone it for each
    /// client that shares it.
    pub async fn open_h2(authority: &str) -> anyhow::Result<Self> {
        let (send, conn) =
            http2::handshake(TokioExecutor::new(), connect(authority).await?).await?;
        tokio::spawn(conn);
        Self::new(Sender::H2(send), authority)
    }

    fn new(send: Sender, authority: &str) -> anyhow::Result<Self> {
        Ok(Self {
            send,
            host: authority.to_owned(),
            host_header: HeaderValue::from_str(authority)?,
        })
    }

    /// Another client on the same h2c connection (None for HTTP/1.1: one client each).
    pub fn share(&self) -> Option<Self> {
        match &self.send {
            Sender::H2(send) => Some(Self {
                send: Sender::H2(send.clone()),
                host: self.host.clone(),
                host_header: self.host_header.clone(),
            }),
            Sender::H1(_) => None,
        }
    }

    /// Acquires a new lease on `lock`, waiting up to `wait_ms` server-side: 201 or an error.
    pub async fn acquire(&mut self, lock: &str, body: &str, wait_ms: u64) -> anyhow::Result<Held> {
        let path = if wait_ms == 0 {
            format!("/v1/locks/{lock}/leases")
        } else {
            format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}")
        };
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(body.to_owned())?;
        let (status, location, bytes) = self.send(request).await?;
        anyhow::ensure!(
            status == StatusCode::CREATED,
            "acquire answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        let granted: Granted = serde_json::from_slice(&bytes)?;
        Ok(Held {
            path: location.unwrap_or_default(),
            token: granted.token.to_owned(),
        })
    }

    /// Releases `held`: 200 or an error.
    pub async fn release(&mut self, held: &Held) -> anyhow::Result<()> {
        let request = Request::builder()
            .method(Method::DELETE)
            .uri(held.path.as_str())
            .header("authorization", format!("Bearer {}", held.token))
            .body(String::new())?;
        let (status, _, bytes) = self.send(request).await?;
        anyhow::ensure!(
            status == StatusCode::OK,
            "release answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(())
    }

    async fn send(
        &mut self,
        mut request: Request<String>,
    ) -> anyhow::Result<(StatusCode, Option<String>, hyper::body::Bytes)> {
        use http_body_util::BodyExt as _;
        let exchange = async {
            let reply = match &mut self.send {
                Sender::H1(send) => {
                    request
                        .headers_mut()
                        .insert(hyper::header::HOST, self.host_header.clone());
                    send.ready().await?;
                    send.send_request(request).await?
                }
                Sender::H2(send) => {
                    // HTTP/2 names the server in the :authority pseudo-header, from the URI.
                    *request.uri_mut() =
                        format!("http://{}{}", self.host, request.uri()).parse()?;
                    send.ready().await?;
                    send.send_request(request).await?
                }
            };
            let status = reply.status();
            let location = reply
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = reply.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, location, bytes))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {REQUEST_TIMEOUT:?}"))?
    }
}

/// Each of `connections` clients acquires and releases its own lock name (`u-<i>`) in a loop
/// until `deadline`, all on the calling thread's runtime. Returns the acquire and release
/// times.
pub async fn cycle_loop(
    authority: &str,
    connections: usize,
    deadline: Instant,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..connections {
        let mut conn = Conn::open(authority).await?;
        tasks.spawn(async move {
            let lock = format!("u-{i}");
            let (mut acq, mut rel) = (Vec::new(), Vec::new());
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = conn.acquire(&lock, r#"{"ttl_ms":30000}"#, 0).await?;
                let t1 = Instant::now();
                conn.release(&held).await?;
                acq.push(t1 - t0);
                rel.push(t1.elapsed());
            }
            anyhow::Ok((acq, rel))
        });
    }
    let (mut acq, mut rel) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (a, r) = done??;
        acq.extend(a);
        rel.extend(r);
    }
    Ok((acq, rel))
}
