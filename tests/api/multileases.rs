//! Multileases (`/v1/multileases`): several locks as one lease, all or nothing; one token
//! renews, releases and watches them all; a member's end is the multilease's; no deadlock
//! between overlapping sets named in opposite orders; nothing held while waiting; every
//! Redis mode (standalone here, Cluster below).

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::helpers::cluster::Cluster;
use crate::helpers::{ADMIN_TOKEN, Reply, TestApp, spawn_app};

/// A granted multilease as its holder knows it.
struct Multi {
    id: String,
    token: String,
    members: Vec<Value>,
}

impl Multi {
    fn path(&self) -> String {
        format!("/v1/multileases/{}", self.id)
    }

    fn member(&self, lock: &str) -> &Value {
        self.members
            .iter()
            .find(|m| m["lock"] == lock)
            .unwrap_or_else(|| panic!("no member {lock}"))
    }
}

fn locks(names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({"name": n})).collect())
}

async fn post_multi(app: &TestApp, wait_ms: u64, body: Value) -> Reply {
    let url = app.url(&format!("/v1/multileases?wait_ms={wait_ms}"));
    app.send(app.http.post(url).json(&body)).await
}

async fn multi(app: &TestApp, body: Value) -> Multi {
    let reply = post_multi(app, 0, body).await;
    granted(&reply)
}

fn granted(reply: &Reply) -> Multi {
    reply.assert_status(201);
    let id = reply.str("lease_id");
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/multileases/{id}").as_str())
    );
    Multi {
        id,
        token: reply.str("token"),
        members: reply.body["members"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    }
}

async fn heartbeat(app: &TestApp, m: &Multi) -> Reply {
    let url = app.url(&format!("{}/heartbeat", m.path()));
    app.send(app.http.post(url).bearer_auth(&m.token).json(&json!({})))
        .await
}

async fn release(app: &TestApp, m: &Multi) -> Reply {
    let url = app.url(&m.path());
    app.send(app.http.delete(url).bearer_auth(&m.token)).await
}

async fn held(app: &TestApp, lock: &str) -> bool {
    app.inspect_lock(lock).await.body["held"] == true
}

