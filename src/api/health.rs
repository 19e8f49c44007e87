//! Liveness and readiness.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// `GET /healthz`: the process is up (Redis is not consulted).
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: Redis answers and the shared subscriber is connected.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    let ping = tokio::time::timeout(Duration::from_secs(1), state.locks.ping()).await;
    if !matches!(ping, Ok(Ok(()))) {
        return Err(Problem::new(
            ProblemKind::RedisUnavailable,
            "Redis does not answer PING",
        ));
    }
    if !state.subscriber.is_connected() {
        return Err(Problem::new(
            ProblemKind::RedisUnavailable,
            "the unlock subscriber is not connected to Redis",
        ));
    }
    Ok(Json(json!({
        "status": "ready",
        "redis": "ok",
        "subscriber": "connected",
        "waiting_requests": state.locks.waiting(),
    })))
}
