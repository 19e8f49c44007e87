//! The gate every request passes, as one layer with one future: the browser guard (cross-site
//! requests, `Host`), the request time limit, the request metrics (by method, route template
//! and status), and `Cache-Control: no-store` on the API's answers. These were two `from_fn`
//! middlewares and a header layer; each boxed a future (and the middlewares a clone of the
//! whole service stack below), per request, for as long as the request lived, so a parked
//! waiter kept them for its whole wait. This layer calls the service below directly and its
//! future is a named type: nothing is allocated for it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse as _, Response};
use pin_project_lite::pin_project;
use tokio::time::Timeout;
use tower::{Layer, Service};

use super::{Guards, Timeouts};
use crate::auth::browser;
use crate::metrics::Metrics;
use crate::problem::{Problem, ProblemKind};

/// Wraps each route (inside the router, where the matched route template is known).
#[derive(Clone)]
pub struct FrontDoorLayer {
    guards: Guards,
    metrics: Arc<Metrics>,
}

impl FrontDoorLayer {
    pub fn new(guards: Guards, metrics: Arc<Metrics>) -> Self {
        Self { guards, metrics }
    }
}

impl<S> Layer<S> for FrontDoorLayer {
    type Service = FrontDoor<S>;

    fn layer(&self, inner: S) -> FrontDoor<S> {
        FrontDoor {
            inner,
            guards: self.guards.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FrontDoor<S> {
    inner: S,
    guards: Guards,
    metrics: Arc<Metrics>,
}

impl<S> Service<Request> for FrontDoor<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = FrontDoorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let method = request.method().clone();
        // The route template, never the concrete path: lock names must not become label
        // values. The fallback's answers count as route `unmatched`.
        let route = request.extensions().get::<MatchedPath>().cloned();
        let state = match browser::admit(&self.guards.browser, &request) {
            Err(problem) => State::Refused {
                problem: Some(problem),
            },
            Ok(()) => State::Handling {
                handled: tokio::time::timeout(
                    time_limit(self.guards.timeouts, request.uri()),
                    self.inner.call(request),
                ),
            },
        };
        FrontDoorFuture {
            state,
            done: Some(Done {
                metrics: self.metrics.clone(),
                method,
                route,
                started,
            }),
        }
    }
}

pin_project! {
    /// A request at the front door: refused, or handled within its time limit; counted when
    /// answered. A named type rather than a boxed `async` block: a parked waiter carries it
    /// for its whole wait, and every request would pay for the allocation.
    pub struct FrontDoorFuture<F> {
        #[pin]
        state: State<F>,
        done: Option<Done>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Refused { problem: Option<Problem> },
        Handling { #[pin] handled: Timeout<F> },
    }
}

/// What the answer is counted with.
struct Done {
    metrics: Arc<Metrics>,
    method: Method,
    route: Option<MatchedPath>,
    started: Instant,
}

impl<F> Future for FrontDoorFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match this.state.project() {
            StateProj::Refused { problem } => match problem.take() {
                Some(problem) => problem.into_response(),
                // Polled again after its answer (a caller's mistake): answer, never panic.
                None => timed_out(),
            },
            StateProj::Handling { handled } => match ready!(handled.poll(cx)) {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => timed_out(),
            },
        };
        if let Some(done) = this.done.take() {
            let route = done.route.as_ref().map_or("unmatched", MatchedPath::as_str);
            // API answers carry lease tokens and live state: never cached.
            if route.starts_with("/v1/") {
                response
                    .headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            }
            done.metrics.http_request(
                done.method.as_str(),
                route,
                response.status().as_u16(),
                done.started.elapsed(),
            );
        }
        Poll::Ready(Ok(response))
    }
}

/// How long the handler may take to answer: the request timeout plus the server-side wait the
/// request asked for (`wait_ms`, cut to the maximum). A backstop: every Redis call is already
/// bounded by the Redis timeout, so only a stuck handler runs into it. An event stream's
/// answer starts at once; its body is not limited.
fn time_limit(timeouts: Timeouts, uri: &Uri) -> Duration {
    let wait = uri
        .query()
        .and_then(|q| {
            q.split('&')
                .find_map(|pair| pair.strip_prefix("wait_ms="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(Duration::ZERO, |ms| {
            Duration::from_millis(ms).min(timeouts.max_wait)
        });
    timeouts.request + wait
}

/// 504 `request_timeout`: what the handler was doing may or may not have happened (hence not a
/// 503, which promises it did not).
fn timed_out() -> Response {
    Problem::new(
        ProblemKind::RequestTimeout,
        "the request took longer than the server allows (--request-timeout-ms) and was \
         abandoned; it may or may not have taken effect, so check before retrying",
    )
    .into_response()
}
