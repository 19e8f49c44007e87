//! Fair locks: strict FIFO among live waiters, tickets that keep a place, waiters that leave.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::helpers::{
    AppOptions, Lease, Reply, TestApp, Ticket, holder_of, spawn_app, spawn_app_with,
};

const FAIR: &str = "/v1/locks/fifo/leases?wait_ms=30000";

#[tokio::test]
async fn twenty_waiters_are_granted_in_arrival_order() {
    let app = spawn_app().await;
    let first = app.lease("fifo", json!({"kind": "fair"})).await;
    let mut waiters = Vec::new();
    for i in 0..20u64 {
        waiters.push(app.spawn_post(FAIR, json!({"kind": "fair", "holder": format!("w{i}")})));
        // Each one is queued before the next arrives.
        app.wait_for_waiters(i + 1).await;
    }
    let queue = app.inspect_lock("fifo").await;
    assert_eq!(queue.body["queue_length"], 20);
    assert_eq!(queue.body["queue"][0]["holder"], "w0");
    assert_eq!(queue.body["queue"][19]["holder"], "w19");

    app.release(&first, false).await.assert_status(200);
    let mut order = Vec::new();
    let mut last_fence = first.fencing_token;
    let mut pending = waiters;
    while !pending.is_empty() {
        let (reply, _, rest) = futures_util::future::select_all(pending).await;
        pending = rest;
        let reply = reply.expect("task");
        let lease = Lease::from_reply("fifo", &reply);
        order.push(reply.str("holder"));
        assert!(
            lease.fencing_token > last_fence,
            "each holder fences higher"
        );
        last_fence = lease.fencing_token;
        app.release(&lease, false).await.assert_status(200);
    }
    let expected: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    assert_eq!(order, expected);
}

#[tokio::test]
async fn a_waiter_that_disconnects_leaves_the_queue_at_once() {
    let app = spawn_app().await;
    let first = app.lease("fifo", json!({"kind": "fair"})).await;
    let w1 = app.spawn_post(FAIR, json!({"kind": "fair", "holder": "w1"}));
    app.wait_for_waiters(1).await;
    let impatient = leasehold::client::http_builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(app.url(FAIR))
        .json(&json!({"kind": "fair", "holder": "w2"}))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    let w3 = app.spawn_post(FAIR, json!({"kind": "fair", "holder": "w3"}));
    app.wait_for_waiters(2).await;
    let queue = app.inspect_lock("fifo").await;
    let holders: Vec<_> = queue.body["queue"]
        .as_array()
        .expect("queue")
        .iter()
        .map(|q| q["holder"].clone())
        .collect();
    assert_eq!(
        holders,
        vec![json!("w1"), json!("w3")],
        "w2 left when its request ended"
    );

    app.release(&first, false).await.assert_status(200);
    let w1 = Lease::from_reply("fifo", &w1.await.expect("task"));
    app.release(&w1, false).await.assert_status(200);
    // w3 is next, at once: not held up by the waiter that left.
    let w3 = tokio::time::timeout(Duration::from_secs(3), w3)
        .await
        .expect("w3 granted")
        .expect("task");
    assert_eq!(w3.body["holder"], "w3");
}

#[tokio::test]
async fn a_ticket_keeps_its_place_across_requests() {
    let app = spawn_app().await;
    let first = app.lease("fifo", json!({"kind": "fair"})).await;
    let queued = app
        .acquire("fifo", json!({"kind": "fair", "holder": "patient"}))
        .await;
    queued.assert_status(202);
    assert_eq!(queued.body["position"], 1);
    assert_eq!(queued.header("retry-after"), Some("0"));
    assert_eq!(queued.body["poll_timeout_ms"], 5000);
    let location = queued.header("location").expect("Location").to_owned();
    let token = queued.str("token");
    assert_eq!(
        location,
        format!("/v1/locks/fifo/tickets/{}", queued.str("ticket_id"))
    );

    let later = app.spawn_post(FAIR, json!({"kind": "fair", "holder": "later"}));
    app.wait_for_waiters(1).await;
    let still = app.poll_ticket(&location, &token, 0).await;
    still.assert_status(202);
    assert_eq!(still.body["position"], 1);
    assert!(still.body.get("token").is_none(), "shown only when issued");

    app.release(&first, false).await.assert_status(200);
    let granted = app.poll_ticket(&location, &token, 5000).await;
    granted.assert_status(201);
    assert_eq!(granted.str("lease_id"), queued.str("ticket_id"));
    let lease = Lease::from_reply("fifo", &granted);
    app.heartbeat(&lease, json!({})).await.assert_status(200);
    app.release(&lease, false).await.assert_status(200);
    later.await.expect("task").assert_status(201);
}

