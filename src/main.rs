//! The `leasehold` binary: parses the command line, sets up logging and the embedded Redis,
//! binds the listener and hands over to the library.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use leasehold::cli;
use leasehold::config::{Cli, Command, HealthcheckArgs, ServeArgs};
use leasehold::embedded_redis::EmbeddedRedis;
use leasehold::locks::random_secret;
use leasehold::server::{self, ServerConfig};
use leasehold::{shutdown, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Serve(args) => serve(args).await,
        Command::Healthcheck(args) => healthcheck(args).await,
        // The client commands choose their own exit codes (see their --help).
        Command::Run(args) => return cli::run::run(args).await,
        Command::Acquire(args) => return cli::acquire(args).await,
        Command::Heartbeat(args) => return cli::heartbeat(args).await,
        Command::Release(args) => return cli::release(args).await,
        Command::Status(args) => return cli::status(args).await,
        Command::Ls(args) => return cli::ls(args).await,
        Command::Hold(args) => return cli::run::hold(args).await,
        Command::Completions(args) => return cli::completions(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(mut args: ServeArgs) -> anyhow::Result<()> {
    args.validate()?;
    telemetry::init(args.log_format);
    let token = CancellationToken::new();
    shutdown::cancel_on_signals(token.clone()).context("cannot install signal handlers")?;

    let embedded = match &args.redis_url {
        Some(_) => None,
        None => {
            let redis = EmbeddedRedis::start(&args.data_dir).await?;
            tracing::info!(url = %redis.url(), data_dir = %args.data_dir.display(),
                "started the embedded redis-server (AOF persistence in the data dir)");
            Some(redis)
        }
    };
    if embedded.is_some() && args.admin_token.is_none() {
        args.admin_token = Some(generated_admin_token(&args)?);
    }
    let redis_url = match (&args.redis_url, &embedded) {
        (Some(url), _) => url.clone(),
        (None, Some(redis)) => redis.url(),
        (None, None) => unreachable!("embedded Redis starts whenever no URL is given"),
    };

    let result = async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        tracing::info!(addr = %listener.local_addr()?, "leasehold is listening");
        let config = ServerConfig::from_args(&args, redis_url, args.admin_token.clone());
        server::run(listener, config, token.clone()).await?;
        anyhow::Ok(())
    }
    .await;
    token.cancel();
    if let Some(redis) = embedded {
        redis.stop().await;
        tracing::info!("stopped the embedded redis-server");
    }
    result
}

/// Makes an admin token for this run, prints it once and keeps it in the data dir (0600) so
/// scripts on this machine can read it.
fn generated_admin_token(args: &ServeArgs) -> anyhow::Result<String> {
    let token = random_secret("lha_", 32);
    let path = args.data_dir.join("admin-token");
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?
    };
    writeln!(file, "{token}")?;
    eprintln!("admin token (also in {}): {token}", path.display());
    Ok(token)
}

/// GET /healthz over plain HTTP/1.1: the container image has no curl.
async fn healthcheck(args: HealthcheckArgs) -> anyhow::Result<()> {
    // A server listening on 0.0.0.0 or [::] is reached on loopback.
    let mut addr = args.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let check = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response.starts_with(b"HTTP/1.1 200"))
    };
    match tokio::time::timeout(Duration::from_secs(3), check).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => anyhow::bail!("/healthz did not answer 200"),
        Ok(Err(e)) => Err(e.context("cannot reach the server")),
        Err(_) => anyhow::bail!("no answer within 3 s"),
    }
}
