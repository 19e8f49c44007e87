//! The accept loop: hyper (HTTP/1.1 and HTTP/2, cleartext or TLS) driven with a timer, which
//! `axum::serve` does not give it. So a client that sends its headers byte by byte is cut off
//! after the header timeout, a connection with no request in flight is closed after the idle
//! timeout, an HTTP/2 connection carries a bounded number of streams, and the number of
//! connections is capped: past the cap a connection gets one `503 too_many_connections`
//! answer and is closed (past twice the cap it is closed at once). A cleartext connection's
//! protocol is told from its first bytes (HTTP/2's preface or not), a TLS one's by ALPN. Every
//! connection's task is kept small: a parked waiter holds one for as long as it waits.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse as _;
use axum::routing::future::RouteFuture;
use http_body::Frame;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
    /// Open connections at once from one address (0: a quarter of `max_connections`), so
    /// that one address's half-sent requests cannot take every slot.
    pub max_connections_per_address: usize,
    /// Whether loopback addresses are held to `max_connections_per_address` too. Off by
    /// default: on loopback the address names the machine, not a client.
    pub limit_loopback: bool,
    /// Concurrent streams on one HTTP/2 connection.
    pub max_h2_streams: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 16_384,
            max_connections_per_address: 0,
            limit_loopback: false,
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
    let per_address = Arc::new(PerAddress::new(&limits));
    let tracker = TaskTracker::new();
    let shared = Arc::new(Shared {
        app,
        builders: builders(&limits),
        limits,
        tls,
        shutdown: shutdown.clone(),
    });
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
            shared: shared.clone(),
            peer,
        };
        let own = per_address.take(peer.ip());
        if let Some(own) = own
            && let Ok(slot) = slots.clone().try_acquire_owned()
        {
            tracker.spawn(async move {
                connection.run(stream, false).await;
                drop((slot, own));
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

/// Connections open per address, held to a cap (loopback exempt unless asked).
struct PerAddress {
    cap: usize,
    limit_loopback: bool,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address's count; given back on drop.
struct AddressSlot {
    per_address: Option<(Arc<PerAddress>, IpAddr)>,
}

impl PerAddress {
    fn new(limits: &HttpLimits) -> Self {
        let cap = match limits.max_connections_per_address {
            0 => (limits.max_connections / 4).max(1),
            n => n,
        };
        Self {
            cap,
            limit_loopback: limits.limit_loopback,
            open: Mutex::default(),
        }
    }

    /// A place for one more connection from `ip`, or `None` when it has its cap open.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        if ip.is_loopback() && !self.limit_loopback {
            return Some(AddressSlot { per_address: None });
        }
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            per_address: Some((self.clone(), ip)),
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let Some((per_address, ip)) = self.per_address.take() else {
            return;
        };
        let mut open = per_address
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// The two protocol builders, set up once. Each connection gets the one its first bytes (or
/// its TLS ALPN) ask for, rather than hyper-util's `auto` builder: that one reads the first 24
/// bytes itself and replays them as a separate first read, which made hyper double its read
/// buffer on every HTTP/1.1 connection; and its connection type holds both protocols' state,
/// so every HTTP/1.1 task carried HTTP/2's too (BENCHMARKS.md, W12).
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

fn builders(limits: &HttpLimits) -> Builders {
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_h2_streams)
        // Pings find peers that vanished without closing.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20));
    Builders { http1, http2 }
}

/// What a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// HTTP/2's connection preface. A cleartext client speaking HTTP/2 from its first byte (prior
/// knowledge) starts with it; no HTTP/1.1 request can.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Tells a cleartext connection's protocol from its first bytes, without taking them off the
/// socket (hyper then reads the request whole). `None`: the peer closed first. Once part of
/// the preface has come, the rest must come within `header_timeout`.
async fn sniff(stream: &TcpStream, header_timeout: Duration) -> std::io::Result<Option<Protocol>> {
    let mut first = [0u8; H2_PREFACE.len()];
    let mut deadline = None;
    let mut pause = Duration::from_millis(2);
    loop {
        let n = stream.peek(&mut first).await?;
        if n == 0 {
            return Ok(None);
        }
        if first[..n] != H2_PREFACE[..n] {
            return Ok(Some(Protocol::Http1));
        }
        if n == H2_PREFACE.len() {
            return Ok(Some(Protocol::Http2));
        }
        // Part of the preface so far (rare: a request line split after its first letter, or
        // an HTTP/2 preface split in two). A peek returns at once while bytes wait unread, so
        // look again after a growing pause rather than spin.
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + header_timeout);
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the start of the request came too slowly",
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// What every connection of one server shares.
struct Shared {
    app: Router,
    builders: Builders,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
}

/// One accepted connection. Small on purpose: its futures are in every connection's task.
struct Connection {
    shared: Arc<Shared>,
    peer: SocketAddr,
}

impl Connection {
    /// Serves one connection (`refuse`: answer every request 503 and close).
    async fn run(self, stream: TcpStream, refuse: bool) {
        let shared = &*self.shared;
        match shared.tls.clone() {
            None => {
                // Nothing asked yet, so the idle limit bounds the wait for a first byte.
                let sniffed = tokio::select! {
                    sniffed = tokio::time::timeout(
                        shared.limits.idle_timeout,
                        sniff(&stream, shared.limits.header_timeout),
                    ) => sniffed,
                    () = shared.shutdown.cancelled() => return,
                };
                match sniffed {
                    Ok(Ok(Some(Protocol::Http1))) => {
                        self.serve(stream, false, refuse, |b, io, front| {
                            b.http1.serve_connection(io, front)
                        })
                        .await
                    }
                    // Boxed: an HTTP/2 connection's state is large, and an HTTP/1.1 task
                    // should not carry room for it (HTTP/2 multiplexes: its connections are
                    // few).
                    Ok(Ok(Some(Protocol::Http2))) => {
                        Box::pin(self.serve(stream, false, refuse, |b, io, front| {
                            b.http2.serve_connection(io, front)
                        }))
                        .await
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, peer = %self.peer, "connection failed")
                    }
                    Err(_) => {
                        tracing::debug!(peer = %self.peer, "connection silent past the idle timeout")
                    }
                }
            }
            // Boxed too: a TLS session's state is large.
            Some(acceptor) => Box::pin(self.serve_tls(acceptor, stream, refuse)).await,
        }
    }

    async fn serve_tls(self, acceptor: TlsAcceptor, stream: TcpStream, refuse: bool) {
        let timeout = self.shared.limits.header_timeout;
        match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            // Over TLS, HTTP/2 is agreed in the handshake (ALPN, RFC 9113 §3.2).
            Ok(Ok(stream)) => match stream.get_ref().1.alpn_protocol() {
                Some(b"h2") => {
                    self.serve(stream, true, refuse, |b, io, front| {
                        b.http2.serve_connection(io, front)
                    })
                    .await
                }
                _ => {
                    self.serve(stream, true, refuse, |b, io, front| {
                        b.http1.serve_connection(io, front)
                    })
                    .await
                }
            },
            Ok(Err(e)) => tracing::debug!(error = %e, peer = %self.peer, "TLS handshake failed"),
            Err(_) => tracing::debug!(peer = %self.peer, "TLS handshake timed out"),
        }
    }

    /// Serves the connection `connect` makes over `io`. It is built and pinned in place here
    /// and `drive` borrows it: an async fn taking it by value would hold it twice (as its
    /// argument, then pinned), and this future is in every HTTP/1.1 connection's task.
    async fn serve<I, C>(
        self,
        io: I,
        secure: bool,
        refuse: bool,
        connect: impl FnOnce(&Builders, TokioIo<I>, Front) -> C,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        C: GracefulConnection,
        C::Error: std::fmt::Display,
    {
        let activity = Activity::new();
        let front = Front {
            app: self.shared.app.clone(),
            peer: self.peer,
            secure,
            refuse,
            activity: activity.clone(),
        };
        let connection = std::pin::pin!(connect(&self.shared.builders, TokioIo::new(io), front));
        self.drive(connection, &activity).await;
    }

    /// Runs a connection to its end. Once it has had no request in flight for the idle
    /// limit, or the server stops, it is closed gracefully; if it has not finished by its
    /// deadline after that, it is dropped. One timer serves both limits.
    async fn drive<C>(&self, mut connection: Pin<&mut C>, activity: &Activity)
    where
        C: GracefulConnection,
        C::Error: std::fmt::Display,
    {
        let limits = &self.shared.limits;
        let mut closing = false;
        let timer = tokio::time::sleep_until(activity.idle_deadline(limits.idle_timeout));
        tokio::pin!(timer);
        loop {
            // Registered before the counts are read (in `idle_deadline`), so a request that
            // starts or ends in between is not missed.
            let changed = activity.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !closing {
                timer
                    .as_mut()
                    .reset(activity.idle_deadline(limits.idle_timeout));
            }
            tokio::select! {
                done = connection.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(error = %e, peer = %self.peer, "connection ended with an error");
                    }
                    return;
                }
                () = self.shared.shutdown.cancelled(), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                    // The server's drain limit bounds this one.
                    timer.as_mut().reset(Instant::now() + Duration::from_secs(3600));
                }
                () = changed, if !closing => {}
                () = timer.as_mut() => {
                    if closing {
                        return;
                    }
                    // Idle for the limit: it gets the header timeout to finish closing.
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                    timer.as_mut().reset(Instant::now() + limits.header_timeout);
                }
            }
        }
    }
}

