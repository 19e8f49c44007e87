//! Wires Redis, the subscriber, the lock domain and the HTTP transports together and serves
//! them on an already bound listener until `shutdown` is cancelled. `main` and the tests both
//! call [`run`], so tests exercise exactly what production runs.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, header};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::auth::AdminAuth;
use crate::config::ServeArgs;
use crate::durability::{Durability, DurabilityError};
use crate::events::{EventFeed, spawn_subscriber};
use crate::locks::waiters::Waiters;
use crate::locks::{KeySpace, LockError, LockSettings, Locks, TtlPolicy};
use crate::metrics::Metrics;
use crate::state::{ApiLimits, AppState, DashboardSettings};
use crate::{api, dashboard};

/// How long open connections may take to finish once shutdown begins. Waiting requests end
/// at once (503); this bounds everything else.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Request bodies are small JSON documents.
const BODY_LIMIT_BYTES: usize = 64 * 1024;

/// Everything [`run`] needs besides the listener. Built once: from the command line
/// ([`Self::from_args`]) or with defaults for tests and benchmarks ([`Self::new`]).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub redis_url: String,
    pub locks: LockSettings,
    pub limits: ApiLimits,
    pub admin_token: Option<String>,
    /// Label acquisition metrics with lock names (unbounded cardinality; off by default).
    pub metrics_lock_names: bool,
    /// Start even when Redis may evict keys (held locks among them).
    pub allow_eviction: bool,
    pub dashboard: DashboardSettings,
}

impl ServerConfig {
    /// The defaults of `leasehold serve`, on `redis_url`, with no admin token.
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            locks: LockSettings {
                key_prefix: String::new(),
                tombstone_ms: 60_000,
                ticket_timeout_ms: 5_000,
                redis_timeout: Duration::from_secs(1),
            },
            limits: ApiLimits {
                ttl: TtlPolicy {
                    default_ms: 30_000,
                    min_ms: 1_000,
                    max_ms: 86_400_000,
                },
                max_wait: Duration::from_secs(60),
                ticket_timeout_ms: 5_000,
                max_permits: 1_000,
                max_watches: 10_000,
            },
            admin_token: None,
            metrics_lock_names: false,
            allow_eviction: false,
            dashboard: DashboardSettings::default(),
        }
    }

    /// What `leasehold serve` was asked for, on `redis_url` (the embedded Redis's when none
    /// was given), with `admin_token` (generated in embedded mode when none was given).
    pub fn from_args(args: &ServeArgs, redis_url: String, admin_token: Option<String>) -> Self {
        Self {
            redis_url,
            locks: LockSettings {
                key_prefix: args.key_prefix.clone(),
                tombstone_ms: args.tombstone_ms,
                ticket_timeout_ms: args.ticket_timeout_ms,
                redis_timeout: Duration::from_millis(args.redis_timeout_ms),
            },
            limits: ApiLimits {
                ttl: TtlPolicy {
                    default_ms: args.default_ttl_ms,
                    min_ms: args.min_ttl_ms,
                    max_ms: args.max_ttl_ms,
                },
                max_wait: Duration::from_millis(args.max_wait_ms),
                ticket_timeout_ms: args.ticket_timeout_ms,
                max_permits: args.max_permits,
                max_watches: args.max_watches,
            },
            admin_token,
            metrics_lock_names: args.metrics_lock_names,
            allow_eviction: args.allow_eviction,
            dashboard: DashboardSettings {
                private: args.dashboard_private,
            },
        }
    }
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
    #[error(
        "this Redis refused Leasehold's function library ({0}); Leasehold needs Redis 7.0 or \
         later (Redis Functions)"
    )]
    Functions(String),
}

/// Serves the API and the dashboard until `shutdown` is cancelled, then stops every task it
/// started.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let client = redis::Client::open(config.redis_url.as_str()).map_err(ServerError::RedisUrl)?;
    let redis_timeout = config.locks.redis_timeout;
    // Few, quick reconnect attempts: while Redis is away, requests must fail fast (503)
    // instead of queueing behind a long backoff.
    let manager_config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(redis_timeout))
        .set_connection_timeout(Some(redis_timeout.min(Duration::from_millis(500))))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(200));
    let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
        .map_err(ServerError::Redis)?;
    check_durability(&conn, config.allow_eviction).await?;

    let waiters = Arc::new(Waiters::default());
    let feed = EventFeed::default();
    let sweeper_client = client.clone();
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
        waiters,
        shutdown.clone(),
        metrics.clone(),
    );
    load_functions(&locks).await?;
    let clock_task = locks.spawn_clock_sync();
    let publisher_task = locks.spawn_publisher();
    let sweeper_task = locks.spawn_sweeper(sweeper_client);
    let state = AppState {
        locks,
        metrics,
        limits: config.limits,
        admin: AdminAuth::from_token(config.admin_token.as_deref()),
        subscriber,
        feed,
        dashboard: config.dashboard,
        shutdown: shutdown.clone(),
        watches: Arc::new(Semaphore::new(config.limits.max_watches)),
    };

    let serve = axum::serve(listener, app(state))
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
    let _ = publisher_task.await;
    let _ = sweeper_task.await;
    if let Err(e) = subscriber_task.await {
        tracing::warn!(error = %e, "the subscriber task failed");
    }
    result
}

/// The whole application: the API's routes and the dashboard's, with the middleware every
/// request passes through.
pub fn app(state: AppState) -> Router {
    api::routes()
        .merge(dashboard::router())
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        // Inside the router (each route is wrapped), where the matched route is known.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::metrics::count_requests,
        ))
        .layer(
            ServiceBuilder::new()
                // Outside the trace layer, so tokens never reach a log line.
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                ]))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                        let request_id = req
                            .headers()
                            .get("x-request-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!(
                            "request",
                            method = %req.method(),
                            path = %req.uri().path(),
                            request_id = %request_id,
                        )
                    }),
                )
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(api::panic_problem)),
        )
        .with_state(state)
}

/// Loads the Lua function library. A Redis that does not answer yet is not judged (calls load
/// the library themselves once it does); one that refuses the library cannot serve.
async fn load_functions(locks: &Locks) -> Result<(), ServerError> {
    match locks.load_functions().await {
        Ok(()) => Ok(()),
        Err(LockError::Unavailable(e)) if e.is_io_error() || e.is_timeout() => {
            tracing::warn!(error = %e, "could not load the function library yet");
            Ok(())
        }
        Err(e) => Err(ServerError::Functions(e.to_string())),
    }
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
