//! Wires Redis, the subscriber, the lock domain, who may do what and the HTTP transports
//! together and serves them on an already bound listener until `shutdown` is cancelled.
//! `main` and the tests both call [`run`], so tests exercise exactly what production runs.
//!
//! - [`listener`]: the accept loop (hyper with a timer: header, idle and connection limits).
//! - [`tls`]: certificates for `--tls-cert`/`--tls-key`.

mod front_door;
pub mod listener;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, header};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::RequestBodyDeadlineLayer;
use tower_http::trace::TraceLayer;

use self::front_door::FrontDoorLayer;
use self::listener::HttpLimits;
use self::tls::TlsFiles;
use crate::audit::AuditLog;
use crate::auth::browser::BrowserPolicy;
use crate::auth::{Access, AdminAuth, AnonymousPolicy, KeyStore, Sessions};
use crate::config::ServeArgs;
use crate::events::{EventFeed, FeedRoute};
use crate::limits::ledger::Ledger;
use crate::limits::rate::RateLimits;
use crate::limits::{ClientLimits, LockLimits};
use crate::locks::feed::sweeper::{self, Expiries};
use crate::locks::wakeups::{Waiters, Wakeups};
use crate::locks::{LockError, LockSettings, Locks, TtlPolicy};
use crate::metrics::Metrics;
use crate::own_keys;
use crate::redis::durability::{Durability, DurabilityError};
use crate::redis::{ConnectError, Redis, RedisSettings, Route, Topics};
use crate::state::{ApiLimits, AppState, DashboardSettings, Shared};
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
    /// A private CA for a `rediss://` Redis (PEM); the system's roots otherwise.
    pub redis_ca_file: Option<PathBuf>,
    pub locks: LockSettings,
    pub limits: ApiLimits,
    pub admin_token: Option<String>,
    /// Label acquisition metrics with lock names (unbounded cardinality; off by default).
    pub metrics_lock_names: bool,
    /// Start even when Redis may evict keys (held locks among them).
    pub allow_eviction: bool,
    pub dashboard: DashboardSettings,
    /// Let callers without a credential in on any address, even once API keys exist.
    pub allow_anonymous: bool,
    /// The `Host` names served; `None`: loopback names on a loopback listener, else any.
    pub allowed_hosts: Option<Vec<String>>,
    /// What one caller may do (rate, leases, waiters, event streams).
    pub clients: ClientLimits,
    pub http: HttpLimits,
    /// How long a request may take beyond the wait it asked for.
    pub request_timeout: Duration,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsFiles>,
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
                calls_in_flight: 256,
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
                per_lock: LockLimits::default(),
                max_watches: 10_000,
            },
            admin_token: None,
            metrics_lock_names: false,
            allow_eviction: false,
            dashboard: DashboardSettings::default(),
            redis_ca_file: None,
            allow_anonymous: false,
            allowed_hosts: None,
            clients: ClientLimits::default(),
            http: HttpLimits::default(),
            request_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            tls: None,
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
                calls_in_flight: args.max_redis_calls.get(),
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
                per_lock: LockLimits {
                    waiters_per_lock: args.max_waiters_per_lock,
                    fair_queue: args.max_fair_queue,
                    reentry_depth: args.max_reentry_depth,
                    reason_chars: args.max_reason_chars,
                },
                max_watches: args.max_watches,
            },
            admin_token,
            metrics_lock_names: args.metrics_lock_names,
            allow_eviction: args.allow_eviction,
            dashboard: DashboardSettings {
                private: args.dashboard_private,
            },
            redis_ca_file: args.redis_ca_file.clone(),
            allow_anonymous: args.allow_anonymous,
            allowed_hosts: (!args.allowed_hosts.is_empty()).then(|| {
                args.allowed_hosts
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect()
            }),
            clients: ClientLimits {
                rate_per_second: args.rate_limit,
                rate_burst: args.rate_burst,
                leases: args.max_leases_per_client,
                waiters: args.max_waiters_per_client,
                names: args.max_names_per_client,
                tenant_names: args.max_names_per_tenant,
                streams: args.max_streams_per_client,
                limit_loopback: args.limit_loopback_clients,
            },
            http: HttpLimits {
                header_timeout: Duration::from_millis(args.header_timeout_ms),
                idle_timeout: Duration::from_millis(args.idle_timeout_ms),
                max_connections: args.max_connections,
                max_connections_per_address: args.max_connections_per_address,
                limit_loopback: args.limit_loopback_clients,
                max_h2_streams: args.max_h2_streams,
            },
            request_timeout: Duration::from_millis(args.request_timeout_ms),
            body_timeout: Duration::from_millis(args.body_timeout_ms),
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    RedisClient(#[from] ConnectError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(
        "refusing to serve {0} without a credential: no API key exists and no admin token is \
         set, so anyone who can reach the port could take any lock. Create a key (or set \
         --admin-token / --admin-token-file), listen on loopback, or pass --allow-anonymous"
    )]
    Exposed(SocketAddr),
    #[error("cannot read the listener's address: {0}")]
    Listener(#[source] std::io::Error),
    #[error("cannot set up the Redis connection: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error(transparent)]
    Durability(#[from] DurabilityError),
    #[error("this Redis does not know Redis Functions ({0}); Leasehold needs Redis 7.0 or later")]
    NoFunctions(String),
    #[error("this Redis refused Leasehold's function library: {0}")]
    Functions(String),
}

impl ServerError {
    /// A refusal of the function library: a Redis older than 7.0 does not know FUNCTION at
    /// all (the version is then the fix), anything else (a script error, ACL, out of memory)
    /// is told as Redis said it, without blaming the version.
    fn functions_refused(message: String) -> Self {
        if message.to_ascii_lowercase().contains("unknown command") {
            Self::NoFunctions(message)
        } else {
            Self::Functions(message)
        }
    }
}

/// Serves the API and the dashboard until `shutdown` is cancelled, then stops every task it
/// started.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let local = listener.local_addr().map_err(ServerError::Listener)?;
    let loopback = local.ip().is_loopback();
    let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
    let conn = Redis::connect(&RedisSettings {
        url: config.redis_url.clone(),
        ca_file: config.redis_ca_file.clone(),
        timeout: config.locks.redis_timeout,
    })?;
    check_durability(&conn, config.allow_eviction).await?;
    let migration_task = migrate_own_keys(&conn, &config.locks.key_prefix, &shutdown).await?;

    let prefix = config.locks.key_prefix.clone();
    let keys = KeyStore::new(conn.clone(), &prefix);
    // Asked only where it matters: the answer is cached for a second, and a loopback server
    // lets anonymous callers in while it says no.
    let keys_exist = if loopback {
        None
    } else {
        keys.any_exist().await.ok()
    };
    if exposed(local, &config, keys_exist) {
        return Err(ServerError::Exposed(local));
    }

    let waiters = Arc::new(Waiters::default());
    let feed = EventFeed::default();
    let (to_sweeper, expired) = tokio::sync::mpsc::channel(sweeper::EXPIRED_QUEUE);
    let expiries = Expiries {
        channel: sweeper::expired_channel(conn.db()),
        to_sweeper,
    };
    let wakeups = Wakeups {
        waiters: waiters.clone(),
        keys: crate::locks::KeySpace::new(prefix.as_str()),
    };
    let feed_route = FeedRoute {
        feed: feed.clone(),
        base: prefix.clone(),
    };
    let mut gated = vec![wakeups.subscription()];
    gated.extend(feed_route.subscriptions());
    let topics = Topics {
        always: vec![expiries.channel.clone()],
        always_what: "expiries",
        gated,
    };
    let routes: Vec<Arc<dyn Route>> =
        vec![Arc::new(wakeups), Arc::new(expiries), Arc::new(feed_route)];
    let (subscriber, subscriber_task) = conn.spawn_subscriber(topics, routes, shutdown.clone());
    let metrics = Arc::new(Metrics::new(config.metrics_lock_names));
    let locks = Locks::new(
        conn.clone(),
        &config.locks,
        waiters,
        shutdown.clone(),
        metrics.clone(),
    );
    load_functions(&locks).await?;
    let clock_task = locks.spawn_clock_sync();
    let publisher_task = locks.spawn_publisher();
    let waitlist_task = locks.spawn_waitlist_writer();
    let sweeper_task = locks.spawn_sweeper(expired);
    let rates = Arc::new(RateLimits::new(
        config.clients.rate_per_second,
        config.clients.rate_burst,
    ));
    let rates_task = rates.clone().spawn_cleanup(shutdown.clone());
    let access = Access {
        admin: AdminAuth::from_token(config.admin_token.as_deref()),
        keys,
        sessions: Sessions::new(conn.clone(), &prefix, tls.is_some()),
        anonymous: AnonymousPolicy {
            allow: config.allow_anonymous,
            loopback,
        },
        rates,
        limits: config.clients,
        private_dashboard: config.dashboard.private,
        revocations: Arc::default(),
    };
    let access = Arc::new(access);
    let revocation_task = access.clone().spawn_revocation_checks(shutdown.clone());
    let state = AppState::new(Shared {
        locks,
        key_prefix: Arc::from(prefix.as_str()),
        limits: config.limits,
        access,
        ledger: Ledger::new(conn.clone(), &prefix),
        audit: AuditLog::new(conn, &prefix),
        streams: Arc::default(),
        lock_waiters: Arc::default(),
        metrics,
        subscriber,
        feed,
        dashboard: config.dashboard,
        shutdown: shutdown.clone(),
        watches: Arc::new(Semaphore::new(config.limits.max_watches)),
    });
    let browser = match &config.allowed_hosts {
        Some(hosts) => BrowserPolicy {
            allowed_hosts: Some(hosts.clone()),
        },
        None if loopback => BrowserPolicy::loopback(),
        None => BrowserPolicy::default(),
    };
    let guards = Guards {
        browser: Arc::new(browser),
        timeouts: Timeouts {
            request: config.request_timeout,
            body: config.body_timeout,
            max_wait: config.limits.max_wait,
        },
    };
    let app = app(state, guards);

    let serve = listener::serve(listener, app, config.http, tls, shutdown.clone());
    tokio::select! {
        () = serve => {}
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_LIMIT).await } => {
            tracing::warn!("connections still open after the drain limit; closing them");
        }
    }
    shutdown.cancel();
    if let Some(task) = migration_task {
        let _ = task.await;
    }
    let _ = clock_task.await;
    let _ = publisher_task.await;
    let _ = waitlist_task.await;
    let _ = sweeper_task.await;
    let _ = rates_task.await;
    let _ = revocation_task.await;
    if let Err(e) = subscriber_task.await {
        tracing::warn!(error = %e, "the subscriber task failed");
    }
    Ok(())
}

