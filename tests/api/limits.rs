//! Abuse limits, each with the answer a client gets and how fast it comes (the figures are
//! printed, so a run shows them): slow headers and bodies, idle and surplus connections,
//! HTTP/2 streams, request rates, quotas per caller across instances, waiters per lock, fair
//! queue length, reentry depth, event streams, admin reasons, a key's TTL and permits.

use std::time::{Duration, Instant};

use leasehold::limits::{ClientLimits, LockLimits};
use leasehold::server::listener::HttpLimits;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::helpers::{AppOptions, Reply, TestApp, spawn_app_with};

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

fn limited(clients: ClientLimits) -> AppOptions {
    AppOptions {
        clients,
        ..AppOptions::default()
    }
}

#[tokio::test]
async fn a_caller_over_its_request_rate_gets_429_with_retry_after() {
    let app = spawn_app_with(limited(ClientLimits {
        rate_per_second: 5,
        rate_burst: 5,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, one) = app
        .create_key(json!({"name": "one", "roles": ["reader"]}))
        .await;
    let (_, two) = app
        .create_key(json!({"name": "two", "roles": ["reader"]}))
        .await;
    let one = app.with_key(&one);
    let mut statuses = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let reply = one.get("/v1/locks/x").await;
        statuses.push(reply.status.as_u16());
        if reply.status == 429 {
            refused = Some(reply);
        }
    }
    eprintln!("eight requests at once, rate 5/s burst 5: {statuses:?}");
    assert_eq!(&statuses[..5], [404; 5]);
    let refused = refused.expect("a 429");
    refused.assert_problem(429, "rate_limited");
    let after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("secs");
    assert!((1..=2).contains(&after), "{after}");
    assert!(refused.body["retry_after_ms"].as_u64().expect("ms") <= 1000);
    eprintln!("  the refusal: Retry-After {after}, {}", refused.body);
    // Another key has its own budget.
    app.with_key(&two)
        .get("/v1/locks/x")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn anonymous_callers_are_limited_by_address_when_asked_on_loopback() {
    let app = spawn_app_with(limited(ClientLimits {
        rate_per_second: 3,
        rate_burst: 3,
        limit_loopback: true,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(app.get("/v1/locks/x").await.status.as_u16());
    }
    assert_eq!(statuses, [404, 404, 404, 429, 429]);
}

#[tokio::test]
async fn live_leases_per_key_hold_across_instances() {
    let app = spawn_app_with(AppOptions::default()).await;
    let twin = app.spawn_twin().await;
    let (_, secret) = app
        .create_key(json!({"name": "svc", "roles": ["client"], "quotas": {"max_leases": 2}}))
        .await;
    let (here, there) = (app.with_key(&secret), twin.with_key(&secret));
    let first = here.lease("l1", json!({"ttl_ms": 60_000})).await;
    there.lease("l2", json!({"ttl_ms": 60_000})).await;
    let refused = there.acquire("l3", json!({"ttl_ms": 60_000})).await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "live leases");
    let after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("secs");
    eprintln!(
        "a third lease with max_leases 2 (on the other instance): {} Retry-After {after}",
        refused.body
    );
    assert!(
        (59..=60).contains(&after),
        "the first lease ends in about 60 s: {after}"
    );
    // A reentry is no new lease.
    here.acquire_with("l1", 0, json!({}), Some(&first.token))
        .await
        .assert_status(200);
    // Released on one instance: room on the other.
    here.release(&first, true).await.assert_status(200);
    there.lease("l3", json!({"ttl_ms": 60_000})).await;
    // A lease whose TTL ran out stops counting by itself.
    let short = app
        .create_key(json!({"name": "short", "roles": ["client"], "quotas": {"max_leases": 1}}))
        .await
        .1;
    let short = app.with_key(&short);
    short.lease("s1", json!({"ttl_ms": 300})).await;
    short
        .acquire("s2", json!({"ttl_ms": 300}))
        .await
        .assert_problem(429, "quota_exceeded");
    tokio::time::sleep(Duration::from_millis(400)).await;
    short.lease("s2", json!({"ttl_ms": 300})).await;
}

#[tokio::test]
async fn waiting_requests_per_key_hold_across_instances() {
    let app = spawn_app_with(AppOptions::default()).await;
    let twin = app.spawn_twin().await;
    let (_, secret) = app
        .create_key(json!({"name": "svc", "roles": ["client"], "quotas": {"max_waiters": 1}}))
        .await;
    let (_, holder) = app
        .create_key(json!({"name": "holder", "roles": ["client"]}))
        .await;
    app.with_key(&holder)
        .lease("busy", json!({"ttl_ms": 60_000}))
        .await;
    let parked = app.with_key(&secret).spawn_waiter("busy", 5_000);
    app.wait_for_waiters(1).await;
    let refused = twin
        .with_key(&secret)
        .acquire_with("busy", 1_000, json!({}), None)
        .await;
    refused.assert_problem(429, "quota_exceeded");
    assert_eq!(refused.body["quota"], "waiting requests");
    eprintln!(
        "a second waiting request with max_waiters 1: {}",
        refused.body
    );
    // Not waiting is no waiter.
    twin.with_key(&secret)
        .acquire("busy", json!({}))
        .await
        .assert_problem(409, "lock_held");
    parked.abort();
}

fn per_lock(per_lock: LockLimits) -> AppOptions {
    AppOptions {
        per_lock,
        ..AppOptions::default()
    }
}

#[tokio::test]
async fn a_full_waiter_cap_answers_503() {
    let app = spawn_app_with(per_lock(LockLimits {
        waiters_per_lock: 2,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    app.lease("hot", json!({"ttl_ms": 60_000})).await;
    let waiters = [
        app.spawn_waiter("hot", 5_000),
        app.spawn_waiter("hot", 5_000),
    ];
    app.wait_for_waiters(2).await;
    let started = Instant::now();
    let refused = app.acquire_with("hot", 5_000, json!({}), None).await;
    let took = started.elapsed();
    refused.assert_problem(503, "too_many_waiters");
    assert_eq!(refused.header("retry-after"), Some("1"));
    eprintln!(
        "a third waiter on a lock capped at 2: {} in {took:?}, {}",
        refused.status, refused.body
    );
    // Other locks are unaffected, and asking without waiting is fine.
    app.acquire_with("cold", 1_000, json!({}), None)
        .await
        .assert_status(201);
    app.acquire("hot", json!({}))
        .await
        .assert_problem(409, "lock_held");
    for w in waiters {
        w.abort();
    }
}

#[tokio::test]
async fn a_full_fair_queue_answers_503() {
    let app = spawn_app_with(per_lock(LockLimits {
        fair_queue: 2,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    app.lease("line", json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    for _ in 0..2 {
        app.acquire_with("line", 50, json!({"kind": "fair"}), None)
            .await
            .assert_status(202);
    }
    let refused = app
        .acquire_with("line", 50, json!({"kind": "fair"}), None)
        .await;
    refused.assert_problem(503, "queue_full");
    eprintln!(
        "a third ticket in a fair queue capped at 2: {}",
        refused.body
    );
}

#[tokio::test]
async fn reentry_deeper_than_the_cap_is_refused_and_not_kept() {
    let app = spawn_app_with(per_lock(LockLimits {
        reentry_depth: 3,
        ..leasehold::server::ServerConfig::new("").limits.per_lock
    }))
    .await;
    let lease = app.lease("deep", json!({})).await;
    for level in 2..=3 {
        let reply = app
            .acquire_with("deep", 0, json!({}), Some(&lease.token))
            .await;
        reply.assert_status(200);
        assert_eq!(reply.u64("reentry_count"), level);
    }
    let refused = app
        .acquire_with("deep", 0, json!({}), Some(&lease.token))
        .await;
    refused.assert_problem(409, "reentry_too_deep");
    eprintln!("a fourth entry with depth cap 3: {}", refused.body);
    assert_eq!(app.inspect_lease(&lease).await.u64("reentry_count"), 3);
    // Three releases free it.
    for _ in 0..3 {
        app.release(&lease, false).await.assert_status(200);
    }
    assert_eq!(app.inspect_lock("deep").await.body["held"], false);
}

#[tokio::test]
async fn an_admin_reason_has_a_length_cap() {
    let app = spawn_app_with(AppOptions::default()).await;
    app.lease("stuck", json!({})).await;
    let long = "x".repeat(501);
    let refused = app
        .admin(
            reqwest::Method::DELETE,
            &format!("/v1/admin/locks/stuck?reason={long}"),
            None,
        )
        .await;
    refused.assert_problem(422, "reason_too_long");
    assert_eq!(app.inspect_lock("stuck").await.body["held"], true);
    app.admin(
        reqwest::Method::DELETE,
        &format!("/v1/admin/locks/stuck?reason={}", "x".repeat(500)),
        None,
    )
    .await
    .assert_status(200);
}

#[tokio::test]
async fn event_streams_per_caller_are_capped() {
    let app = spawn_app_with(limited(ClientLimits {
        streams: 2,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "watcher", "roles": ["reader"]}))
        .await;
    let watcher = app.with_key(&secret);
    let first = watcher
        .http
        .get(watcher.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    let second = watcher
        .http
        .get(watcher.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let third = Reply::read(
        watcher
            .http
            .get(watcher.url("/v1/events"))
            .send()
            .await
            .expect("sse"),
    )
    .await;
    third.assert_problem(429, "quota_exceeded");
    eprintln!("a third event stream with a cap of 2: {}", third.body);
    drop(first);
    // The slot comes back when a stream's client goes.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = watcher
            .http
            .get(watcher.url("/v1/events"))
            .send()
            .await
            .expect("sse");
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn lease_watches_count_as_the_callers_event_streams() {
    let app = spawn_app_with(limited(ClientLimits {
        streams: 2,
        ..leasehold::server::ServerConfig::new("").clients
    }))
    .await;
    let (_, secret) = app
        .create_key(json!({"name": "holder", "roles": ["client", "reader"]}))
        .await;
    let holder = app.with_key(&secret);
    let lease = holder.lease("watched", json!({"ttl_ms": 60_000})).await;
    let watch = || {
        holder
            .http
            .get(holder.url(&format!("{}/watch", lease.path)))
            .bearer_auth(&lease.token)
            .send()
    };
    let events = holder
        .http
        .get(holder.url("/v1/events"))
        .send()
        .await
        .expect("sse");
    let first = watch().await.expect("watch");
    assert_eq!(
        (events.status().as_u16(), first.status().as_u16()),
        (200, 200)
    );
    let third = Reply::read(watch().await.expect("watch")).await;
    third.assert_problem(429, "quota_exceeded");
    assert_eq!(third.body["quota"], "event streams");
    drop((events, first));
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

#[tokio::test]
async fn a_keys_own_ttl_and_permit_bounds_apply() {
    let app: TestApp = spawn_app_with(AppOptions::default()).await;
    let (_, secret) = app
        .create_key(json!({"name": "small", "roles": ["client"], "quotas": {"max_ttl_ms": 5000, "max_permits": 2}}))
        .await;
    let small = app.with_key(&secret);
    small
        .acquire("t", json!({"ttl_ms": 6000}))
        .await
        .assert_problem(422, "invalid_ttl");
    let lease = small.acquire("t", json!({})).await;
    lease.assert_status(201);
    assert_eq!(
        lease.u64("ttl_ms"),
        5000,
        "the default TTL is cut to the key's bound"
    );
    small
        .acquire_permits("p", 0, json!({"limit": 5, "permits": 3}))
        .await
        .assert_problem(422, "invalid_body");
    small
        .acquire_permits("p", 0, json!({"limit": 5, "permits": 2}))
        .await
        .assert_status(201);
}
