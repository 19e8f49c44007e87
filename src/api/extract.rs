//! Extractors that answer bad input with problem+json instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::problem::{Problem, ProblemKind};
use crate::locks::{IdempotencyKey, LeaseId, LeaseToken, LockName};

/// Path parameters; a segment axum cannot decode names no resource (404 problem).
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(Problem))]
pub struct Path<T>(pub T);

impl From<PathRejection> for Problem {
    fn from(e: PathRejection) -> Self {
        Problem::new(ProblemKind::NotFound, e.body_text())
    }
}

/// Query parameters; a wrong type (`wait_ms=soon`) becomes a 400 problem naming the field.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Problem))]
pub struct Query<T>(pub T);

impl From<QueryRejection> for Problem {
    fn from(e: QueryRejection) -> Self {
        Problem::new(ProblemKind::InvalidQuery, e.body_text())
    }
}

/// An optional JSON body: empty means `T::default()`. Syntax errors are 400, well-formed JSON
/// of the wrong shape (unknown fields, wrong types) 422. `curl -d` sends
/// `application/x-www-form-urlencoded`, so that content type is read as JSON too.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let bytes = Bytes::from_request(req, state).await.map_err(|e| match e {
            BytesRejection::FailedToBufferBody(_) if e.status().as_u16() == 413 => Problem::new(
                ProblemKind::PayloadTooLarge,
                "request bodies are limited to 64 KiB",
            ),
            other => Problem::new(ProblemKind::MalformedJson, other.body_text()),
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        match content_type.as_deref() {
            None | Some("application/json" | "application/x-www-form-urlencoded") => {}
            Some(ct) if ct.ends_with("+json") => {}
            Some(other) => {
                return Err(Problem::new(
                    ProblemKind::UnsupportedMediaType,
                    format!("send the body as application/json, not {other}"),
                ));
            }
        }
        serde_json::from_slice(&bytes).map(Self).map_err(|e| {
            let kind = match e.classify() {
                serde_json::error::Category::Data => ProblemKind::InvalidBody,
                _ => ProblemKind::MalformedJson,
            };
            Problem::new(kind, e.to_string())
        })
    }
}

/// The `Authorization: Bearer <token>` header, if any. Another scheme is a 401.
#[derive(Debug)]
pub struct Bearer(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(AUTHORIZATION) else {
            return Ok(Self(None));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim().to_owned())
            .ok_or_else(|| {
                Problem::new(
                    ProblemKind::TokenMalformed,
                    "use Authorization: Bearer <token>",
                )
            })?;
        Ok(Self(Some(token)))
    }
}

impl Bearer {
    /// The lease token, if one was sent.
    pub fn lease_token(&self) -> Result<Option<LeaseToken>, Problem> {
        self.0
            .as_deref()
            .map(LeaseToken::parse)
            .transpose()
            .map_err(Problem::from)
    }

    /// The lease token, required.
    pub fn require_lease_token(&self) -> Result<LeaseToken, Problem> {
        self.lease_token()?.ok_or_else(|| {
            Problem::new(
                ProblemKind::TokenMissing,
                "send the lease token as Authorization: Bearer <token>",
            )
        })
    }
}

/// The `Idempotency-Key` header, if any: a retry carrying the same key (and the same
/// request) gets the first answer.
#[derive(Debug)]
pub struct Idempotency(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for Idempotency {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let raw = value.to_str().map_err(|_| {
            Problem::new(
                ProblemKind::InvalidIdempotencyKey,
                "an Idempotency-Key has 1 to 255 printable ASCII characters",
            )
        })?;
        Ok(Self(Some(IdempotencyKey::parse(raw)?)))
    }
}

/// Parses the `{name}` segment.
pub fn lock_name(raw: &str) -> Result<LockName, Problem> {
    LockName::parse(raw).map_err(Problem::from)
}

/// Parses the `{lease_id}` segment; what is not a lease id names no lease.
pub fn lease_id(raw: &str) -> Result<LeaseId, Problem> {
    LeaseId::parse(raw).ok_or_else(|| {
        Problem::new(
            ProblemKind::LeaseNotFound,
            format!("{raw:?} is not a lease id"),
        )
    })
}
