//! One connection's task: the protocol's builder driven with the timers and caps, the
//! service in front of the router (request ids, peer address, the connection cap's one
//! `503`), kept small since a parked waiter holds it for its whole wait.

use crate::problem::{Problem, ProblemKind};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse as _;
use axum::routing::future::RouteFuture;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulConnection;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::activity::{Active, Activity, Tracked};
use super::*;

/// What every connection of one server shares.
pub(super) struct Shared {
    pub(super) app: Router,
    pub(super) builders: Builders,
    pub(super) limits: HttpLimits,
    pub(super) tls: Option<TlsAcceptor>,
    pub(super) shutdown: CancellationToken,
}

/// One accepted connection. Small on purpose: its futures are in every connection's task.
pub(super) struct Connection {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
}

impl Connection {
    /// Serves one connection (`refuse`: answer every request 503 and close).
    pub(super) async fn run(self, stream: TcpStream, refuse: bool) {
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

    pub(super) async fn serve_tls(self, acceptor: TlsAcceptor, stream: TcpStream, refuse: bool) {
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
    pub(super) async fn serve<I, C>(
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
    pub(super) async fn drive<C>(&self, mut connection: Pin<&mut C>, activity: &Activity)
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
pub(super) struct Front {
    pub(super) app: Router,
    pub(super) peer: SocketAddr,
    pub(super) secure: bool,
    /// Over the connection cap: every request gets `too_many_connections`.
    pub(super) refuse: bool,
    pub(super) activity: Activity,
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
    pub(super) enum InFlight {
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
pub(super) fn too_many_connections() -> Response<Body> {
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
