//! Signed-in dashboard users. A session lives in Redis, so signing out (or revoking the key it
//! was opened with) ends it on every instance at once:
//!
//! - the cookie is `v2.<session id>.<HMAC-SHA256(k_cookie, id)>`: 256 random bits and a MAC
//!   that lets any instance turn away a forged cookie without asking Redis; HttpOnly,
//!   SameSite=Strict, and under TLS `Secure` with the `__Host-` prefix;
//! - Redis keeps `P{leasehold/}:session:<sha256(id)>` → who signed in, for 12 hours;
//! - each form carries a CSRF token, `HMAC-SHA256(k_csrf, id)`, checked beside the request's
//!   `Origin` (or `Referer`) against its `Host`.
//!
//! `k_cookie` and `k_csrf` are derived with HKDF-SHA256 from a 256-bit secret every instance
//! shares through Redis (`P{leasehold/}:dashboard-secret`, made once by whichever instance needs
//! it first), never from the admin token: a session proves a sign-in, not the token itself.

use std::sync::Arc;
use std::time::Duration;

use crate::redis::Redis;
use axum::http::HeaderMap;
use axum::http::header;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::sync::OnceCell;

use crate::locks::{TokenDigest, own_key, random_secret};
use crate::redis::wall_ms;

/// The session cookie's name over plain HTTP; under TLS it gets the `__Host-` prefix.
pub const COOKIE: &str = "leasehold_session";
/// How long a sign-in lasts.
pub const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);

type HmacSha256 = Hmac<Sha256>;

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SignedIn {
    /// With the admin token; `admin` fingerprints it, so a new admin token ends old sessions.
    AdminToken { admin: String },
    /// With an API key (its id): the session follows the key's roles and ends with it.
    Key { id: String },
}

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    id: String,
    pub who: SignedIn,
}

impl Session {
    /// The session's id (a secret: never logged).
    pub fn id(&self) -> &str {
        &self.id
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    who: SignedIn,
    expires_at_ms: u64,
}

/// The two keys sessions are signed with, derived from the shared secret.
struct SessionKeys {
    cookie: [u8; 32],
    csrf: [u8; 32],
}

/// The dashboard's sessions; cheap to clone.
#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Redis,
    records: String,
    secret_key: String,
    keys: OnceCell<SessionKeys>,
    /// Served over TLS: the cookie is `Secure` and `__Host-` prefixed.
    secure: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("Redis is unavailable: {0}")]
pub struct SessionError(#[from] redis::RedisError);

impl Sessions {
    pub fn new(conn: Redis, base: &str, secure: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn,
                records: own_key(base, "session:"),
                secret_key: own_key(base, "dashboard-secret"),
                keys: OnceCell::new(),
                secure,
            }),
        }
    }

    /// The cookie's name: `__Host-leasehold_session` under TLS (the browser then accepts it
    /// only from this host, over HTTPS, for every path), else `leasehold_session`.
    pub fn cookie_name(&self) -> String {
        if self.inner.secure {
            format!("__Host-{COOKIE}")
        } else {
            COOKIE.to_owned()
        }
    }

    async fn keys(&self) -> Result<&SessionKeys, SessionError> {
        self.inner
            .keys
            .get_or_try_init(|| async {
                let mut conn = self.inner.conn.clone();
                let fresh = random_secret("", 32);
                // Whoever comes first sets it; everyone then reads the same one.
                redis::cmd("SET")
                    .arg(&self.inner.secret_key)
                    .arg(&fresh)
                    .arg("NX")
                    .query_async::<Option<String>>(&mut conn)
                    .await?;
                let secret: String = redis::cmd("GET")
                    .arg(&self.inner.secret_key)
                    .query_async(&mut conn)
                    .await?;
                let hk = Hkdf::<Sha256>::new(Some(b"leasehold dashboard"), secret.as_bytes());
                let mut keys = SessionKeys {
                    cookie: [0; 32],
                    csrf: [0; 32],
                };
                // Both lengths are 32 bytes, far below HKDF-SHA256's 8160-byte limit.
                let _ = hk.expand(b"session cookie v2", &mut keys.cookie);
                let _ = hk.expand(b"csrf token v2", &mut keys.csrf);
                Ok(keys)
            })
            .await
    }

    /// Opens a session for `who`.
    pub async fn issue(&self, who: SignedIn) -> Result<Session, SessionError> {
        let id = random_secret("", 32);
        let stored = Stored {
            who: who.clone(),
            expires_at_ms: wall_ms().saturating_add(millis(SESSION_LIFE)),
        };
        let json = serde_json::to_string(&stored).unwrap_or_default();
        redis::cmd("SET")
            .arg(self.record_key(&id))
            .arg(json)
            .arg("PX")
            .arg(millis(SESSION_LIFE))
            .query_async::<()>(&mut self.inner.conn.clone())
            .await?;
        Ok(Session { id, who })
    }

    /// The session the request's cookie proves, if any: MAC valid, still in Redis. Redis
    /// failing counts as no session (the caller sees the sign-in page or a 401).
    pub async fn from_headers(&self, headers: &HeaderMap) -> Option<Session> {
        let value = cookie_value(headers, &self.cookie_name())?;
        let (id, mac) = value.strip_prefix("v2.")?.split_once('.')?;
        let keys = self.keys().await.ok()?;
        if !verify(&keys.cookie, id, mac) {
            return None;
        }
        let json: Option<String> = redis::cmd("GET")
            .arg(self.record_key(id))
            .query_async(&mut self.inner.conn.clone())
            .await
            .ok()?;
        let stored: Stored = serde_json::from_str(&json?).ok()?;
        (stored.expires_at_ms > wall_ms()).then(|| Session {
            id: id.to_owned(),
            who: stored.who,
        })
    }

    /// Who the session with this id signed in as, while it lasts (no MAC check: the id
    /// comes from a session already verified).
    pub async fn signed_in(&self, id: &str) -> Result<Option<Session>, SessionError> {
        let json: Option<String> = redis::cmd("GET")
            .arg(self.record_key(id))
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(json
            .and_then(|j| serde_json::from_str::<Stored>(&j).ok())
            .filter(|stored| stored.expires_at_ms > wall_ms())
            .map(|stored| Session {
                id: id.to_owned(),
                who: stored.who,
            }))
    }

    /// Ends the session on every instance.
    pub async fn revoke(&self, session: &Session) -> Result<(), SessionError> {
        redis::cmd("DEL")
            .arg(self.record_key(&session.id))
            .query_async::<()>(&mut self.inner.conn.clone())
            .await?;
        Ok(())
    }

    /// The `Set-Cookie` value that signs in.
    pub async fn set_cookie(&self, session: &Session) -> Result<String, SessionError> {
        let keys = self.keys().await?;
        Ok(format!(
            "{}=v2.{}.{}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.cookie_name(),
            session.id,
            hex::encode(sign(&keys.cookie, &session.id)),
            SESSION_LIFE.as_secs(),
            if self.inner.secure { "; Secure" } else { "" },
        ))
    }

    /// The `Set-Cookie` value that signs out.
    pub fn clear_cookie(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            self.cookie_name(),
            if self.inner.secure { "; Secure" } else { "" },
        )
    }

    /// The CSRF token forms of this session carry.
    pub async fn csrf_token(&self, session: &Session) -> String {
        match self.keys().await {
            Ok(keys) => hex::encode(sign(&keys.csrf, &session.id)),
            Err(_) => String::new(),
        }
    }

    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub async fn accepts_csrf(&self, session: &Session, presented: &str) -> bool {
        match self.keys().await {
            Ok(keys) => verify(&keys.csrf, &session.id, presented),
            Err(_) => false,
        }
    }

    fn record_key(&self, id: &str) -> String {
        format!("{}{}", self.inner.records, TokenDigest::of(id).hex())
    }
}

