//! Liveness and readiness.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// Always `ok`.
    status: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReadyBody {
    /// Always `ready`.
    status: &'static str,
    /// Always `ok`.
    redis: &'static str,
    /// Always `connected`.
    subscriber: &'static str,
    /// `standalone`, `sentinel` or `cluster`.
    redis_mode: &'static str,
    /// The Redis master this instance writes to: only for the deployment's admins (the
    /// admin token, or an admin key of the default tenant, sent as for
    /// `GET /v1/admin/redis`), as every Redis address is.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_master: Option<String>,
    /// Requests waiting server-side in this instance.
    waiting_requests: usize,
    /// Redis's memory; absent when Redis did not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_memory: Option<MemoryBody>,
    /// What serves but less safely than configured: each Redis primary (Sentinel, Cluster)
    /// whose grants stand on it alone because it has no replica a failover could promote
    /// (named for the deployment's admins, counted for anyone else). The instance stays
    /// ready (its names are served); an alert should page someone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    degraded: Vec<String>,
}

/// Redis's memory (`INFO memory`). When it is `full`, new leases are refused (503
/// `redis_full`) while releases and heartbeats still work, so the instance stays ready.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryBody {
    /// `ok`, `short` (at or above 80 % of `maxmemory`) or `full` (at `maxmemory`).
    state: &'static str,
    used_bytes: u64,
    /// Redis's `maxmemory`; 0: no limit.
    max_bytes: u64,
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "health",
    responses((status = 200, description = "The process runs", body = HealthBody))
)]
/// `GET /healthz`: the process is up (Redis is not consulted).
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { status: "ok" })
}

#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "health",
    responses(
        (status = 200, description = "Redis answers and the unlock subscriber is connected (also while Redis's memory is short or full: releases and heartbeats still work then; see redis_memory)", body = ReadyBody),
        (status = 503, description = "redis_unavailable: Redis does not answer, no master is known (Sentinel mode, during a failover), or the subscriber is not connected", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /readyz`: Redis answers and the shared subscriber is connected.
pub async fn readyz(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<ReadyBody>, Problem> {
    if !state.locks.backend().master_known() {
        return Err(Problem::new(
            ProblemKind::RedisUnavailable,
            "no Redis master is known: the Sentinels name none that answers as one (a failover \
             in progress?)",
        )
        .retry_after(Duration::from_secs(1)));
    }
    let ping = tokio::time::timeout(Duration::from_secs(1), state.locks.backend().ping()).await;
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
    let memory = state
        .locks
        .backend()
        .memory()
        .await
        .ok()
        .map(|m| MemoryBody {
            state: m.state().as_str(),
            used_bytes: m.used_bytes,
            max_bytes: m.max_bytes,
        });
    let redis = state.locks.backend().status();
    let admin = sees_addresses(&state, &headers).await;
    let address = |addr: &str| {
        if admin {
            addr.to_owned()
        } else {
            "a primary".to_owned()
        }
    };
    Ok(Json(ReadyBody {
        status: "ready",
        redis: "ok",
        subscriber: "connected",
        redis_mode: redis.mode,
        redis_master: redis.master.filter(|_| admin),
        waiting_requests: state.locks.waiting(),
        redis_memory: memory,
        degraded: redis
            .acks
            .unreplicated
            .iter()
            .map(|primary| {
                format!(
                    "{} has no replica a failover could promote: grants there are not \
                     replicated",
                    address(primary)
                )
            })
            .collect(),
    }))
}

/// Whether the request carries the credential of one of the deployment's admins (the admin
/// token, or an admin key of the default tenant): the only callers shown Redis addresses.
async fn sees_addresses(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    let presented = headers
        .get("leasehold-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| crate::auth::bearer(headers).ok().flatten());
    let Some(secret) = presented else {
        return false;
    };
    match state.access.of_secret(&secret).await {
        Ok(Some(p)) => p.tenant.is_default() && p.roles.contains(crate::auth::Role::Admin),
        _ => false,
    }
}
