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

/// `url` with every credential taken out (the user info, and the `pass`, `password` and
/// `user` query parameters a `redis+unix://` URL may carry), for logs, errors and pages. A
/// URL that does not parse is shown as no URL at all: it may hold a secret anywhere.
pub fn redacted(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "(a Redis URL that does not parse)".to_owned();
    };
    // (Both fail only for URLs that cannot have user info, which then hold none.)
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| {
            !matches!(
                k.to_ascii_lowercase().as_str(),
                "pass" | "password" | "user" | "username"
            )
        })
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    parsed.to_string()
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

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn no_credential_of_any_form_survives_redaction() {
        for (url, shown) in [
            (
                "redis://u:SECRET@10.0.0.1:6379/0",
                "redis://10.0.0.1:6379/0",
            ),
            ("redis://:SECRET@host:6379", "redis://host:6379"),
            ("rediss://SECRET@host", "rediss://host"),
            (
                "redis+unix:///tmp/r.sock?pass=SECRET&db=2",
                "redis+unix:///tmp/r.sock?db=2",
            ),
            (
                "redis+unix:///tmp/r.sock?password=SECRET&user=u",
                "redis+unix:///tmp/r.sock",
            ),
            ("redis://host:6379/?PASSWORD=SECRET", "redis://host:6379/"),
            ("not a url SECRET", "(a Redis URL that does not parse)"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }
}
