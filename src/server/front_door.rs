//! The gate every request passes, as one layer with one future: the browser guard (cross-site
//! requests, `Host`), the request time limit, and the request metrics (by method, route
//! template and status). These were two `from_fn` middlewares; each boxed a future and a clone
//! of the whole service stack below it, per request, for as long as the request lived, so a
//! parked waiter kept them for its whole wait. This layer calls the service below directly
//! (no clone) and boxes one small future.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::Uri;
use axum::response::{IntoResponse as _, Response};
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
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let method = request.method().clone();
        // The route template, never the concrete path: lock names must not become label
        // values. The fallback's answers count as route `unmatched`.
        let route = request.extensions().get::<MatchedPath>().cloned();
        let metrics = self.metrics.clone();
        let answer = match browser::admit(&self.guards.browser, &request) {
            Err(problem) => Err(problem),
            Ok(()) => Ok((
                time_limit(self.guards.timeouts, request.uri()),
                self.inner.call(request),
            )),
        };
        Box::pin(async move {
            let response = match answer {
                Err(problem) => problem.into_response(),
                Ok((limit, handled)) => match tokio::time::timeout(limit, handled).await {
                    Ok(Ok(response)) => response,
                    Ok(Err(never)) => match never {},
                    Err(_) => timed_out(),
                },
            };
            metrics.http_request(
                method.as_str(),
                route.as_ref().map_or("unmatched", MatchedPath::as_str),
                response.status().as_u16(),
                started.elapsed(),
            );
            Ok(response)
        })
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
