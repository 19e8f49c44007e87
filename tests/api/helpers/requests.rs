//! A request helper for every resource (locks, semaphores, tickets, admin routes, events,
//! watches), so tests read as what they check.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::{ADMIN_TOKEN, Lease, Reply, TestApp, Ticket};

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// POST /v1/locks/{lock}/leases?wait_ms=.. with a JSON body and an optional bearer token.
    pub async fn acquire_with(
        &self,
        lock: &str,
        wait_ms: u64,
        body: Value,
        token: Option<&str>,
    ) -> Reply {
        let mut req = self
            .http
            .post(self.url(&format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}")))
            .json(&body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::read(req.send().await.expect("request")).await
    }

    /// Starts a waiting acquire (`wait_ms`) in the background; await the handle for its reply.
    pub fn spawn_waiter(&self, lock: &str, wait_ms: u64) -> JoinHandle<Reply> {
        self.spawn_post(
            &format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}"),
            serde_json::json!({}),
        )
    }

    /// Starts a POST of `body` to `path` in the background (a waiting acquire of any kind).
    pub fn spawn_post(&self, path: &str, body: Value) -> JoinHandle<Reply> {
        let http = self.http.clone();
        let url = self.url(path);
        tokio::spawn(async move {
            Reply::read(http.post(url).json(&body).send().await.expect("request")).await
        })
    }

    /// Acquires a semaphore's permits.
    pub async fn acquire_permits(&self, name: &str, wait_ms: u64, body: Value) -> Reply {
        let url = self.url(&format!("/v1/semaphores/{name}/leases?wait_ms={wait_ms}"));
        self.send(self.http.post(url).json(&body)).await
    }

    /// Acquires permits and expects a new lease.
    pub async fn permits(&self, name: &str, body: Value) -> Lease {
        Lease::from_reply(name, &self.acquire_permits(name, 0, body).await)
    }

    /// Acquires a fair lock and expects a ticket (202).
    pub async fn ticket(&self, lock: &str, body: Value) -> Ticket {
        Ticket::from_reply(lock, &self.acquire(lock, body).await)
    }

    /// `DELETE` on a ticket: leaves the queue.
    pub async fn leave(&self, ticket: &Ticket) -> Reply {
        let url = self.url(&ticket.path);
        self.send(self.http.delete(url).bearer_auth(&ticket.token))
            .await
    }

    /// Sends any request and reads its answer.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        Reply::read(request.send().await.expect("request")).await
    }

    /// Sends a request with an `Idempotency-Key`.
    pub async fn send_with_key(&self, request: reqwest::RequestBuilder, key: &str) -> Reply {
        self.send(request.header("idempotency-key", key)).await
    }

    /// An admin route (`/v1/admin/...`) with the admin token.
    pub async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut request = self
            .http
            .request(method, self.url(path))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    /// POSTs to a fair ticket's Location with its token.
    pub async fn poll_ticket(&self, location: &str, token: &str, wait_ms: u64) -> Reply {
        let url = self.url(&format!("{location}?wait_ms={wait_ms}"));
        Reply::read(
            self.http
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn acquire(&self, lock: &str, body: Value) -> Reply {
        self.acquire_with(lock, 0, body, None).await
    }

    /// Acquires and expects a new lease.
    pub async fn lease(&self, lock: &str, body: Value) -> Lease {
        Lease::from_reply(lock, &self.acquire(lock, body).await)
    }

    pub async fn heartbeat(&self, lease: &Lease, body: Value) -> Reply {
        self.heartbeat_as(lease, &lease.token, body).await
    }

    pub async fn heartbeat_as(&self, lease: &Lease, token: &str, body: Value) -> Reply {
        let url = self.url(&format!("{}/heartbeat", lease.path));
        Reply::read(
            self.http
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn release(&self, lease: &Lease, all: bool) -> Reply {
        self.release_as(lease, &lease.token, all).await
    }

    pub async fn release_as(&self, lease: &Lease, token: &str, all: bool) -> Reply {
        self.release_with(lease, token, &format!("all={all}")).await
    }

    /// `DELETE` on a lease with a query (`mode=read`, `all=true`, ...).
    pub async fn release_with(&self, lease: &Lease, token: &str, query: &str) -> Reply {
        let url = self.url(&format!("{}?{query}", lease.path));
        Reply::read(
            self.http
                .delete(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        Reply::read(self.http.get(self.url(path)).send().await.expect("request")).await
    }

    pub async fn inspect_lock(&self, lock: &str) -> Reply {
        self.get(&format!("/v1/locks/{lock}")).await
    }

    pub async fn inspect_lease(&self, lease: &Lease) -> Reply {
        self.get(&lease.path).await
    }

    pub async fn force_release(&self, lock: &str, admin_token: Option<&str>) -> Reply {
        let mut req = self
            .http
            .delete(self.url(&format!("/v1/admin/locks/{lock}?reason=stuck")));
        if let Some(token) = admin_token {
            req = req.bearer_auth(token);
        }
        Reply::read(req.send().await.expect("request")).await
    }

    /// Waits (bounded) until /readyz answers 200: the subscriber is connected.
    pub async fn wait_until_ready(&self) {
        self.wait_for("the server to become ready", |r| r.status == StatusCode::OK)
            .await;
    }

    /// Waits (bounded) until `n` requests wait for a lock in this server.
    pub async fn wait_for_waiters(&self, n: u64) {
        self.wait_for(&format!("{n} waiting requests"), |r| {
            r.status == StatusCode::OK && r.body["waiting_requests"] == n
        })
        .await;
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&Reply) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(response) = self.http.get(self.url("/readyz")).send().await
                && done(&Reply::read(response).await)
            {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Subscribes to the events channel; messages arrive on the returned receiver.
    pub async fn events(&self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        use futures_util::StreamExt as _;
        let mut pubsub = self
            .redis
            .client()
            .get_async_pubsub()
            .await
            .expect("pubsub");
        pubsub
            .subscribe("leasehold:events")
            .await
            .expect("subscribe");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stream = pubsub.into_on_message();
            while let Some(msg) = stream.next().await {
                let payload: String = msg.get_payload().expect("payload");
                // Instances publish their events in batches: JSON arrays.
                let batch = match serde_json::from_str(&payload).expect("event JSON") {
                    Value::Array(events) => events,
                    event => vec![event],
                };
                for event in batch {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        });
        rx
    }
}

/// An open lease watch (`GET <lease>/watch`): its events as they come.
pub struct Watch {
    events: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<
                        eventsource_stream::Event,
                        eventsource_stream::EventStreamError<reqwest::Error>,
                    >,
                > + Send,
        >,
    >,
}

impl Watch {
    /// The next event (bounded by `within`); `None` when the stream ended.
    pub async fn next(&mut self, within: Duration) -> Option<eventsource_stream::Event> {
        use futures_util::StreamExt as _;
        tokio::time::timeout(within, self.events.next())
            .await
            .unwrap_or_else(|_| panic!("no event and no end within {within:?}"))
            .map(|event| event.expect("a well-formed event stream"))
    }

    /// The next event named `kind` within `within`, skipping others (and the end: none).
    pub async fn until(
        &mut self,
        kind: &str,
        within: Duration,
    ) -> Option<eventsource_stream::Event> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next(left).await?;
            if event.event == kind {
                return Some(event);
            }
        }
    }

    /// The data of the next event named `kind` within 10 s (skipping others), as JSON.
    pub async fn told(&mut self, kind: &str) -> serde_json::Value {
        let event = self
            .until(kind, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the watch ended before `{kind}`"));
        serde_json::from_str(&event.data).expect("JSON data")
    }

    /// Asserts that nothing comes (no event, no end) for `quiet`.
    pub async fn assert_quiet(&mut self, quiet: Duration) {
        use futures_util::StreamExt as _;
        if let Ok(news) = tokio::time::timeout(quiet, self.events.next()).await {
            panic!("the watch said something within {quiet:?}: {news:?}");
        }
    }
}

impl TestApp {
    /// Opens a watch on `lease` with `token`: the watch on success, else the problem reply.
    pub async fn watch_as(&self, lease: &Lease, token: &str) -> Result<Watch, Reply> {
        self.watch_with(lease, token, "", None).await
    }

    /// Opens a watch on `lease` with `token`, a query string (`?...` or "") and a
    /// `Last-Event-ID`.
    pub async fn watch_with(
        &self,
        lease: &Lease,
        token: &str,
        query: &str,
        last_event_id: Option<&str>,
    ) -> Result<Watch, Reply> {
        use eventsource_stream::Eventsource as _;
        let mut request = self
            .http
            .get(self.url(&format!("{}/watch{query}", lease.path)))
            .bearer_auth(token)
            .timeout(Duration::from_secs(3600));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("request");
        if response.status() != StatusCode::OK {
            return Err(Reply::read(response).await);
        }
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Ok(Watch {
            events: Box::pin(response.bytes_stream().eventsource()),
        })
    }

    /// Opens a watch on `lease` with its own token.
    pub async fn watch(&self, lease: &Lease) -> Watch {
        match self.watch_as(lease, &lease.token).await {
            Ok(watch) => watch,
            Err(reply) => panic!("watch refused: {} {}", reply.status, reply.body),
        }
    }
}

/// Waits (bounded) for the next event of `kind`, skipping others.
pub async fn next_event(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, kind: &str) -> Value {
    let wait = async {
        loop {
            let event = rx.recv().await.expect("event stream open");
            if event["type"] == kind {
                return event;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no {kind} event within 10 s"))
}

/// The lock's only holder right now.
pub async fn holder_of(app: &TestApp, lock: &str) -> Value {
    let view = app.inspect_lock(lock).await;
    assert_eq!(
        view.body["holders"].as_array().map(Vec::len),
        Some(1),
        "{}",
        view.body
    );
    view.body["holders"][0].clone()
}