#[tokio::test]
async fn a_multilease_holds_every_lock_as_one_lease_and_lets_them_all_go() {
    let app = spawn_app().await;
    let m = multi(
        &app,
        json!({"locks": [{"name": "orders"}, {"name": "stock", "kind": "write"}, {"name": "audit", "kind": "exclusive"}],
               "ttl_ms": 30_000, "holder": "billing", "metadata": {"job": 7}}),
    )
    .await;
    // One member per lock, in the order asked, each with its own fencing token.
    let named: Vec<&str> = m
        .members
        .iter()
        .filter_map(|x| x["lock"].as_str())
        .collect();
    assert_eq!(named, ["orders", "stock", "audit"]);
    assert_eq!(m.member("stock")["kind"], "write");
    for member in &m.members {
        assert!(
            member["fencing_token"].as_u64().unwrap_or(0) > 0,
            "{member}"
        );
    }
    // Each lock shows its holder as part of the multilease, with the other locks.
    let view = app.inspect_lock("orders").await;
    let holder = &view.body["holders"][0];
    assert_eq!(holder["holder"], "billing");
    assert_eq!(holder["lease_id"], m.member("orders")["lease_id"]);
    assert_eq!(holder["multilease"]["lease_id"], m.id.as_str());
    assert_eq!(
        holder["multilease"]["locks"],
        json!(["orders", "stock", "audit"])
    );
    assert_eq!(
        holder["metadata"],
        json!({"job": 7}),
        "the client's own metadata"
    );
    // Anyone may look at it (never its token).
    let shown = app.get(&m.path()).await;
    shown.assert_status(200);
    assert_eq!(shown.body["state"], "held");
    assert_eq!(shown.body["holder"], "billing");
    assert_eq!(shown.body["members"].as_array().map(Vec::len), Some(3));
    assert!(!shown.body.to_string().contains(&m.token));
    // Another caller cannot take any of them.
    app.acquire("orders", json!({}))
        .await
        .assert_problem(409, "lock_held");
    app.acquire("stock", json!({"kind": "read"}))
        .await
        .assert_problem(409, "lock_held");
    // One heartbeat renews every member.
    let renewed = heartbeat(&app, &m).await;
    renewed.assert_status(200);
    assert_eq!(renewed.body["members"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        renewed.body["members"][0]["fencing_token"],
        m.members[0]["fencing_token"]
    );
    // One release lets every lock go.
    release(&app, &m).await.assert_status(200);
    for lock in ["orders", "stock", "audit"] {
        assert!(!held(&app, lock).await, "{lock} still held");
    }
    assert_eq!(app.get(&m.path()).await.body["state"], "released");
    heartbeat(&app, &m).await.assert_problem(410, "lease_lost");
    // The wrong token is refused.
    let other = multi(&app, json!({"locks": locks(&["x"])})).await;
    let url = app.url(&format!("{}/heartbeat", other.path()));
    app.send(app.http.post(url).bearer_auth(&m.token).json(&json!({})))
        .await
        .assert_problem(403, "token_mismatch");
}

#[tokio::test]
async fn all_or_nothing_names_the_locks_held_and_keeps_none() {
    let app = spawn_app().await;
    let b = app
        .lease("b", json!({"holder": "someone", "ttl_ms": 30_000}))
        .await;
    let d = app.lease("d", json!({"ttl_ms": 30_000})).await;
    let refused = post_multi(&app, 0, json!({"locks": locks(&["a", "b", "c", "d"])})).await;
    refused.assert_problem(409, "lock_held");
    let members = refused.body["members"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let named: Vec<&str> = members.iter().filter_map(|m| m["lock"].as_str()).collect();
    assert_eq!(named, ["b", "d"], "{}", refused.body);
    assert_eq!(members[0]["holder"], "someone");
    assert_eq!(members[0]["lease_id"], b.id.as_str());
    assert!(refused.header("retry-after").is_some());
    for lock in ["a", "c"] {
        assert!(!held(&app, lock).await, "{lock} kept");
    }
    app.release(&b, true).await.assert_status(200);
    app.release(&d, true).await.assert_status(200);
    multi(&app, json!({"locks": locks(&["a", "b", "c", "d"])})).await;
}

#[tokio::test]
async fn bad_requests_are_clear_problems() {
    let app = spawn_app().await;
    for (body, code) in [
        (json!({}), "invalid_body"),
        (json!({"locks": []}), "invalid_body"),
        (json!({"locks": locks(&["a", "a"])}), "invalid_body"),
        (json!({"locks": [{"name": "a{b}"}]}), "invalid_lock_name"),
        (json!({"locks": locks(&["a"]), "ttl_ms": 1}), "invalid_ttl"),
        (
            json!({"locks": [{"name": "a", "kind": "redlock"}]}),
            "invalid_body",
        ),
        (
            json!({"locks": locks(&["a"]), "metadata": {"leasehold:multilease": 1}}),
            "invalid_body",
        ),
    ] {
        post_multi(&app, 0, body.clone())
            .await
            .assert_problem(422, code);
    }
    let many: Vec<String> = (0..17).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    post_multi(&app, 0, json!({"locks": locks(&many)}))
        .await
        .assert_problem(422, "invalid_body");
    app.get("/v1/multileases/not-an-id")
        .await
        .assert_problem(404, "lease_not_found");
    app.get("/v1/multileases/0190c5f0-0000-7000-8000-000000000000")
        .await
        .assert_problem(404, "lease_not_found");
    // A lock already in use as another kind.
    let r = app.lease("rw", json!({"kind": "read"})).await;
    let conflict = post_multi(&app, 0, json!({"locks": [{"name": "q"}, {"name": "rw"}]})).await;
    conflict.assert_problem(409, "kind_conflict");
    assert_eq!(conflict.body["member"], "rw");
    assert!(!held(&app, "q").await);
    app.release(&r, true).await.assert_status(200);
}

#[tokio::test]
async fn a_waiting_multilease_holds_nothing_until_it_gets_everything() {
    let app = spawn_app().await;
    let b = app.lease("b", json!({"ttl_ms": 30_000})).await;
    let waiter = app.spawn_post(
        "/v1/multileases?wait_ms=10000",
        json!({"locks": locks(&["a", "b"])}),
    );
    app.wait_for_waiters(1).await;
    // While it waits for b, a is free for anyone.
    let a = app.lease("a", json!({"ttl_ms": 30_000})).await;
    app.release(&a, true).await.assert_status(200);
    app.release(&b, true).await.assert_status(200);
    let got = granted(&waiter.await.expect("waiter"));
    assert!(held(&app, "a").await && held(&app, "b").await);
    release(&app, &got).await.assert_status(200);
    // The wait is bounded: a lock that stays held is a 409 when it ends.
    let b = app.lease("b", json!({"ttl_ms": 30_000})).await;
    let started = Instant::now();
    post_multi(&app, 300, json!({"locks": locks(&["a", "b"])}))
        .await
        .assert_problem(409, "lock_held");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!held(&app, "a").await);
    app.release(&b, true).await.assert_status(200);
}

#[tokio::test]
async fn a_member_lost_is_the_multilease_lost() {
    let app = spawn_app().await;
    let m = multi(
        &app,
        json!({"locks": locks(&["p", "q", "r"]), "ttl_ms": 30_000}),
    )
    .await;
    let watch = app
        .http
        .get(app.url(&format!("{}/watch", m.path())))
        .bearer_auth(&m.token)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let mut events = {
        use eventsource_stream::Eventsource as _;
        watch.bytes_stream().eventsource()
    };
    app.force_release("q", Some(ADMIN_TOKEN))
        .await
        .assert_status(200);
    let lost = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = events.next().await.expect("stream open").expect("event");
            if event.event == "lost" {
                return event;
            }
        }
    })
    .await
    .expect("a lost event");
    let data: Value = serde_json::from_str(&lost.data).expect("JSON");
    assert_eq!(data["lease_id"], m.id.as_str());
    assert_eq!(data["lock"], "q");
    assert_eq!(data["reason"], "force_released");
    // Shown lost before anyone touches it again.
    let shown = app.get(&m.path()).await;
    assert_eq!(shown.body["state"], "force_released");
    assert_eq!(shown.body["lost_member"], "q");
    // Its next heartbeat says so, and gives the other locks back.
    let beat = heartbeat(&app, &m).await;
    beat.assert_problem(410, "lease_lost");
    assert_eq!(beat.body["member"], "q");
    assert_eq!(beat.body["reason"], "force_released");
    for lock in ["p", "r"] {
        assert!(!held(&app, lock).await, "{lock} kept");
    }
    release(&app, &m).await.assert_problem(410, "lease_lost");
    // A member that runs out does the same.
    let m = multi(&app, json!({"locks": locks(&["p", "q"]), "ttl_ms": 300})).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let beat = heartbeat(&app, &m).await;
    beat.assert_problem(410, "lease_lost");
    assert_eq!(beat.body["reason"], "expired");
}

