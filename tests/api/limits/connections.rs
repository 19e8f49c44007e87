//! Limits on connections and their bytes: slow headers and bodies, idle and surplus
//! connections, one address's share, HTTP/2 streams, a protocol told from trickling bytes.

use std::time::{Duration, Instant};

use leasehold::server::listener::HttpLimits;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::helpers::{AppOptions, spawn_app_with};

/// Reads until the server closes the connection (or 10 s pass): what it sent, and when.
async fn read_until_closed(stream: &mut TcpStream, started: Instant) -> (String, Duration) {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn a_client_sending_its_headers_byte_by_byte_is_cut_off() {
    let app = spawn_app_with(AppOptions {
        http: HttpLimits {
            header_timeout: Duration::from_millis(500),
            ..leasehold::server::ServerConfig::new("").http
        },
        ..AppOptions::default()
    })
    .await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(b"GET /v1/locks/x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    // One more header byte every 100 ms, never the blank line that ends the headers.
    let trickle = async {
        for byte in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .iter()
            .cycle()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if stream.write_all(&[*byte]).await.is_err() {
                return started.elapsed();
            }
        }
        started.elapsed()
    };
    let cut = tokio::time::timeout(Duration::from_secs(10), trickle)
        .await
        .expect("the server cut the connection within 10 s");
    eprintln!("slow headers (header timeout 500 ms): connection cut after {cut:?}");
    assert!(
        cut >= Duration::from_millis(450) && cut < Duration::from_millis(2500),
        "{cut:?}"
    );
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_silent_one_too() {
    let app = spawn_app_with(AppOptions {
        http: HttpLimits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_millis(400),
            ..leasehold::server::ServerConfig::new("").http
        },
        ..AppOptions::default()
    })
    .await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let (received, closed) = read_until_closed(&mut stream, started).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    eprintln!(
        "idle keep-alive connection (idle timeout 400 ms): closed {closed:?} after its answer"
    );
    assert!(
        closed >= Duration::from_millis(350) && closed < Duration::from_secs(3),
        "{closed:?}"
    );
    // A connection that never says anything goes the same way.
    let mut silent = TcpStream::connect(app.addr).await.expect("connect");
    let (_, closed) = read_until_closed(&mut silent, Instant::now()).await;
    eprintln!("silent connection: closed after {closed:?}");
    assert!(closed < Duration::from_secs(3), "{closed:?}");
}

#[tokio::test]
async fn connections_past_the_cap_get_one_503_and_are_closed() {
    let app = spawn_app_with(AppOptions {
        http: HttpLimits {
            max_connections: 2,
            ..leasehold::server::ServerConfig::new("").http
        },
        ..AppOptions::default()
    })
    .await;
    // The test app's own client holds a keep-alive connection from the readiness check; two
    // raw ones fill the cap whatever it holds.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(app.addr).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 512];
        let _ = stream.read(&mut buf).await;
        held.push(stream);
    }
    let mut extra = TcpStream::connect(app.addr).await.expect("connect");
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let (received, closed) = read_until_closed(&mut extra, Instant::now()).await;
    eprintln!(
        "a connection over the cap of 2: closed after {closed:?} with:\n{}",
        received
            .lines()
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(received.starts_with("HTTP/1.1 503"), "{received}");
    assert!(received.contains("too_many_connections"), "{received}");
    assert!(
        received.to_ascii_lowercase().contains("retry-after: 1"),
        "{received}"
    );
    assert!(closed < Duration::from_secs(2), "{closed:?}");
    drop(held);
}

#[tokio::test]
async fn one_address_cannot_take_every_connection_slot() {
    let app = spawn_app_with(AppOptions {
        http: HttpLimits {
            max_connections: 20,
            max_connections_per_address: 4,
            limit_loopback: true,
            ..leasehold::server::ServerConfig::new("").http
        },
        ..AppOptions::default()
    })
    .await;
    // Half-sent requests from 127.0.0.2 (loopback, but another address than the test's own).
    let from = |ip: &str| {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(format!("{ip}:0").parse().expect("addr"))
            .expect("bind");
        socket
    };
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut stream = from("127.0.0.2").connect(app.addr).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHo")
            .await
            .expect("write");
        slow.push(stream);
    }
    let mut fifth = from("127.0.0.2").connect(app.addr).await.expect("connect");
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let (received, _) = read_until_closed(&mut fifth, Instant::now()).await;
    assert!(received.starts_with("HTTP/1.1 503"), "{received}");
    assert!(received.contains("too_many_connections"), "{received}");
    // Another address still gets in.
    let mut other = from("127.0.0.3").connect(app.addr).await.expect("connect");
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let (received, _) = read_until_closed(&mut other, Instant::now()).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    drop(slow);
}