#[tokio::test]
async fn a_ticket_that_is_not_polled_expires() {
    let app = spawn_app_with(AppOptions {
        ticket_timeout_ms: 300,
        ..Default::default()
    })
    .await;
    let first = app.lease("fifo", json!({"kind": "fair"})).await;
    let silent = app.acquire("fifo", json!({"kind": "fair"})).await;
    silent.assert_status(202);
    let next = app.spawn_post(FAIR, json!({"kind": "fair", "holder": "next"}));
    app.wait_for_waiters(1).await;
    app.release(&first, false).await.assert_status(200);
    // The silent ticket's deadline passes; the next waiter is not stuck behind it.
    let reply = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("granted")
        .expect("task");
    reply.assert_status(201);
    assert_eq!(reply.body["holder"], "next");
    let late = app
        .poll_ticket(
            silent.header("location").expect("Location"),
            &silent.str("token"),
            0,
        )
        .await;
    late.assert_problem(410, "ticket_expired");
}

#[tokio::test]
async fn leaving_the_queue_by_delete() {
    let app = spawn_app().await;
    app.lease("fifo", json!({"kind": "fair"})).await;
    let ticket = app.ticket("fifo", json!({"kind": "fair"})).await;
    let reply = app.leave(&ticket).await;
    reply.assert_status(200);
    assert_eq!(reply.body["left"], true);
    assert_eq!(app.inspect_lock("fifo").await.body["queue_length"], 0);
    app.poll_ticket(&ticket.path, &ticket.token, 0)
        .await
        .assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn a_fair_lock_is_reentrant_and_excludes_other_kinds() {
    let app = spawn_app().await;
    let lease = app.lease("fifo", json!({"kind": "fair"})).await;
    let again = app
        .acquire_with("fifo", 0, json!({}), Some(&lease.token))
        .await;
    again.assert_status(200);
    assert_eq!(again.body["reentry_count"], 2);
    let other = app.acquire("fifo", json!({})).await;
    other.assert_problem(409, "kind_conflict");
    assert_eq!(other.body["held_as"], "fair");
    // The detail reads as English for every kind ("an exclusive lock", not "a exclusive").
    let plain = app.lease("plain", json!({"kind": "exclusive"})).await;
    let refused = app.acquire("plain", json!({"kind": "fair"})).await;
    refused.assert_problem(409, "kind_conflict");
    let detail = refused.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("as an exclusive lock"), "{detail}");
    app.release(&plain, false).await.assert_status(200);
}

#[tokio::test]
async fn exclusive_locks_refuse_reentry() {
    let app = spawn_app().await;
    let lease = app.lease("cron", json!({"kind": "exclusive"})).await;
    let again = app
        .acquire_with("cron", 0, json!({}), Some(&lease.token))
        .await;
    again.assert_problem(409, "not_reentrant");
    app.acquire("cron", json!({"kind": "exclusive"}))
        .await
        .assert_problem(409, "lock_held");
    assert_eq!(
        app.inspect_lock("cron").await.body["holders"][0]["reentry_count"],
        1
    );
    app.release(&lease, false).await.assert_status(200);
    app.lease("cron", json!({"kind": "exclusive"})).await;
}

/// Found by the official clients: a ticket nobody polled in time was still listed (and
/// counted in `queue_length`) until someone served the queue.
#[tokio::test]
async fn a_ticket_nobody_polls_in_time_is_not_listed_as_waiting() {
    let app = crate::helpers::spawn_app_with(crate::helpers::AppOptions {
        ticket_timeout_ms: 300,
        ..crate::helpers::AppOptions::default()
    })
    .await;
    app.lease(
        "deploy",
        serde_json::json!({"kind": "fair", "ttl_ms": 60_000}),
    )
    .await;
    let ticket = app
        .acquire_with("deploy", 0, serde_json::json!({"kind": "fair"}), None)
        .await;
    ticket.assert_status(202);
    assert_eq!(app.inspect_lock("deploy").await.body["queue_length"], 1);
    // Its poll deadline passes (the ticket timeout, 300 ms here) without a poll.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let lock = app.inspect_lock("deploy").await;
    assert_eq!(lock.body["queue_length"], 0, "{}", lock.body);
    assert_eq!(
        lock.body["queue"].as_array().map(Vec::len),
        Some(0),
        "{}",
        lock.body
    );
}