/// Whether a state-changing request comes from a page of this server: its `Origin` (or, when
/// a browser sent none, its `Referer`) must name the host it was sent to: `authority` (the
/// URI's, which HTTP/2 carries instead of a `Host` header) or the `Host` header. Requests
/// with neither are refused.
pub fn same_origin(authority: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(host) = authority.or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()))
    else {
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

/// HMAC takes keys of any length, so `None` never happens in practice.
fn mac(key: &[u8; 32], message: &str) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(message.as_bytes());
    Some(mac)
}

fn sign(key: &[u8; 32], message: &str) -> Vec<u8> {
    mac(key, message).map_or_else(Vec::new, |m| m.finalize().into_bytes().to_vec())
}

fn verify(key: &[u8; 32], message: &str, presented_hex: &str) -> bool {
    match (mac(key, message), hex::decode(presented_hex).ok()) {
        (Some(mac), Some(presented)) => mac.verify_slice(&presented).is_ok(),
        _ => false,
    }
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
    fn macs_verify_only_with_their_key_and_message() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let tag = hex::encode(sign(&a, "id"));
        assert!(verify(&a, "id", &tag));
        assert!(!verify(&b, "id", &tag));
        assert!(!verify(&a, "other", &tag));
        assert!(!verify(&a, "id", "00"));
        assert!(!verify(&a, "id", "zz"));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let h = headers(&[(header::COOKIE, "theme=dark; leasehold_session=v2.x.y")]);
        assert_eq!(cookie_value(&h, COOKIE), Some("v2.x.y"));
        assert_eq!(cookie_value(&h, "__Host-leasehold_session"), None);
    }

    #[test]
    fn origin_must_name_the_host() {
        let host = (header::HOST, "127.0.0.1:8080");
        assert!(same_origin(
            None,
            &headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:8080")])
        ));
        assert!(same_origin(
            None,
            &headers(&[
                host.clone(),
                (header::REFERER, "http://127.0.0.1:8080/locks/x")
            ])
        ));
        assert!(!same_origin(
            None,
            &headers(&[host.clone(), (header::ORIGIN, "http://evil.example")])
        ));
        assert!(!same_origin(
            None,
            &headers(&[host.clone(), (header::ORIGIN, "null")])
        ));
        assert!(!same_origin(None, &headers(&[host])));
        // HTTP/2 names the host in the URI only.
        let h2 = headers(&[(header::ORIGIN, "https://h:1")]);
        assert!(same_origin(Some("h:1"), &h2));
        assert!(!same_origin(None, &h2));
    }
}