/// Whether serving on `local` would leave no way in but anonymity where anonymous callers are
/// not let in: not loopback, no `--allow-anonymous`, no admin token, and no API key (as far as
/// Redis says; a Redis that does not answer yet is not held against the start).
fn exposed(local: SocketAddr, config: &ServerConfig, keys_exist: Option<bool>) -> bool {
    !local.ip().is_loopback()
        && !config.allow_anonymous
        && config.admin_token.is_none()
        && keys_exist == Some(false)
}

/// What every request passes before a handler runs: the browser guard (cross-site requests,
/// `Host`) and the request and body deadlines.
#[derive(Debug, Clone)]
pub struct Guards {
    pub browser: Arc<BrowserPolicy>,
    pub timeouts: Timeouts,
}

/// How long a request and its body may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub request: Duration,
    pub body: Duration,
    /// The longest server-side wait a request may ask for (added to `request`).
    pub max_wait: Duration,
}

/// The whole application: the API's routes and the dashboard's, with the middleware every
/// request passes through.
pub fn app(state: AppState, guards: Guards) -> Router {
    let body_deadline = guards.timeouts.body;
    api::routes(&state.limits)
        .merge(dashboard::router())
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        // One layer stack, applied once: each `Router::layer` call would box every request's
        // future again (a parked waiter carries each box for its whole wait). Outermost first;
        // all of it sits inside the router (each route is wrapped), where the front door knows
        // the matched route.
        .layer(
            ServiceBuilder::new()
                // Outside the trace layer, so tokens never reach a log line.
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                    HeaderName::from_static(crate::auth::KEY_HEADER),
                ]))
                .map_request(checked_request_id)
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
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
                .layer(CatchPanicLayer::custom(api::panic_problem))
                .layer(FrontDoorLayer::new(guards, state.metrics.clone()))
                .layer(RequestBodyDeadlineLayer::new(body_deadline))
                .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES)),
        )
        .with_state(state)
}

