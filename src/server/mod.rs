//! Wires Redis, the subscriber, the lock domain, who may do what and the HTTP transports
//! together and serves them on an already bound listener until `shutdown` is cancelled.
//! `main` and the tests both call [`run`], so tests exercise exactly what production runs.
//!
//! - [`settings`]: what [`run`] needs besides the listener ([`ServerConfig`]).
//! - [`router`]: the routes and the middleware every request passes ([`app`]).
//! - [`listener`]: the accept loop (hyper with a timer: header, idle and connection limits).
//! - [`tls`]: certificates for `--tls-cert`/`--tls-key`.

mod front_door;
pub mod listener;
mod router;
mod settings;
pub mod tls;
mod wiring;

pub use router::{Guards, Timeouts, app};
pub use settings::ServerConfig;
use wiring::Tasks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::KeyStore;
use crate::locks::{LockError, Locks};
use crate::metrics::Metrics;
use crate::own_keys;
use crate::redis::durability::{Durability, DurabilityError};
use crate::redis::{ConnectError, Redis};

/// How long open connections may take to finish once shutdown begins. Waiting requests end
/// at once (503); this bounds everything else.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

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
    #[error(transparent)]
    RedlockConfig(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Redlock(#[from] crate::leases::redlock::RedlockSetupError),
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
    let conn = Redis::connect(&config.redis)?;
    let mut tasks = Tasks::default();
    // In Sentinel mode the master is found by these, so they start before the first call.
    tasks.extend(conn.start(&shutdown));
    check_durability(&conn, config.allow_eviction).await?;
    tasks.extend(migrate_own_keys(&conn, &config.locks.key_prefix, &shutdown).await?);
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
    let heard = wiring::subscribe(&conn, &prefix, &shutdown, &mut tasks);
    let metrics = Arc::new(Metrics::new(config.metrics_lock_names));
    let locks = Locks::new(
        conn.clone(),
        &config.locks,
        heard.waiters.clone(),
        shutdown.clone(),
        metrics.clone(),
    );
    load_functions(&locks).await?;
    let redlock = wiring::redlock(&config, &conn, &locks, &metrics, &shutdown, &mut tasks).await?;
    wiring::spawn_lock_tasks(&locks, heard.expired, &mut tasks);
    let access = wiring::access(
        &config,
        keys,
        &conn,
        (tls.is_some(), loopback),
        &shutdown,
        &mut tasks,
    );
    let parts = wiring::Parts {
        locks,
        access,
        metrics,
        redlock,
        subscriber: heard.status,
        feed: heard.feed,
    };
    let state = wiring::state(&config, &conn, parts, &shutdown, &mut tasks);
    let app = app(state, wiring::guards(&config, loopback));
    let serve = listener::serve(listener, app, config.http, tls, shutdown.clone());
    tokio::select! {
        () = serve => {}
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_LIMIT).await } => {
            tracing::warn!("connections still open after the drain limit; closing them");
        }
    }
    shutdown.cancel();
    tasks.join_all().await;
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

/// Moves an earlier version's own data out of lock names' reach ([`own_keys::migrate`])
/// before anything reads it. A Redis that does not answer yet is not held against the start:
/// the move is retried every second in the background until it is done (or shutdown).
async fn migrate_own_keys(
    conn: &Redis,
    base: &str,
    shutdown: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServerError> {
    // No Leasehold before Cluster mode ran on a cluster, so no earlier layout is there to
    // move (and its keys, in other slots than the new ones, could not be renamed in one
    // command there).
    if !conn.capabilities().one_server {
        return Ok(None);
    }
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
    match locks.backend().load_functions().await {
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
/// In a cluster, every primary is judged.
async fn check_durability(conn: &Redis, allow_eviction: bool) -> Result<(), DurabilityError> {
    for node in conn.known_nodes().await {
        let read = match &node {
            None => Durability::read(&mut conn.clone()).await,
            Some(addr) => match conn.node_conn(addr).await {
                Ok(mut node_conn) => Durability::read(&mut node_conn).await,
                Err(e) => Err(DurabilityError::Unreadable(e)),
            },
        };
        match read {
            Ok(durability) => durability.judge(allow_eviction)?,
            Err(e) => tracing::warn!(
                error = %e,
                node = node.as_deref().unwrap_or_default(),
                "could not check Redis's persistence and eviction settings"
            ),
        }
    }
    Ok(())
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
