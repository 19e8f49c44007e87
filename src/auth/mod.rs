//! Who may do what: the admin token (bearer, for programs) and the dashboard's signed-in
//! admin sessions ([`session`]), and who may read. Both transports (the API and the
//! dashboard) ask here; neither asks the other.

pub mod session;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use subtle::ConstantTimeEq as _;

use crate::locks::TokenDigest;
use crate::problem::{Problem, ProblemKind};

pub use session::{Session, same_origin};

/// Who may call the admin routes.
#[derive(Clone)]
pub enum AdminAuth {
    /// No admin token configured: admin routes refuse everyone.
    Disabled,
    /// The SHA-256 of the admin token.
    Token(TokenDigest),
}

impl AdminAuth {
    pub fn from_token(token: Option<&str>) -> Self {
        token.map_or(Self::Disabled, |t| Self::Token(TokenDigest::of(t)))
    }

    /// The secret dashboard sessions are signed with: the admin token's SHA-256, so every
    /// instance configured with the same token accepts the same sessions, and the token itself
    /// never leaves the server. `None` when admin is disabled.
    pub fn session_key(&self) -> Option<&[u8; 32]> {
        match self {
            Self::Disabled => None,
            Self::Token(digest) => Some(digest.as_bytes()),
        }
    }

    /// Compares digests in constant time, so timing reveals nothing about the token.
    pub fn accepts(&self, presented: &str) -> bool {
        match self {
            Self::Disabled => false,
            Self::Token(expected) => bool::from(
                TokenDigest::of(presented)
                    .as_bytes()
                    .ct_eq(expected.as_bytes()),
            ),
        }
    }
}

/// Whether the request may read: always, unless the dashboard is `private`; then it needs a
/// session (or, for programs on `/v1/events`, the admin bearer token, checked by the caller).
pub fn may_view(admin: &AdminAuth, private: bool, headers: &HeaderMap) -> bool {
    !private || Session::from_headers(admin, headers).is_some()
}

/// Proof that the request carries the admin token (`Authorization: Bearer`).
#[derive(Debug)]
pub struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    AdminAuth: FromRef<S>,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let admin = AdminAuth::from_ref(state);
        if matches!(admin, AdminAuth::Disabled) {
            return Err(Problem::new(
                ProblemKind::AdminDisabled,
                "start the server with --admin-token (LEASEHOLD_ADMIN_TOKEN) to use admin routes",
            ));
        }
        match bearer(&parts.headers)? {
            None => Err(Problem::new(
                ProblemKind::AdminTokenRequired,
                "send the admin token as Authorization: Bearer <token>",
            )),
            Some(token) if admin.accepts(&token) => Ok(Admin),
            Some(_) => Err(Problem::new(
                ProblemKind::AdminTokenInvalid,
                "wrong admin token",
            )),
        }
    }
}

/// The `Authorization: Bearer <token>` header's token, if any; another scheme is a 401.
pub fn bearer(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| Some(token.trim().to_owned()))
        .ok_or_else(|| {
            Problem::new(
                ProblemKind::TokenMalformed,
                "use Authorization: Bearer <token>",
            )
        })
}
