//! How Leasehold reaches Redis: the client for a URL (`redis://`, `rediss://` with the system's
//! roots or a private CA, `redis+unix://`), and the connection policy every call shares.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ::redis::aio::ConnectionManagerConfig;

/// Where Redis is and how long a call may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    pub url: String,
    /// A PEM CA that a `rediss://` server's certificate is checked against instead of the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// How long a call (and a reconnect) may take before it fails, answered 503.
    pub timeout: Duration,
    /// Sentinel mode: the Sentinels name the master (`url` is then unused).
    pub sentinel: Option<super::SentinelSettings>,
    /// Cluster mode: the cluster's nodes (`url` is then unused).
    pub cluster: Option<super::ClusterSettings>,
    /// How many replicas must acknowledge a grant.
    pub acks: super::AckSettings,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid Redis URL: {0}")]
    Url(#[source] ::redis::RedisError),
    #[error("cannot read the Redis CA file {path}: {source}")]
    Ca {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A Redis client for `url`; with `ca` (PEM), a `rediss://` server's certificate is checked
/// against that CA instead of the system's.
pub(super) fn client(url: &str, ca: Option<&Path>) -> Result<::redis::Client, ConnectError> {
    leasehold_client::install_crypto_provider();
    let Some(ca) = ca else {
        return ::redis::Client::open(url).map_err(ConnectError::Url);
    };
    let root_cert = std::fs::read(ca).map_err(|source| ConnectError::Ca {
        path: ca.to_owned(),
        source,
    })?;
    ::redis::Client::build_with_tls(
        url,
        ::redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        },
    )
    .map_err(ConnectError::Url)
}

/// Few, quick reconnect attempts: while Redis is away, requests must fail fast (503) instead
/// of queueing behind a long backoff.
pub(super) fn policy(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(timeout))
        .set_connection_timeout(Some(timeout.min(Duration::from_millis(500))))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(200))
}

/// A node's TCP address, with TLS (`rediss`) when `tls`; the Sentinel and Cluster modes
/// connect to nodes they are told of this way.
pub(super) fn tcp_addr(tls: bool, host: String, port: u16) -> ::redis::ConnectionAddr {
    if tls {
        leasehold_client::install_crypto_provider();
        ::redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ::redis::ConnectionAddr::Tcp(host, port)
    }
}