/// The longest `x-request-id` a client may choose.
const REQUEST_ID_MAX: usize = 64;

/// Keeps a client's `x-request-id` only when it is 1 to [`REQUEST_ID_MAX`] characters of
/// `A-Z a-z 0-9 . _ : -`; anything else (quotes that would forge fields in text logs, 8 KB
/// ids) is dropped, and the request gets a new UUID as if it had sent none.
fn checked_request_id(mut request: axum::extract::Request) -> axum::extract::Request {
    let valid = |id: &[u8]| {
        (1..=REQUEST_ID_MAX).contains(&id.len())
            && id
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    };
    if let Some(id) = request.headers().get("x-request-id")
        && !valid(id.as_bytes())
    {
        request.headers_mut().remove("x-request-id");
    }
    request
}

/// Moves an earlier version's own data out of lock names' reach ([`own_keys::migrate`])
/// before anything reads it. A Redis that does not answer yet is not held against the start:
/// the move is retried every second in the background until it is done (or shutdown).
async fn migrate_own_keys(
    conn: &Redis,
    base: &str,
    shutdown: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServerError> {
    match own_keys::migrate(&mut conn.clone(), base).await {
        Ok(_) => return Ok(None),
        Err(e) if !(e.is_io_error() || e.is_timeout()) => return Err(ServerError::Redis(e)),
        Err(e) => tracing::warn!(error = %e, "could not check for an earlier layout yet"),
    }
    let (conn, base, shutdown) = (conn.clone(), base.to_owned(), shutdown.clone());
    Ok(Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            match own_keys::migrate(&mut conn.clone(), &base).await {
                Ok(_) => return,
                Err(e) => tracing::debug!(error = %e, "earlier layout: still waiting for Redis"),
            }
        }
    })))
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
        Err(e) => Err(ServerError::functions_refused(e.to_string())),
    }
}

