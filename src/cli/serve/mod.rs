//! `leasehold serve`: from the parsed flags to a running server. Starts the embedded
//! redis-server when no `--redis-url` is given (in a data dir of this user's alone, see
//! [`data_dir`]), settles the admin token ([`admin_token`]), binds the listener and hands it
//! to [`server::run`]; stops the embedded Redis after the server has stopped.
//!
//! The one part of `cli` that reaches past the wire format: it assembles the server.

mod admin_token;
mod data_dir;

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use self::admin_token::AdminTokenError;
pub use self::data_dir::DataDirError;
use super::describe;
use crate::config::{ConfigError, ServeArgs};
use crate::redis::embedded::{EmbeddedRedis, EmbeddedRedisError};
use crate::server::{self, ServerConfig, ServerError};
use crate::{shutdown, telemetry};

/// Why `serve` could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot install signal handlers")]
    Signals(#[source] io::Error),
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error(transparent)]
    EmbeddedRedis(#[from] EmbeddedRedisError),
    #[error(transparent)]
    AdminToken(#[from] AdminTokenError),
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The bound listener cannot say its own address.
    #[error(transparent)]
    LocalAddr(io::Error),
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// Runs the server until SIGINT or SIGTERM; a failure is printed with its causes.
pub async fn run(args: ServeArgs) -> ExitCode {
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold: {}", describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// How many threads serve requests on this machine (see --worker-threads): the runtime is
/// built with this many, and the start-up log says so.
pub fn worker_threads(args: &ServeArgs) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    args.worker_threads(cores)
}

async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    args.validate()?;
    telemetry::init(args.log_format);
    let token = CancellationToken::new();
    shutdown::cancel_on_signals(token.clone()).map_err(ServeError::Signals)?;

    let (redis_url, embedded) = match &args.redis_url {
        Some(url) => (url.clone(), None),
        None => match start_embedded(&args, &token).await? {
            Some(redis) => (redis.url(), Some(redis)),
            None => return Ok(()),
        },
    };
    let admin_token = match (&args.admin_token, &args.admin_token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(path)) => Some(admin_token::read(path)?),
        (None, None) if embedded.is_some() => Some(admin_token::kept_in(&args.data_dir)?),
        (None, None) => None,
    };

    let result = listen_and_serve(&args, redis_url, admin_token, &token).await;
    token.cancel();
    if let Some(redis) = embedded {
        redis.stop().await;
        tracing::info!("stopped the embedded redis-server");
    }
    result
}

/// The embedded redis-server in the data dir; `None` when a signal stopped us before it was
/// up (nothing to serve then, and nothing wrong).
async fn start_embedded(
    args: &ServeArgs,
    token: &CancellationToken,
) -> Result<Option<EmbeddedRedis>, ServeError> {
    data_dir::make_private(&args.data_dir)?;
    let redis = match EmbeddedRedis::start(&args.data_dir, &args.redis_maxmemory, token).await {
        Ok(redis) => redis,
        Err(EmbeddedRedisError::Stopped) => {
            tracing::info!("stopped before the embedded redis-server was up");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(url = %redis.url(), data_dir = %args.data_dir.display(),
        maxmemory = %args.redis_maxmemory,
        "started the embedded redis-server (AOF persistence in the data dir)");
    Ok(Some(redis))
}

/// Binds `--listen` and serves until `token` is cancelled.
async fn listen_and_serve(
    args: &ServeArgs,
    redis_url: String,
    admin_token: Option<String>,
    token: &CancellationToken,
) -> Result<(), ServeError> {
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: args.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(addr = %addr, %scheme, threads = worker_threads(args),
        "leasehold is listening");
    if args.allow_anonymous && !addr.ip().is_loopback() && args.allowed_hosts.is_empty() {
        tracing::warn!(
            "anonymous callers are let in on a non-loopback address with no \
            --allowed-hosts: a web page on a name that resolves here (DNS rebinding) \
            could reach the API through a browser"
        );
    }
    let config = ServerConfig::from_args(args, redis_url, admin_token);
    server::run(listener, config, token.clone()).await?;
    Ok(())
}
