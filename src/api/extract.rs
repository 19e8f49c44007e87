//! Extractors: bad input answers problem+json instead of axum's plain-text rejections, and the
//! path segments and credentials every lease route takes are parsed in one place.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::auth;
use crate::locks::{IdempotencyKey, LeaseId, LeaseToken, LockName};
use crate::problem::{Problem, ProblemKind};

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
            other if timed_out(&other) => Problem::new(
                ProblemKind::BodyTimeout,
                "the request body did not arrive in time (--body-timeout-ms)",
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

/// Whether reading the body failed because its deadline passed.
fn timed_out(rejection: &BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The `Authorization: Bearer <token>` header, if any. Another scheme is a 401.
#[derive(Debug)]
pub struct Bearer(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        auth::bearer(&parts.headers).map(Self)
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

/// The `{name}` of a lock or semaphore route.
#[derive(Debug)]
pub struct NamePath(pub LockName);

impl<S: Send + Sync> FromRequestParts<S> for NamePath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw): Path<String> = Path::from_request_parts(parts, state).await?;
        Ok(Self(LockName::parse(&raw)?))
    }
}

/// The `{name}` and `{lease_id}` (or `{ticket_id}`) of a lease route; what is not a lease id
/// names no lease (404).
#[derive(Debug)]
pub struct LeasePath {
    pub name: LockName,
    pub id: LeaseId,
}

impl<S: Send + Sync> FromRequestParts<S> for LeasePath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path((name, id)): Path<(String, String)> =
            Path::from_request_parts(parts, state).await?;
        let name = LockName::parse(&name)?;
        let id = LeaseId::parse(&id).ok_or_else(|| {
            Problem::new(
                ProblemKind::LeaseNotFound,
                format!("{id:?} is not a lease id"),
            )
        })?;
        Ok(Self { name, id })
    }
}

/// A lease route called by the lease's holder: the path and the lease token it must send as
/// `Authorization: Bearer`.
#[derive(Debug)]
pub struct HeldLease {
    pub name: LockName,
    pub id: LeaseId,
    pub token: LeaseToken,
}

impl<S: Send + Sync> FromRequestParts<S> for HeldLease {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let LeasePath { name, id } = LeasePath::from_request_parts(parts, state).await?;
        let token = Bearer::from_request_parts(parts, state)
            .await?
            .lease_token()?
            .ok_or_else(|| {
                Problem::new(
                    ProblemKind::TokenMissing,
                    "send the lease token as Authorization: Bearer <token>",
                )
            })?;
        Ok(Self { name, id, token })
    }
}
