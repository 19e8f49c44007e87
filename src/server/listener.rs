//! The accept loop: hyper (HTTP/1.1 and HTTP/2, cleartext or TLS) driven with a timer, which
//! `axum::serve` does not give it. So a client that sends its headers byte by byte is cut off
//! after the header timeout, a connection with no request in flight is closed after the idle
//! timeout, an HTTP/2 connection carries a bounded number of streams, and the number of
//! connections is capped: past the cap a connection gets one `503 too_many_connections`
//! answer and is closed (past twice the cap it is closed at once).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse as _;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::problem::{Problem, ProblemKind};

/// Bounds on connections, whatever their requests are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a client may take to send a request's headers (and, with TLS, to finish the
    /// handshake).
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Open connections at once.
    pub max_connections: usize,
    /// Concurrent streams on one HTTP/2 connection.
    pub max_h2_streams: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 16_384,
            max_h2_streams: 200,
        }
    }
}

/// Whether a request arrived over TLS (a request extension, for the dashboard's cookies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secure(pub bool);

/// Serves `app` on `listener` until `shutdown`, then waits for open connections to finish
/// (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
) {
    // Every route in its final form, once: a `Router` that still holds its method routers
    // turns each handler into a service again on every request, and a clone per connection
    // carries that whole table (most of what a parked HTTP/1.1 waiter cost).
    let app: Router = app.with_state(());
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let tracker = TaskTracker::new();
    let builder = Arc::new(builder(&limits));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: breathe, then go on.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            builder: builder.clone(),
            limits,
            tls: tls.clone(),
            peer,
            shutdown: shutdown.clone(),
        };
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            tracker.spawn(async move {
                connection.run(stream, false).await;
                drop(slot);
            });
        } else if let Ok(refusal) = refusals.clone().try_acquire_owned() {
            tracker.spawn(async move {
                connection.run(stream, true).await;
                drop(refusal);
            });
        }
        // Else: dropped unanswered, the cheapest way to shed a flood.
    }
    tracker.close();
    tracker.wait().await;
}

fn builder(limits: &HttpLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_h2_streams)
        // Pings find peers that vanished without closing.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

struct Connection {
    app: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    peer: SocketAddr,
    shutdown: CancellationToken,
}

impl Connection {
    /// Serves one connection (`refuse`: answer every request 503 and close).
    async fn run(self, stream: TcpStream, refuse: bool) {
        match self.tls.clone() {
            None => self.serve(stream, false, refuse).await,
            Some(acceptor) => {
                let handshake =
                    tokio::time::timeout(self.limits.header_timeout, acceptor.accept(stream)).await;
                match handshake {
                    Ok(Ok(stream)) => self.serve(stream, true, refuse).await,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, peer = %self.peer, "TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(peer = %self.peer, "TLS handshake timed out"),
                }
            }
        }
    }

    async fn serve<I>(self, io: I, secure: bool, refuse: bool)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        let service = {
            let activity = activity.clone();
            let app = self.app.clone();
            let peer = self.peer;
            tower::service_fn(move |mut request: Request<Incoming>| {
                let active = activity.begin();
                let app = app.clone();
                async move {
                    if refuse {
                        return Ok::<_, Infallible>(too_many_connections());
                    }
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request.extensions_mut().insert(Secure(secure));
                    let response = app.oneshot(request.map(Body::new)).await?;
                    Ok(response.map(|body| {
                        Body::new(Tracked {
                            body,
                            _active: active,
                        })
                    }))
                }
            })
        };
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service));
        tokio::pin!(connection);
        // Once closing (idle, refused, or the server stops), the connection gets this long to
        // finish what it is sending before it is dropped.
        let mut closing_by: Option<Instant> = None;
        loop {
            let give_up = async {
                match closing_by {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = connection.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(error = %e, peer = %self.peer, "connection ended with an error");
                    }
                    return;
                }
                () = self.shutdown.cancelled(), if closing_by.is_none() => {
                    connection.as_mut().graceful_shutdown();
                    // The server's drain limit bounds this one.
                    closing_by = Some(Instant::now() + Duration::from_secs(3600));
                }
                () = activity.idle_for(self.limits.idle_timeout), if closing_by.is_none() => {
                    connection.as_mut().graceful_shutdown();
                    closing_by = Some(Instant::now() + self.limits.header_timeout);
                }
                () = give_up => return,
            }
        }
    }
}

/// The one answer a connection over the cap gets.
fn too_many_connections() -> Response<Body> {
    let mut response = Problem::new(
        ProblemKind::TooManyConnections,
        "the server is at its connection limit (--max-connections); retry shortly",
    )
    .retry_after(Duration::from_secs(1))
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Requests in flight on one connection (counted until their response body is done) and
/// since when there have been none.
#[derive(Clone)]
struct Activity {
    state: Arc<watch::Sender<(usize, Instant)>>,
}

/// One request in flight; dropping it (the body sent, or abandoned) ends it.
struct Active {
    state: Arc<watch::Sender<(usize, Instant)>>,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Arc::new(watch::Sender::new((0, Instant::now()))),
        }
    }

    fn begin(&self) -> Active {
        self.state.send_modify(|(n, _)| *n += 1);
        Active {
            state: self.state.clone(),
        }
    }

    /// Resolves once no request has been in flight for `limit`.
    async fn idle_for(&self, limit: Duration) {
        let mut rx = self.state.subscribe();
        loop {
            let (in_flight, since) = *rx.borrow_and_update();
            if in_flight == 0 {
                tokio::select! {
                    () = tokio::time::sleep_until(since + limit) => return,
                    changed = rx.changed() => if changed.is_err() { return },
                }
            } else if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.state.send_modify(|(n, since)| {
            *n = n.saturating_sub(1);
            if *n == 0 {
                *since = Instant::now();
            }
        });
    }
}

/// A response body that keeps its request counted as in flight until it is done (an event
/// stream stays in flight for as long as it streams).
struct Tracked {
    body: Body,
    _active: Active,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
