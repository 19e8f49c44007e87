//! Wires Redis, the subscriber, the lock domain and the HTTP API together and serves them on
//! an already bound listener until `shutdown` is cancelled. `main` and the tests both call
//! [`run`], so tests exercise exactly what production runs.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api;
use crate::durability::{Durability, DurabilityError};
use crate::events::{EventFeed, spawn_subscriber};
use crate::locks::waiters::Waiters;
use crate::locks::{KeySpace, LockSettings, Locks};
use crate::metrics::Metrics;
use crate::state::{AdminAuth, ApiLimits, AppState, DashboardSettings};

/// How long open connections may take to finish once shutdown begins. Waiting requests end
/// at once (503); this bounds everything else.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Everything [`run`] needs besides the listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub redis_url: String,
    pub locks: LockSettings,
    pub limits: ApiLimits,
    pub admin_token: Option<String>,
    /// Bound on one Redis command; a request fails with 503 after it.
    pub redis_timeout: Duration,
    /// Label acquisition metrics with lock names (unbounded cardinality; off by default).
    pub metrics_lock_names: bool,
    /// Start even when Redis may evict keys (held locks among them).
    pub allow_eviction: bool,
    pub dashboard: DashboardSettings,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid Redis URL: {0}")]
    RedisUrl(#[source] redis::RedisError),
    #[error("cannot set up the Redis connection: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error(transparent)]
    Durability(#[from] DurabilityError),
}

/// Serves the API until `shutdown` is cancelled, then stops every task it started.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let client = redis::Client::open(config.redis_url.as_str()).map_err(ServerError::RedisUrl)?;
    // Few, quick reconnect attempts: while Redis is away, requests must fail fast (503)
    // instead of queueing behind a long backoff.
    let manager_config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.redis_timeout))
        .set_connection_timeout(Some(config.redis_timeout.min(Duration::from_millis(500))))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(200));
    let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
        .map_err(ServerError::Redis)?;
    check_durability(&conn, config.allow_eviction).await?;

    let waiters = Arc::new(Waiters::default());
    let feed = EventFeed::default();
    let (subscriber, subscriber_task) = spawn_subscriber(
        client,
        KeySpace::new(config.locks.key_prefix.clone()),
        waiters.clone(),
        feed.clone(),
        shutdown.clone(),
    );
    let metrics = Arc::new(Metrics::new(config.metrics_lock_names));
    let locks = Locks::new(
        conn,
        &config.locks,
        config.redis_timeout,
        waiters,
        shutdown.clone(),
        metrics.clone(),
    );
    let clock_task = locks.spawn_clock_sync();
    let state = AppState {
        locks,
        metrics,
        limits: config.limits,
        admin: AdminAuth::from_token(config.admin_token.as_deref()),
        subscriber,
        feed,
        dashboard: config.dashboard,
        shutdown: shutdown.clone(),
    };

    let serve = axum::serve(listener, api::router(state))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let result = tokio::select! {
        r = serve => r.map_err(ServerError::Http),
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_LIMIT).await } => {
            tracing::warn!("connections still open after the drain limit; closing them");
            Ok(())
        }
    };
    shutdown.cancel();
    let _ = clock_task.await;
    if let Err(e) = subscriber_task.await {
        tracing::warn!(error = %e, "the subscriber task failed");
    }
    result
}

/// Says what this Redis can lose and refuses one that evicts keys (unless allowed). A Redis
/// that does not answer yet is not judged: requests get 503 until it does.
async fn check_durability(
    conn: &ConnectionManager,
    allow_eviction: bool,
) -> Result<(), DurabilityError> {
    match Durability::read(&mut conn.clone()).await {
        Ok(durability) => durability.judge(allow_eviction),
        Err(e) => {
            tracing::warn!(error = %e, "could not check Redis's persistence and eviction settings");
            Ok(())
        }
    }
}