#[tokio::test]
async fn overlapping_sets_in_opposite_orders_never_deadlock() {
    let app = spawn_app().await;
    let rounds = 15;
    let mut tasks = Vec::new();
    for (i, order) in [["x", "y", "z"], ["z", "y", "x"], ["y", "x", "z"]]
        .into_iter()
        .enumerate()
    {
        let app = app.spawn_peer().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let reply = post_multi(
                    &app,
                    20_000,
                    json!({"locks": locks(&order), "ttl_ms": 10_000, "holder": format!("t{i}")}),
                )
                .await;
                let m = granted(&reply);
                // Whoever holds the set holds all of it.
                for lock in order {
                    let view = app.inspect_lock(lock).await;
                    assert_eq!(
                        view.body["holders"][0]["multilease"]["lease_id"],
                        m.id.as_str()
                    );
                }
                release(&app, &m).await.assert_status(200);
            }
        }));
    }
    let all = futures_util::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no deadlock: every task finished");
    for task in done {
        task.expect("task");
    }
}

#[tokio::test]
async fn an_idempotency_key_gives_the_first_answer_again() {
    let app = spawn_app().await;
    let body = json!({"locks": locks(&["i1", "i2"]), "ttl_ms": 30_000});
    let send = |body: Value| {
        let url = app.url("/v1/multileases");
        app.send(
            app.http
                .post(url)
                .header("Idempotency-Key", "multi-key-1")
                .json(&body),
        )
    };
    let first = granted(&send(body.clone()).await);
    let again = send(body.clone()).await;
    let second = granted(&again);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        (first.id.as_str(), first.token.as_str()),
        (second.id.as_str(), second.token.as_str())
    );
    assert_eq!(
        first.member("i1")["fencing_token"],
        second.member("i1")["fencing_token"]
    );
    send(json!({"locks": locks(&["i1"])}))
        .await
        .assert_problem(422, "idempotency_key_reused");
    release(&app, &first).await.assert_status(200);
    send(body).await.assert_problem(410, "lease_lost");
}