/// Says what this Redis can lose and refuses one that evicts keys (unless allowed). A Redis
/// that does not answer yet is not judged: requests get 503 until it does.
async fn check_durability(conn: &Redis, allow_eviction: bool) -> Result<(), DurabilityError> {
    match Durability::read(&mut conn.clone()).await {
        Ok(durability) => durability.judge(allow_eviction),
        Err(e) => {
            tracing::warn!(error = %e, "could not check Redis's persistence and eviction settings");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reachable_server_needs_a_credential_or_an_explicit_yes() {
        let public: SocketAddr = "10.0.0.7:8080".parse().expect("addr");
        let loopback: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let bare = ServerConfig::new("redis://r");
        assert!(exposed(public, &bare, Some(false)));
        assert!(!exposed(loopback, &bare, Some(false)), "loopback is fine");
        assert!(!exposed(public, &bare, Some(true)), "a key exists");
        assert!(!exposed(public, &bare, None), "Redis not answering yet");
        let token = ServerConfig {
            admin_token: Some("an-admin-token-0123456789".into()),
            ..bare.clone()
        };
        assert!(
            !exposed(public, &token, Some(false)),
            "the operator can make keys"
        );
        let open = ServerConfig {
            allow_anonymous: true,
            ..bare
        };
        assert!(!exposed(public, &open, Some(false)), "asked for");
    }

    #[test]
    fn only_a_redis_without_functions_is_told_to_upgrade() {
        let old = ServerError::functions_refused(
            "An error was signalled by the server - ResponseError: unknown command 'FUNCTION', \
             with args beginning with: 'LOAD'"
                .into(),
        );
        assert!(matches!(old, ServerError::NoFunctions(_)), "{old:?}");
        assert!(old.to_string().contains("needs Redis 7.0"), "{old}");
        let refused = ServerError::functions_refused(
            "Error compiling function: user_function:1066: function at line 1066 has more \
             than 60 upvalues"
                .into(),
        );
        assert!(matches!(refused, ServerError::Functions(_)), "{refused:?}");
        let text = refused.to_string();
        assert!(
            text.contains("60 upvalues") && !text.contains("7.0"),
            "{text}"
        );
    }
}
