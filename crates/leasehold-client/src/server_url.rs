//! The base URL of a Leasehold server, checked once when parsed. Its own room: the error
//! type names it (a URL that cannot take a path) and the connection builds on it, so neither
//! of those two imports the other for it.

use std::fmt;
use std::str::FromStr;

use reqwest::Url;

/// The base URL of a Leasehold server (`http://host:port`, optionally with a path prefix when
/// it sits behind a proxy).
#[derive(Debug, Clone)]
pub struct ServerUrl(Url);

/// Why a server URL was refused.
#[derive(Debug, thiserror::Error)]
pub enum InvalidServerUrl {
    #[error("not a URL ({0}); write it like http://127.0.0.1:8080")]
    Syntax(String),
    #[error("only http:// and https:// server URLs are supported, not {0}://")]
    Scheme(String),
}

impl FromStr for ServerUrl {
    type Err = InvalidServerUrl;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let url = Url::parse(raw).map_err(|e| InvalidServerUrl::Syntax(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(InvalidServerUrl::Scheme(url.scheme().to_owned()));
        }
        Ok(Self(url))
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl ServerUrl {
    /// The URL itself.
    pub(crate) fn url(&self) -> &Url {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        assert!("https://h".parse::<ServerUrl>().is_ok());
        assert!(matches!(
            "ftp://h".parse::<ServerUrl>(),
            Err(InvalidServerUrl::Scheme(s)) if s == "ftp"
        ));
        assert!("h:8080".parse::<ServerUrl>().is_err());
        assert!("not a url".parse::<ServerUrl>().is_err());
    }
}
