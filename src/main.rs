//! The `leasehold` binary: parses the command line, starts the async runtime (sized by
//! `serve --worker-threads`) and dispatches to the library. `serve` is assembled here, the one
//! place that may import every layer (the map in `src/lib.rs`).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use leasehold::cli::{self, serve::admin_token};
use leasehold::config::{Cli, Command, ServeArgs};
use leasehold::redis::embedded::{EmbeddedRedis, EmbeddedRedisError};
use leasehold::server::{self, ServerConfig};
use leasehold::{locks::random_secret, shutdown, telemetry};

/// mimalloc rather than glibc's malloc: a request makes many small, short-lived allocations,
/// on whichever worker thread runs it, and glibc's malloc and free took a large share of the
/// CPU under load. Built without transparent huge pages (`no_thp`), which grew every parked
/// HTTP/1.1 waiter's resident memory (BENCHMARKS.md, W9).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let command = Cli::parse().command;
    match cli::serve::runtime(&command) {
        Ok(runtime) => runtime.block_on(run(command)),
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The client commands print their own errors and choose their exit codes (see their --help).
async fn run(command: Command) -> ExitCode {
    match command {
        Command::Serve(args) => serve(args).await.map_or_else(
            |e| {
                eprintln!("leasehold: {e:#}");
                ExitCode::FAILURE
            },
            |()| ExitCode::SUCCESS,
        ),
        Command::Healthcheck(args) => cli::healthcheck::run(args).await,
        Command::Run(args) => cli::run::run(args).await,
        Command::Acquire(args) => cli::acquire(args).await,
        Command::Heartbeat(args) => cli::heartbeat(args).await,
        Command::Release(args) => cli::release(args).await,
        Command::Status(args) => cli::status(args).await,
        Command::Keys(command) => cli::keys::run(command).await,
        Command::Ls(args) => cli::ls(args).await,
        Command::Hold(args) => cli::run::hold(args).await,
        Command::Elect(args) => cli::run::elect(args).await,
        Command::Leader(args) => cli::election::leader(args).await,
        Command::Observe(args) => cli::election::observe(args).await,
        Command::Completions(args) => cli::completions(&args),
    }
}

/// Starts the embedded Redis unless given a URL or Sentinels, serves until SIGINT or SIGTERM, stops it.
async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    args.validate()?;
    telemetry::init(args.log_format);
    let token = CancellationToken::new();
    shutdown::cancel_on_signals(token.clone()).context("cannot install signal handlers")?;
    let (redis_url, embedded) = match &args.redis_url {
        Some(url) => (url.clone(), None),
        // The Sentinels name the master: no URL, no embedded Redis.
        None if args.external_redis() => (String::new(), None),
        None => match EmbeddedRedis::start(&args.data_dir, &args.redis_maxmemory, &token).await {
            Ok(redis) => (redis.url(), Some(redis)),
            Err(EmbeddedRedisError::Stopped) => {
                tracing::info!("stopped before the embedded redis-server was up");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        },
    };
    let admin = admin_token::choose(&args, embedded.is_some(), || random_secret("lha_", 32))?;
    let result = async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        cli::serve::announce(&args, listener.local_addr()?);
        let config = ServerConfig::from_args(&args, redis_url, admin);
        anyhow::Ok(server::run(listener, config, token.clone()).await?)
    }
    .await;
    token.cancel();
    if let Some(redis) = embedded {
        redis.stop().await;
        tracing::info!("stopped the embedded redis-server");
    }
    result
}