/// A connection's service: it marks each request with where it came from and keeps it counted
/// as in flight until its response body is done. A hyper service of its own rather than a
/// tower one behind `TowerToHyperService`, whose future holds a clone of the service and the
/// request beside the router's own: this is in every parked waiter's in-flight future.
struct Front {
    app: Router,
    peer: SocketAddr,
    secure: bool,
    /// Over the connection cap: every request gets `too_many_connections`.
    refuse: bool,
    activity: Activity,
}

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = InFlight;

    fn call(&self, mut request: Request<Incoming>) -> InFlight {
        let active = Some(self.activity.begin());
        if self.refuse {
            return InFlight::Answered {
                response: Some(too_many_connections()),
                active,
            };
        }
        request.extensions_mut().insert(ConnectInfo(self.peer));
        request.extensions_mut().insert(Secure(self.secure));
        // A router is always ready (its `poll_ready` is `Ready(Ok(()))`), and a clone is one
        // reference count.
        let routed = tower::Service::call(&mut self.app.clone(), request.map(Body::new));
        InFlight::Routed { routed, active }
    }
}

pin_project_lite::pin_project! {
    /// A request being answered; the answer's body carries the request's `Active` on.
    #[project = InFlightProj]
    enum InFlight {
        Routed { #[pin] routed: RouteFuture<Infallible>, active: Option<Active> },
        Answered { response: Option<Response<Body>>, active: Option<Active> },
    }
}

impl Future for InFlight {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (response, active) = match self.project() {
            InFlightProj::Routed { routed, active } => match routed.poll(cx) {
                Poll::Ready(Ok(response)) => (Some(response), active),
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => return Poll::Pending,
            },
            InFlightProj::Answered { response, active } => (response.take(), active),
        };
        let (Some(response), Some(active)) = (response, active.take()) else {
            // Polled again after its answer: futures may not be, and hyper does not.
            return Poll::Pending;
        };
        Poll::Ready(Ok(response.map(|body| {
            Body::new(Tracked {
                body,
                _active: active,
            })
        })))
    }
}