/// A fair lock held by someone, and a ticket queued behind it (202).
async fn queued_ticket(app: &TestApp) -> (Lease, Reply) {
    let holder = app.lease("fifo", json!({"kind": "fair"})).await;
    let queued = app
        .acquire("fifo", json!({"kind": "fair", "holder": "t"}))
        .await;
    queued.assert_status(202);
    (holder, queued)
}

fn location(reply: &Reply) -> String {
    reply.header("location").expect("Location").to_owned()
}

// Found by the safety harness (overlapping holds after a re-polled fair ticket).
#[tokio::test]
async fn a_ticket_polled_again_after_its_grant_gets_the_same_grant_and_keeps_it() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    app.release(&holder, false).await.assert_status(200);
    let granted = app.poll_ticket(&at, &token, 5_000).await;
    granted.assert_status(201);
    let again = app.poll_ticket(&at, &token, 0).await;
    again.assert_status(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.str("lease_id"), granted.str("lease_id"));
    assert_eq!(again.u64("fencing_token"), granted.u64("fencing_token"));
    // The lease is still held: nobody else gets the lock, and its holder can heartbeat.
    assert_eq!(
        holder_of(&app, "fifo").await["lease_id"],
        granted.str("lease_id")
    );
    app.acquire("fifo", json!({"kind": "fair"}))
        .await
        .assert_status(202);
    let lease = Ticket::from_reply("fifo", &queued).lease(&granted);
    app.heartbeat(&lease, json!({})).await.assert_status(200);
}

// Found by the safety harness (overlapping holds after a fair ticket polled twice at once).
#[tokio::test]
async fn two_polls_of_one_ticket_at_once_both_get_the_grant_and_it_stays() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    let poll = || {
        let req = app
            .http
            .post(app.url(&format!("{at}?wait_ms=10000")))
            .bearer_auth(&token);
        tokio::spawn(async move { Reply::read(req.send().await.expect("request")).await })
    };
    let (first, second) = (poll(), poll());
    app.wait_for_waiters(2).await;
    app.release(&holder, false).await.assert_status(200);
    let (first, second) = (first.await.expect("task"), second.await.expect("task"));
    for reply in [&first, &second] {
        reply.assert_status(201);
        assert_eq!(reply.str("lease_id"), queued.str("ticket_id"));
    }
    assert_eq!(
        holder_of(&app, "fifo").await["lease_id"],
        queued.str("ticket_id")
    );
}

#[tokio::test]
async fn an_abandoned_ticket_blocks_other_kinds_only_for_its_liveness_window() {
    let app = spawn_app_with(AppOptions {
        ticket_timeout_ms: 300,
        ..Default::default()
    })
    .await;
    let (holder, _abandoned) = queued_ticket(&app).await;
    app.release(&holder, false).await.assert_status(200);
    app.acquire("fifo", json!({}))
        .await
        .assert_problem(409, "kind_conflict");
    // Its place runs out (never polled); then the name is free for any kind.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = app.acquire("fifo", json!({})).await;
        if reply.status == 201 {
            break;
        }
        reply.assert_problem(409, "kind_conflict");
        assert!(
            Instant::now() < deadline,
            "the dead ticket still blocks the name"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_poll_that_meets_a_frozen_redis_keeps_the_ticket_in_line() {
    let app = spawn_app().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    app.redis.signal(Signal::SIGSTOP);
    let failed = app.poll_ticket(&at, &token, 0).await;
    app.redis.signal(Signal::SIGCONT);
    failed.assert_problem(503, "redis_unavailable");
    let still = app.poll_ticket(&at, &token, 0).await;
    still.assert_status(202);
    assert_eq!(still.body["position"], 1);
    app.release(&holder, false).await.assert_status(200);
    app.poll_ticket(&at, &token, 5_000).await.assert_status(201);
}

#[tokio::test]
async fn an_instance_shutting_down_mid_poll_keeps_the_ticket_in_line() {
    let app = spawn_app().await;
    let peer = app.spawn_peer().await;
    let (holder, queued) = queued_ticket(&app).await;
    let (at, token) = (location(&queued), queued.str("token"));
    let waiting = {
        let req = peer
            .http
            .post(peer.url(&format!("{at}?wait_ms=20000")))
            .bearer_auth(&token);
        tokio::spawn(async move { Reply::read(req.send().await.expect("request")).await })
    };
    peer.wait_for_waiters(1).await;
    peer.shutdown.cancel();
    waiting
        .await
        .expect("task")
        .assert_problem(503, "shutting_down");
    let still = app.poll_ticket(&at, &token, 0).await;
    still.assert_status(202);
    assert_eq!(still.body["position"], 1);
    app.release(&holder, false).await.assert_status(200);
    app.poll_ticket(&at, &token, 5_000).await.assert_status(201);
}
