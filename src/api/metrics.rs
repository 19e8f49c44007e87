//! `GET /metrics` (requests are counted by the front door, `crate::server::front_door`).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{Caller, ReaderRole};
use crate::leases::Leases;
use crate::locks::wall_ms;
use crate::metrics::{CENSUS_BUDGET, CONTENT_TYPE, ELECTIONS_SAMPLED, HISTORY_READ};
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
    // The caller is the deployment's: its key space's elections.
    if redis_up {
        sample_elections(&state, &state.leases_for(&caller)).await;
    }
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

/// The live elections' lines and the terms started since the last scrape, for the election
/// metrics (read here: the metrics know no lease store). A failed read leaves them as they
/// were.
async fn sample_elections(state: &AppState, leases: &Leases) {
    let metrics = &state.metrics.elections;
    let listed = match leases.elections(ELECTIONS_SAMPLED, metrics.known()).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the elections for the metrics");
            return;
        }
    };
    metrics.set_waiting(
        listed
            .elections
            .iter()
            .map(|e| (e.name.as_str(), e.view.candidates_waiting)),
    );
    for election in &listed.elections {
        let name = &election.name;
        let after = metrics.read_after(name.as_str());
        let read = async {
            let terms = leases
                .terms(name, Some(after.as_deref().unwrap_or("0-0")))
                .await?;
            let history = if terms.entries.iter().any(|t| !t.proclaimed) {
                leases.history(&name.lock(), HISTORY_READ).await?
            } else {
                Vec::new()
            };
            Ok::<_, crate::leases::LeaseError>((terms, history))
        };
        match read.await {
            Ok((terms, history)) => metrics.observed(name.as_str(), &terms.entries, &history),
            Err(e) => {
                tracing::warn!(election = %name, error = %e, "could not read an election's terms for the metrics");
            }
        }
    }
}