#[tokio::test]
async fn a_client_that_goes_away_while_waiting_leaves_nothing_held() {
    let app = spawn_app().await;
    let b = app.lease("b", json!({"ttl_ms": 30_000})).await;
    let gone = app
        .http
        .post(app.url("/v1/multileases?wait_ms=20000"))
        .json(&json!({"locks": locks(&["a", "b"])}))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    // Its waiter is gone with it (no sleep: the server's own count says so) ...
    app.wait_for_waiters(0).await;
    // ... so freeing b gives nothing to it: both stay free, and both are anyone's.
    app.release(&b, true).await.assert_status(200);
    assert!(!held(&app, "a").await && !held(&app, "b").await);
    multi(&app, json!({"locks": locks(&["a", "b"])})).await;
}

#[tokio::test]
async fn multileases_span_a_clusters_primaries() {
    let cluster = Cluster::start(3, 0).await;
    let app = crate::cluster::on_cluster(&cluster).await;
    let spread = crate::cluster::names_on_every_primary(&cluster, 1).await;
    let names: Vec<String> = spread.values().map(|n| n[0].clone()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(names.len(), 3);
    let m = multi(&app, json!({"locks": locks(&names), "ttl_ms": 30_000})).await;
    for name in &names {
        assert!(held(&app, name).await);
    }
    heartbeat(&app, &m).await.assert_status(200);
    // All or nothing across the shards.
    release(&app, &m).await.assert_status(200);
    let last = app.lease(names[2], json!({"ttl_ms": 30_000})).await;
    post_multi(&app, 0, json!({"locks": locks(&names)}))
        .await
        .assert_problem(409, "lock_held");
    for name in &names[..2] {
        assert!(!held(&app, name).await, "{name} kept");
    }
    // Waiting across shards: woken by the sharded unlock message.
    let waiter = app.spawn_post(
        "/v1/multileases?wait_ms=10000",
        json!({"locks": locks(&names)}),
    );
    app.wait_for_waiters(1).await;
    app.release(&last, true).await.assert_status(200);
    let got = granted(&waiter.await.expect("waiter"));
    release(&app, &got).await.assert_status(200);
}

#[tokio::test]
async fn a_multileases_lock_delay_holds_each_lock_after_it_ran_out_but_not_after_a_release() {
    let app = spawn_app().await;
    let body = json!({"locks": locks(&["d1", "d2"]), "ttl_ms": 300, "lock_delay_ms": 5_000});
    multi(&app, body.clone()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    for lock in ["d1", "d2"] {
        let refused = app.acquire(lock, json!({})).await;
        refused.assert_problem(409, "lock_delay");
        assert!(refused.header("retry-after").is_some());
    }
    let refused = post_multi(&app, 0, json!({"locks": locks(&["d2", "d3"])})).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(
        refused.body["members"][0]["code"], "lock_delay",
        "{}",
        refused.body
    );
    // A release lets every lock go at once.
    let m = multi(
        &app,
        json!({"locks": locks(&["d4", "d5"]), "ttl_ms": 30_000, "lock_delay_ms": 5_000}),
    )
    .await;
    release(&app, &m).await.assert_status(200);
    app.lease("d4", json!({})).await;
    post_multi(
        &app,
        0,
        json!({"locks": locks(&["d1"]), "lock_delay_ms": 3_600_000}),
    )
    .await
    .assert_problem(422, "invalid_lock_delay");
}
