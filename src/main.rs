//! The `leasehold` binary: parses the command line, sets up logging and the embedded Redis,
//! binds the listener and hands over to the library.

use std::io::Write as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use leasehold::cli;
use leasehold::config::{Cli, Command, HealthcheckArgs, ServeArgs};
use leasehold::locks::random_secret;
use leasehold::redis::embedded::{EmbeddedRedis, EmbeddedRedisError};
use leasehold::server::{self, ServerConfig};
use leasehold::{shutdown, telemetry};

/// mimalloc rather than glibc's malloc: profiled under load, the server spent a quarter of its
/// CPU in glibc's malloc and free (a request makes many small, short-lived allocations, on
/// whichever worker thread runs it). Built without transparent huge pages (`no_thp`): with them
/// every parked HTTP/1.1 waiter cost about 12 KB more resident memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let command = Cli::parse().command;
    // The server sizes its runtime (--worker-threads); the client commands take tokio's
    // default, one thread per core.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(args) = &command {
        builder.worker_threads(args.worker_threads(cores()));
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(command))
}

/// This machine's cores (as the process may use them).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

async fn run(command: Command) -> std::process::ExitCode {
    let result = match command {
        Command::Serve(args) => serve(args).await,
        Command::Healthcheck(args) => healthcheck(args).await,
        // The client commands choose their own exit codes (see their --help).
        Command::Run(args) => return cli::run::run(args).await,
        Command::Acquire(args) => return cli::acquire(args).await,
        Command::Heartbeat(args) => return cli::heartbeat(args).await,
        Command::Release(args) => return cli::release(args).await,
        Command::Status(args) => return cli::status(args).await,
        Command::Keys(command) => return cli::keys::run(command).await,
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

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    args.validate()?;
    telemetry::init(args.log_format);
    let token = CancellationToken::new();
    shutdown::cancel_on_signals(token.clone()).context("cannot install signal handlers")?;

    let embedded = match &args.redis_url {
        Some(_) => None,
        None => {
            private_data_dir(&args.data_dir)?;
            let redis =
                match EmbeddedRedis::start(&args.data_dir, &args.redis_maxmemory, &token).await {
                    Ok(redis) => redis,
                    Err(EmbeddedRedisError::Stopped) => {
                        tracing::info!("stopped before the embedded redis-server was up");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                };
            tracing::info!(url = %redis.url(), data_dir = %args.data_dir.display(),
                maxmemory = %args.redis_maxmemory,
                "started the embedded redis-server (AOF persistence in the data dir)");
            Some(redis)
        }
    };
    let admin_token = match (&args.admin_token, &args.admin_token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(path)) => Some(read_admin_token(path)?),
        (None, None) if embedded.is_some() => Some(generated_admin_token(&args.data_dir)?),
        (None, None) => None,
    };
    let redis_url = match (&args.redis_url, &embedded) {
        (Some(url), _) => url.clone(),
        (None, Some(redis)) => redis.url(),
        (None, None) => unreachable!("embedded Redis starts whenever no URL is given"),
    };

    let result = async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let scheme = if args.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(addr = %addr, %scheme, threads = args.worker_threads(cores()),
            "leasehold is listening");
        if args.allow_anonymous && !addr.ip().is_loopback() && args.allowed_hosts.is_empty() {
            tracing::warn!(
                "anonymous callers are let in on a non-loopback address with no \
                --allowed-hosts: a web page on a name that resolves here (DNS rebinding) \
                could reach the API through a browser"
            );
        }
        let config = ServerConfig::from_args(&args, redis_url, admin_token);
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

/// The data dir holds the admin token and Redis's data: it must be ours alone. Created 0700
/// when missing; refused when another user owns it or anyone else may enter it.
fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the data dir {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("cannot read the data dir {}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        anyhow::bail!(
            "the data dir {} belongs to uid {}, not to this user (uid {me}): it holds the \
             admin token and every lock, so it must be this user's own",
            dir.display(),
            meta.uid()
        );
    }
    if meta.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "the data dir {} is open to other users (mode {:o}); run `chmod 700 {}`",
            dir.display(),
            meta.permissions().mode() & 0o777,
            dir.display()
        );
    }
    Ok(())
}

/// The admin token kept in the data dir: reused when it is there (0600, ours), else made
/// once. Only its path is printed: the token itself never reaches a log.
fn generated_admin_token(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("admin-token");
    if path.exists() {
        let meta = std::fs::metadata(&path)?;
        if meta.permissions().mode() & 0o077 != 0 {
            anyhow::bail!(
                "{} is readable by other users (mode {:o}); run `chmod 600 {}` or delete it",
                path.display(),
                meta.permissions().mode() & 0o777,
                path.display()
            );
        }
        let token = read_admin_token(&path)?;
        eprintln!("admin token: in {}", path.display());
        return Ok(token);
    }
    let token = random_secret("lha_", 32);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writeln!(file, "{token}")?;
    eprintln!("admin token: generated into {} (0600)", path.display());
    Ok(token)
}

/// The first line of `path`, at least 16 characters.
fn read_admin_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the admin token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < 16 {
        anyhow::bail!(
            "the admin token in {} is shorter than 16 characters",
            path.display()
        );
    }
    Ok(token)
}

/// GET /healthz over plain HTTP/1.1 (the container image has no curl), or over TLS when the
/// server has a certificate.
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
        if args.tls_cert.is_some() {
            // Asks only whether this machine's process answers: no certificate to verify.
            let http = leasehold::client::http_builder()
                .tls_danger_accept_invalid_certs(true)
                .build()?;
            let response = http.get(format!("https://{addr}/healthz")).send().await?;
            return anyhow::Ok(response.status() == reqwest::StatusCode::OK);
        }
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
