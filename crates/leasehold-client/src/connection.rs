//! A handle on one Leasehold server ([`Client`]): its base URL, the API key it sends, the CA it
//! trusts, its HTTP stack and timeouts, and the one way every call is built, sent and read
//! (a [`Reply`], or a [`ClientError`]). The calls themselves are in `leases`, `inspect`,
//! `keys` and `watch`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{RequestBuilder, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ClientError, Problem, excerpt};
use crate::secret::ApiKey;
use crate::server_url::ServerUrl;

/// The header the API key travels in.
pub const KEY_HEADER: &str = "leasehold-key";

/// Which routes a lease lives under: `/v1/locks`, `/v1/semaphores`, `/v1/multileases` or, for
/// a candidate of an election, `/v1/elections`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Lock,
    Semaphore,
    /// Several locks held as one lease (`/v1/multileases/{id}`): the lock name is not part
    /// of its routes.
    Multilease,
    /// A candidate of an election (`/v1/elections/{name}/candidates/{id}`): kept, watched and
    /// resigned as a lease is renewed, watched and released; its term is its fencing token.
    Election,
}

impl Resource {
    /// The path of lease `id` (of `lock`), as URL segments.
    pub(crate) fn lease_path<'a>(self, lock: &'a str, id: &'a str) -> Vec<&'a str> {
        match self {
            Self::Lock => vec!["v1", "locks", lock, "leases", id],
            Self::Semaphore => vec!["v1", "semaphores", lock, "leases", id],
            Self::Multilease => vec!["v1", "multileases", id],
            Self::Election => vec!["v1", "elections", lock, "candidates", id],
        }
    }
}

/// How long a call other than a waiting acquire may take before it fails as a transport error.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for a TCP connection: a server that is down should fail fast, not eat the
/// heartbeat budget of `leasehold run`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a client proves itself and whom it trusts.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Sent in the `Leasehold-Key` header of every request.
    pub api_key: Option<ApiKey>,
    /// A PEM file of CA certificates trusted beside the system's (a private CA).
    pub ca_file: Option<PathBuf>,
}

/// A successful answer: the typed body and the JSON document it was read from.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub body: T,
    pub json: Value,
}

/// A reqwest builder with the crypto provider installed first ([`install_crypto_provider`]:
/// reqwest panics on `build()` without one). Every HTTP client of this crate, and of the
/// server's tests and benches, starts here.
pub fn http_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Makes ring the process's TLS crypto provider; later calls do nothing. reqwest is built here
/// without a provider of its own (its default would bring aws-lc-rs, a long C build), so it
/// panics on `build()` until one is installed; the server's listener and `rediss://` clients
/// ask rustls for the same default.
pub fn install_crypto_provider() {
    // Err means another call (or another crate) installed it first: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A handle on one Leasehold server; cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: ServerUrl,
    /// Per call; a waiting acquire adds its wait to it.
    pub(crate) timeout: Duration,
    api_key: Option<ApiKey>,
}

impl Client {
    /// A client of `base` without a key, trusting the system's roots.
    pub fn new(base: ServerUrl) -> Result<Self, ClientError> {
        Self::with_options(base, &ClientOptions::default())
    }

    /// A client of `base` with `options` (an API key, a private CA).
    pub fn with_options(base: ServerUrl, options: &ClientOptions) -> Result<Self, ClientError> {
        let mut builder = http_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &options.ca_file {
            for cert in read_ca(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            http: builder.build()?,
            base,
            timeout: DEFAULT_TIMEOUT,
            api_key: options.api_key.clone(),
        })
    }

    /// The same client with another per-call timeout (a waiting acquire adds its wait to it).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same client over another HTTP stack (an HTTP/2-only client, a custom pool).
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// A request with this client's API key.
    pub(crate) fn request(&self, method: reqwest::Method, url: Url) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.api_key {
            Some(key) => request.header(KEY_HEADER, key.expose()),
            None => request,
        }
    }

    /// The base URL with `segments` appended, each percent-encoded: a lock name with a `/` or
    /// `?` reaches the server as one segment and gets its 422, not someone else's route.
    pub(crate) fn endpoint(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.url().clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|()| ClientError::BadBase(self.base.clone()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// Sends `request` and reads a success body as `T`, or a problem document as
    /// [`ClientError::Problem`].
    pub(crate) async fn send<T: DeserializeOwned>(
        request: RequestBuilder,
    ) -> Result<Reply<T>, ClientError> {
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let unexpected = || ClientError::Unexpected {
            status,
            excerpt: excerpt(&bytes),
        };
        if !status.is_success() {
            return Err(serde_json::from_slice::<Problem>(&bytes)
                .map_err(|_| unexpected())?
                .into());
        }
        let json: Value = serde_json::from_slice(&bytes).map_err(|_| unexpected())?;
        let body = T::deserialize(&json).map_err(|_| unexpected())?;
        Ok(Reply { body, json })
    }
}

/// A duration in whole milliseconds, as the wire counts time.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The certificates of a PEM file.
fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let error = |reason: String| ClientError::CaFile {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| error(e.to_string()))?;
    if certs.is_empty() {
        return Err(error("no certificate in it".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> Client {
        Client::new(base.parse().expect("url")).expect("client")
    }

    #[test]
    fn endpoints_keep_a_path_prefix_and_encode_segments() {
        let url = client("http://h:1/prefix/")
            .endpoint(&["v1", "locks", "a/b?c", "leases"])
            .expect("url");
        assert_eq!(url.as_str(), "http://h:1/prefix/v1/locks/a%2Fb%3Fc/leases");
        let url = client("http://h:1").endpoint(&["v1"]).expect("url");
        assert_eq!(url.as_str(), "http://h:1/v1");
    }
}
