//! TLS with rustls (the provider from [`crate::crypto`]): the server's certificate and
//! key from PEM files, ALPN for HTTP/2 and HTTP/1.1; and Redis over `rediss://` with an
//! optional private CA.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the server's certificate chain and private key are (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {source}")]
    Cert {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("cannot read the private key {path}: {source}")]
    Key {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCert { path: PathBuf },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The acceptor for `files`.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    crate::crypto::install_provider();
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|source| TlsError::Cert {
            path: files.cert.clone(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCert {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Key {
        path: files.key.clone(),
        source,
    })?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
