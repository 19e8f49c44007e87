//! `leasehold healthcheck`: exit 0 when the local server answers `GET /healthz` with 200, for
//! container health checks (the image has no curl).
//!
//! Cleartext is checked with a request written by hand, TLS with reqwest. reqwest for both
//! would be simpler, but would change what the check sends (reqwest's own headers, and a
//! proxy it may take from the environment), so that is left to a change of its own.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::describe;
use crate::config::HealthcheckArgs;

/// How long the server has to answer.
const LIMIT: Duration = Duration::from_secs(3);

/// Why the server is not taken as healthy.
#[derive(Debug, thiserror::Error)]
pub enum HealthcheckError {
    #[error("/healthz did not answer 200")]
    NotOk,
    #[error("cannot reach the server")]
    Http(#[source] reqwest::Error),
    #[error("cannot reach the server")]
    Tcp(#[source] io::Error),
    #[error("no answer within {} s", LIMIT.as_secs())]
    Timeout,
}

/// Checks once; a failure is printed with its causes.
pub async fn run(args: HealthcheckArgs) -> ExitCode {
    match check(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold: {}", describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// GET /healthz over plain HTTP/1.1, or over TLS when the server has a certificate.
async fn check(args: HealthcheckArgs) -> Result<(), HealthcheckError> {
    // A server listening on 0.0.0.0 or [::] is reached on loopback.
    let mut addr = args.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    let answered = async {
        if args.tls_cert.is_some() {
            https_ok(addr).await.map_err(HealthcheckError::Http)
        } else {
            http_ok(addr).await.map_err(HealthcheckError::Tcp)
        }
    };
    match tokio::time::timeout(LIMIT, answered).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(HealthcheckError::NotOk),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(HealthcheckError::Timeout),
    }
}

/// Over TLS. Asks only whether this machine's process answers: no certificate to verify.
async fn https_ok(addr: SocketAddr) -> Result<bool, reqwest::Error> {
    let http = crate::client::http_builder()
        .tls_danger_accept_invalid_certs(true)
        .build()?;
    let response = http.get(format!("https://{addr}/healthz")).send().await?;
    Ok(response.status() == reqwest::StatusCode::OK)
}

/// Over cleartext HTTP/1.1, by hand.
async fn http_ok(addr: SocketAddr) -> io::Result<bool> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(response.starts_with(b"HTTP/1.1 200"))
}
