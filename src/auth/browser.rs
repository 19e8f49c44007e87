//! Requests a browser sends on behalf of a page of another site are refused, on every route:
//!
//! - `Sec-Fetch-Site: cross-site` or `same-site` (another port of `localhost` is the same
//!   site), or an `Origin` that is not this server's: a page elsewhere cannot take, release
//!   or read locks, even with "simple" requests a browser sends without a CORS preflight
//!   (a form post, `text/plain`). Top-level navigations (`Sec-Fetch-Mode: navigate`, GET or
//!   HEAD) still work, so a link to the dashboard can be followed: the page that linked
//!   cannot read the answer, and sessions are SameSite=Strict.
//! - A `Host` outside the allowed names: a page on a domain an attacker points at this
//!   server's address (DNS rebinding) is same-origin in the browser's eyes, and only the Host
//!   header tells. A loopback server allows `localhost`, `127.0.0.1` and `::1` by default.
//!
//! curl, the CLI and other programs send neither `Origin` nor `Sec-Fetch-*`, and name the
//! host they connect to: they are unaffected.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, header};

use crate::problem::{Problem, ProblemKind};

/// Which `Host` names are served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrowserPolicy {
    /// Lower-case host names (no port); `None`: any.
    pub allowed_hosts: Option<Vec<String>>,
}

impl BrowserPolicy {
    /// The names a loopback listener answers to.
    pub fn loopback() -> Self {
        Self {
            allowed_hosts: Some(
                ["localhost", "127.0.0.1", "::1"]
                    .map(str::to_owned)
                    .to_vec(),
            ),
        }
    }

    /// Why this request is refused, if it is.
    pub fn check(
        &self,
        method: &Method,
        authority: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<(), Problem> {
        let host = authority.or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
        if let Some(allowed) = &self.allowed_hosts {
            let name = host.map(host_name).unwrap_or_default();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(&name)) {
                return Err(Problem::new(
                    ProblemKind::HostNotAllowed,
                    format!(
                        "this server answers to {allowed:?} only (--allowed-hosts), not {name:?}"
                    ),
                ));
            }
        }
        let navigation = matches!(*method, Method::GET | Method::HEAD)
            && header_is(headers, "sec-fetch-mode", "navigate");
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if matches!(site, Some("cross-site" | "same-site")) && !navigation {
            return Err(cross_origin("a page of another site sent this request"));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let same = match (origin.to_str().ok(), host) {
                (Some(origin), Some(host)) => ["http://", "https://"]
                    .iter()
                    .any(|scheme| origin.strip_prefix(scheme) == Some(host)),
                _ => false,
            };
            if !same && !navigation {
                return Err(cross_origin(
                    "the request's Origin is not this server (cross-origin requests are refused)",
                ));
            }
        }
        Ok(())
    }
}

fn cross_origin(detail: &str) -> Problem {
    Problem::new(ProblemKind::CrossOrigin, detail)
}

fn header_is(headers: &HeaderMap, name: &str, value: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(value))
}

/// The host name of a `Host` value, lower-cased, without its port (`[::1]:80` → `::1`).
fn host_name(host: &str) -> String {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.to_ascii_lowercase()
}

/// Health checks answer whatever name a load balancer uses.
const UNGUARDED: [&str; 2] = ["/healthz", "/readyz"];

/// Refuses what [`BrowserPolicy::check`] refuses, before any handler runs (the server's
/// front-door middleware calls it).
pub fn admit(policy: &BrowserPolicy, request: &Request) -> Result<(), Problem> {
    if UNGUARDED.contains(&request.uri().path()) {
        return Ok(());
    }
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    policy.check(request.method(), authority.as_deref(), request.headers())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn programs_pass_and_other_sites_do_not() {
        let policy = BrowserPolicy::loopback();
        let post = Method::POST;
        let curl = headers(&[("host", "127.0.0.1:8080")]);
        assert!(policy.check(&post, None, &curl).is_ok());
        let same = headers(&[
            ("host", "localhost:8080"),
            ("origin", "http://localhost:8080"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(policy.check(&post, None, &same).is_ok());
        for bad in [
            headers(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
            ]),
            headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]),
            headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]),
            headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")]),
        ] {
            let refused = policy.check(&post, None, &bad).expect_err("refused");
            assert_eq!(refused.kind(), ProblemKind::CrossOrigin);
        }
        let rebound = headers(&[("host", "attacker.example:8080")]);
        let refused = policy
            .check(&Method::GET, None, &rebound)
            .expect_err("refused");
        assert_eq!(refused.kind(), ProblemKind::HostNotAllowed);
        assert!(
            BrowserPolicy::default()
                .check(&Method::GET, None, &rebound)
                .is_ok()
        );
        let link = headers(&[
            ("host", "[::1]:8080"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ]);
        assert!(policy.check(&Method::GET, None, &link).is_ok());
        assert!(policy.check(&post, None, &link).is_err());
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("LOCALHOST:80"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "::1");
        assert_eq!(host_name("example.com"), "example.com");
    }
}
