//! The accept loop: hyper (HTTP/1.1 and HTTP/2, cleartext or TLS) driven with a timer, which
//! `axum::serve` does not give it. So a client that sends its headers byte by byte is cut off
//! after the header timeout, a connection with no request in flight is closed after the idle
//! timeout, an HTTP/2 connection carries a bounded number of streams, and the number of
//! connections is capped: past the cap a connection gets one `503 too_many_connections`
//! answer and is closed (past twice the cap it is closed at once). A cleartext connection's
//! protocol is told from its first bytes (HTTP/2's preface or not), a TLS one's by ALPN. Every
//! connection's task is kept small: a parked waiter holds one for as long as it waits.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod activity;
mod connection;
mod per_address;

use connection::{Connection, Shared};
use per_address::PerAddress;

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
