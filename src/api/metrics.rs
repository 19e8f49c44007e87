//! `GET /metrics` (requests are counted by the front door, `crate::server::front_door`).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{Caller, ReaderRole};
use crate::locks::wall_ms;
use crate::metrics::{CENSUS_BUDGET, CONTENT_TYPE};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "health",
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Prometheus metrics of this instance (OpenMetrics text); see the metrics table of the book (docs/book/src/operating/metrics.md)", body = String, content_type = "application/openmetrics-text"),
        (status = 403, description = "tenant_not_allowed: the metrics count every tenant's locks; only the deployment's readers (default tenant) may read them", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /metrics`: this instance's metrics in the OpenMetrics text format Prometheus scrapes.
/// They count every tenant's locks, so only callers of the deployment (the default tenant:
/// the admin token, its keys, anonymous callers where let in) may read them.
pub async fn scrape(caller: Caller<ReaderRole>, State(state): State<AppState>) -> Response {
    if !caller.tenant.is_default() {
        return Problem::new(
            ProblemKind::TenantNotAllowed,
            "the metrics count every tenant's locks: read them with a key of the default \
             tenant",
        )
        .into_response();
    }
    let redis_up = state.locks.backend().ping().await.is_ok();
    state
        .metrics
        .sampled
        .record_redis(&state.locks.backend().status());
    if redis_up && let Ok(memory) = state.locks.backend().memory().await {
        state.metrics.sampled.record_memory(&memory);
    }
    let census = if redis_up && state.metrics.sampled.census_due() {
        match state.locks.census(CENSUS_BUDGET).await {
            Ok(census) => Some(census),
            Err(e) => {
                tracing::warn!(error = %e, "could not count the live locks for the metrics");
                None
            }
        }
    } else {
        None
    };
    state.metrics.sampled.record(
        redis_up,
        state.subscriber.is_connected(),
        state.locks.hears_unlocks(),
        census.as_ref(),
        state.metrics.lock_names(),
        wall_ms(),
    );
    match state
        .metrics
        .encode(state.locks.waiting(), state.subscriber.reconnects())
    {
        Ok(text) => (
            [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode the metrics");
            Problem::new(ProblemKind::Internal, "internal error").into_response()
        }
    }
}
