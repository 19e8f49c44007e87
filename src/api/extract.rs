//! Extractors: bad input answers problem+json instead of axum's plain-text rejections, and the
//! path segments and credentials every lease route takes are parsed in one place. Rejection
//! texts from serde and axum are reworded ([`plain`]) before they reach a problem's `detail`:
//! a client sees the field and what it should be, never a Rust type name.

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
        let detail = match e {
            PathRejection::FailedToDeserializePathParams(_) => {
                "the path does not decode: a percent-encoded segment is not UTF-8"
            }
            _ => "the path does not name a resource",
        };
        Problem::new(ProblemKind::NotFound, detail)
    }
}

/// Query parameters; a wrong type (`wait_ms=soon`) becomes a 400 problem naming the field.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Problem))]
pub struct Query<T>(pub T);

impl From<QueryRejection> for Problem {
    fn from(e: QueryRejection) -> Self {
        let text = e.body_text();
        // axum's text is "Failed to deserialize query string: <field>: <serde's message>".
        let reason = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text);
        Problem::new(
            ProblemKind::InvalidQuery,
            format!("invalid query parameter {}", plain(reason)),
        )
    }
}

/// An optional JSON object as the body: empty means `T::default()`. Syntax errors are 400,
/// well-formed JSON of the wrong shape (not an object, unknown fields, wrong types) 422.
/// `curl -d` sends `application/x-www-form-urlencoded`, so that content type is read as JSON
/// too; when such a body is not JSON (real form data), the problem says to send JSON.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = Problem;

    // Boxed: the handler future axum allocates per request is as large as its largest step,
    // and a parked waiter keeps it whole; unboxed, reading the body would be that step.
    fn from_request(
        req: Request,
        state: &S,
    ) -> impl Future<Output = Result<Self, Self::Rejection>> + Send {
        Box::pin(async move {
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
                BytesRejection::FailedToBufferBody(_) if e.status().as_u16() == 413 => {
                    Problem::new(
                        ProblemKind::PayloadTooLarge,
                        "request bodies are limited to 64 KiB",
                    )
                }
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
            let form = content_type.as_deref() == Some("application/x-www-form-urlencoded");
            let syntax_error = |e: serde_json::Error| {
                let mut detail = format!("the body is not JSON: {}", plain(&e.to_string()));
                if form {
                    detail.push_str(
                        "; it came as application/x-www-form-urlencoded (curl -d's default), but \
                     Leasehold takes JSON: send an object like {\"ttl_ms\": 30000}, with \
                     content-type: application/json",
                    );
                }
                Problem::new(ProblemKind::MalformedJson, detail)
            };
            // A struct would also read from a JSON array (by position): only objects are bodies.
            let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'{') {
                return Err(
                    match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                        Ok(_) => Problem::new(
                            ProblemKind::InvalidBody,
                            "the body must be a JSON object ({...})",
                        ),
                        Err(e) => syntax_error(e),
                    },
                );
            }
            serde_json::from_slice(&bytes)
                .map(Self)
                .map_err(|e| match e.classify() {
                    serde_json::error::Category::Data => Problem::new(
                        ProblemKind::InvalidBody,
                        format!("invalid body: {}", plain(&e.to_string())),
                    ),
                    _ => syntax_error(e),
                })
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

/// serde's and Rust's rejection texts in the API's words: `expected u64` becomes "a whole
/// number", `struct AcquireBody` "a JSON object", and so on.
pub(super) fn plain(message: &str) -> String {
    const WORDS: [(&str, &str); 8] = [
        ("expected u64", "expected a whole number from 0 to 2^64-1"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected usize", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("invalid digit found in string", "not a whole number"),
        (
            "number too large to fit in target type",
            "too large a number",
        ),
    ];
    let mut text = message.to_owned();
    for (rust, ours) in WORDS {
        text = text.replace(rust, ours);
    }
    text = text.replace(
        "provided string was not `true` or `false`",
        "expected true or false",
    );
    // `struct Name` / `enum Name`: the Rust type behind a body or a field.
    for (word, ours) in [
        ("struct ", "a JSON object"),
        ("enum ", "one of the documented values"),
    ] {
        while let Some(at) = text.find(word) {
            let rest = &text[at + word.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            text.replace_range(at..at + word.len() + end, ours);
        }
    }
    text
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
                format!("{id} is not a lease id (lease ids are UUIDs)"),
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

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn rejection_texts_name_no_rust_types() {
        for (serde, ours) in [
            (
                "invalid type: string \"s\", expected struct AcquireBody at line 1 column 3",
                "invalid type: string \"s\", expected a JSON object at line 1 column 3",
            ),
            (
                "invalid value: integer `-1`, expected u32 at line 1 column 11",
                "invalid value: integer `-1`, expected a whole number from 0 to 4294967295 at line 1 column 11",
            ),
            (
                "wait_ms: invalid digit found in string",
                "wait_ms: not a whole number",
            ),
            (
                "all: provided string was not `true` or `false`",
                "all: expected true or false",
            ),
        ] {
            assert_eq!(plain(serde), ours);
        }
    }
}