/// The one answer a connection over the cap gets.
fn too_many_connections() -> Response<Body> {
    let mut response = Problem::new(
        ProblemKind::TooManyConnections,
        "the server is at its connection limit (--max-connections), or this address at its \
         own (--max-connections-per-address); retry shortly",
    )
    .retry_after(Duration::from_secs(1))
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Requests in flight on one connection (counted until their response body is done) and
/// since when there have been none. A mutex and a `Notify` rather than a `watch` channel:
/// this is one per connection, and a `watch` sender is about 370 bytes.
#[derive(Clone)]
struct Activity {
    shared: Arc<ActivityState>,
}

struct ActivityState {
    /// Requests in flight, and since when there have been none.
    counts: std::sync::Mutex<(usize, Instant)>,
    changed: Notify,
}

/// One request in flight; dropping it (the body sent, or abandoned) ends it.
struct Active {
    shared: Arc<ActivityState>,
}

impl Activity {
    fn new() -> Self {
        Self {
            shared: Arc::new(ActivityState {
                counts: std::sync::Mutex::new((0, Instant::now())),
                changed: Notify::new(),
            }),
        }
    }

    fn begin(&self) -> Active {
        self.shared.update(|(n, _)| *n += 1);
        Active {
            shared: self.shared.clone(),
        }
    }

    /// When the connection will have been idle for `limit`: far off while a request is in
    /// flight (a change wakes `changed()` first).
    fn idle_deadline(&self, limit: Duration) -> Instant {
        match self.shared.counts() {
            (0, since) => since + limit,
            _ => Instant::now() + Duration::from_secs(365 * 24 * 3600),
        }
    }

    /// Resolves at the next start or end of a request (enable it before reading the counts).
    fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.changed.notified()
    }
}

impl ActivityState {
    fn counts(&self) -> (usize, Instant) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut (usize, Instant))) {
        change(&mut self.counts.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.notify_waiters();
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.shared.update(|(n, since)| {
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