#[tokio::test]
async fn an_http2_connection_carries_at_most_its_stream_cap_at_once() {
    let app = spawn_app_with(AppOptions {
        http: HttpLimits {
            max_h2_streams: 2,
            ..leasehold::server::ServerConfig::new("").http
        },
        ..AppOptions::default()
    })
    .await;
    app.lease("busy", json!({"ttl_ms": 60_000})).await;
    let h2 = leasehold::client::http_builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2 client");
    // Three waits of 600 ms each on one connection: with two streams at a time, the third
    // starts only when one ends.
    let started = Instant::now();
    let waits = (0..3).map(|_| {
        let h2 = h2.clone();
        let url = app.url("/v1/locks/busy/leases?wait_ms=600");
        async move {
            let reply = h2.post(url).json(&json!({})).send().await.expect("request");
            assert_eq!(reply.version(), reqwest::Version::HTTP_2);
            reply.status().as_u16()
        }
    });
    let statuses = futures_util::future::join_all(waits).await;
    let elapsed = started.elapsed();
    eprintln!(
        "three 600 ms waits over one HTTP/2 connection capped at 2 streams: {elapsed:?} {statuses:?}"
    );
    assert_eq!(statuses, [409, 409, 409]);
    assert!(elapsed >= Duration::from_millis(1150), "{elapsed:?}");
}

#[tokio::test]
async fn a_connections_protocol_is_told_from_first_bytes_that_trickle_in() {
    let app = spawn_app_with(AppOptions::default()).await;
    // HTTP/2 with prior knowledge, its preface split with a pause in the middle: the server
    // waits for the rest and answers as HTTP/2 (its first frame is SETTINGS, type 4).
    let mut h2 = TcpStream::connect(app.addr).await.expect("connect");
    h2.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    tokio::time::sleep(Duration::from_millis(150)).await;
    h2.write_all(b"\r\nSM\r\n\r\n").await.expect("write");
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    h2.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .expect("write");
    let mut frame = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), h2.read_exact(&mut frame))
        .await
        .expect("an answer within 5 s")
        .expect("read");
    assert_eq!(frame[3], 4, "first frame {frame:?}");

    // HTTP/1.1 one byte at a time, starting with the same letter as the preface.
    let mut h1 = TcpStream::connect(app.addr).await.expect("connect");
    let request = "POST /v1/locks/trickle/leases HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                   Content-Type: application/json\r\nContent-Length: 2\r\n\
                   Connection: close\r\n\r\n{}";
    for (i, byte) in request.bytes().enumerate() {
        h1.write_all(&[byte]).await.expect("write");
        if i < 4 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (received, _) = read_until_closed(&mut h1, Instant::now()).await;
    assert!(received.starts_with("HTTP/1.1 201"), "{received}");
}

#[tokio::test]
async fn a_body_sent_too_slowly_is_cut_off_with_408() {
    let app = spawn_app_with(AppOptions {
        body_timeout: Duration::from_millis(300),
        ..AppOptions::default()
    })
    .await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(
            b"POST /v1/locks/slow/leases HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{",
        )
        .await
        .expect("write");
    let (received, took) = read_until_closed(&mut stream, started).await;
    eprintln!("a body that stops after one byte (body timeout 300 ms): answered after {took:?}");
    assert!(received.starts_with("HTTP/1.1 408"), "{received}");
    assert!(received.contains("body_timeout"), "{received}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    app.inspect_lock("slow")
        .await
        .assert_problem(404, "lock_not_found");
}
