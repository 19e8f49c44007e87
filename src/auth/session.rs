//! Signed-in dashboard admins, without server-side session state (any instance with the same
//! admin token verifies any session):
//!
//! - the session cookie is `v1.<expiry-ms>.<HMAC-SHA256(key, "session:v1:<expiry-ms>")>`,
//!   HttpOnly, SameSite=Strict, keyed by the admin token's digest ([`AdminAuth::session_key`]);
//! - each form carries a CSRF token, `HMAC-SHA256(key, "csrf:<cookie>")`, checked beside the
//!   request's `Origin` (or `Referer`) against its `Host`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use axum::http::header;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

use super::AdminAuth;

/// The session cookie's name.
pub const COOKIE: &str = "leasehold_session";
/// How long a sign-in lasts.
pub const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);

type HmacSha256 = Hmac<Sha256>;

/// A verified session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    cookie: String,
}

impl Session {
    /// A new session for an admin who just proved the token; `None` when admin is disabled.
    pub fn issue(admin: &AdminAuth) -> Option<Self> {
        let expiry = now_ms().saturating_add(millis(SESSION_LIFE));
        let mac = sign(admin, &format!("session:v1:{expiry}"))?;
        Some(Self {
            cookie: format!("v1.{expiry}.{}", hex(&mac)),
        })
    }

    /// The session the request's cookie proves, if any (signature valid, not expired).
    pub fn from_headers(admin: &AdminAuth, headers: &HeaderMap) -> Option<Self> {
        let value = cookie_value(headers, COOKIE)?;
        let rest = value.strip_prefix("v1.")?;
        let (expiry, mac) = rest.split_once('.')?;
        let expiry_ms: u64 = expiry.parse().ok()?;
        if expiry_ms <= now_ms() {
            return None;
        }
        verify(admin, &format!("session:v1:{expiry_ms}"), mac).then(|| Self {
            cookie: value.to_owned(),
        })
    }

    /// The `Set-Cookie` value that signs in.
    pub fn set_cookie(&self) -> String {
        format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
            self.cookie,
            SESSION_LIFE.as_secs()
        )
    }

    /// The `Set-Cookie` value that signs out.
    pub fn clear_cookie() -> String {
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }

    /// The CSRF token forms of this session carry.
    pub fn csrf_token(&self, admin: &AdminAuth) -> String {
        sign(admin, &format!("csrf:{}", self.cookie))
            .map(|mac| hex(&mac))
            .unwrap_or_default()
    }

    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub fn accepts_csrf(&self, admin: &AdminAuth, presented: &str) -> bool {
        verify(admin, &format!("csrf:{}", self.cookie), presented)
    }
}

/// Whether a state-changing request comes from a page of this server: its `Origin` (or, when
/// a browser sent none, its `Referer`) must name the `Host` it was sent to. Requests with
/// neither are refused.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|h| h.to_str().ok())
        .filter(|o| *o != "null")
        .map(str::to_owned)
        .or_else(|| {
            let referer = headers.get(header::REFERER)?.to_str().ok()?;
            let (scheme, rest) = referer.split_once("://")?;
            let authority = rest.split('/').next()?;
            Some(format!("{scheme}://{authority}"))
        });
    let Some(origin) = origin else {
        return false;
    };
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host))
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

fn mac(admin: &AdminAuth, message: &str) -> Option<HmacSha256> {
    let key = admin.session_key()?;
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(message.as_bytes());
    Some(mac)
}

fn sign(admin: &AdminAuth, message: &str) -> Option<Vec<u8>> {
    Some(mac(admin, message)?.finalize().into_bytes().to_vec())
}

fn verify(admin: &AdminAuth, message: &str, presented_hex: &str) -> bool {
    match (mac(admin, message), unhex(presented_hex)) {
        (Some(mac), Some(presented)) => mac.verify_slice(&presented).is_ok(),
        _ => false,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    #[test]
    fn sessions_verify_only_with_the_same_admin_token() {
        let admin = AdminAuth::from_token(Some("an-admin-token-0123456789"));
        let other = AdminAuth::from_token(Some("another-token-0123456789"));
        let session = Session::issue(&admin).expect("admin enabled");
        let cookie = session.set_cookie();
        assert!(!cookie.contains("an-admin-token"));
        let value = cookie.split(';').next().expect("pair");
        let h = headers(&[(header::COOKIE, &format!("theme=dark; {value}"))]);
        assert_eq!(Session::from_headers(&admin, &h), Some(session.clone()));
        assert_eq!(Session::from_headers(&other, &h), None);
        assert!(Session::from_headers(&AdminAuth::Disabled, &h).is_none());

        // A later expiry with the old signature is refused.
        let forged = value.replacen("v1.", "v1.9", 1);
        let h = headers(&[(header::COOKIE, &forged)]);
        assert_eq!(Session::from_headers(&admin, &h), None);

        let csrf = session.csrf_token(&admin);
        assert!(session.accepts_csrf(&admin, &csrf));
        assert!(!session.accepts_csrf(&admin, "00"));
        assert!(!session.accepts_csrf(&other, &csrf));
    }

    #[test]
    fn origin_must_name_the_host() {
        let host = (header::HOST, "127.0.0.1:8080");
        assert!(same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "http://127.0.0.1:8080")
        ])));
        assert!(same_origin(&headers(&[
            host.clone(),
            (header::REFERER, "http://127.0.0.1:8080/locks/x")
        ])));
        assert!(!same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "null")
        ])));
        assert!(!same_origin(&headers(&[host])));
    }
}
