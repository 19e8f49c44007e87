//! `GET /metrics` (requests are counted by the front door, `crate::server::front_door`).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{Caller, ReaderRole};
use crate::limits::ledger::now_ms;
use crate::metrics::{CENSUS_BUDGET, CONTENT_TYPE};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "health",
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Prometheus metrics of this instance (OpenMetrics text); see the README's metrics table", body = String, content_type = "application/openmetrics-text"),
    )
)]
/// `GET /metrics`: this instance's metrics in the OpenMetrics text format Prometheus scrapes.
pub async fn scrape(_: Caller<ReaderRole>, State(state): State<AppState>) -> Response {
    let redis_up = state.locks.ping().await.is_ok();
    if redis_up && let Ok(memory) = state.locks.redis_memory().await {
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
        now_ms(),
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
