//! RFC 9457 problem details: every failure of the API answers `application/problem+json` with
//! `type`, `title`, `status`, `detail` and a stable machine `code`. One table of problems
//! ([`ProblemKind`]) serves both transports: the API renders a [`Problem`] as JSON, the
//! dashboard as an HTML page.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::locks::{HeldAs, InvalidInput, LeaseState, LockError};

/// Every problem the API can answer with: its code, status and title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    LockHeld,
    KindConflict,
    NotReentrant,
    UpgradeRefused,
    LimitMismatch,
    ModeNotHeld,
    TicketPending,
    TicketExpired,
    NoPermits,
    LeaseLost,
    LeaseNotFound,
    LockNotFound,
    TokenMissing,
    TokenMalformed,
    TokenMismatch,
    AdminTokenRequired,
    AdminTokenInvalid,
    AdminDisabled,
    InvalidLockName,
    InvalidTtl,
    InvalidBody,
    MalformedJson,
    UnsupportedMediaType,
    PayloadTooLarge,
    InvalidQuery,
    InvalidIdempotencyKey,
    IdempotencyKeyReused,
    NotFound,
    MethodNotAllowed,
    RedisUnavailable,
    RedisFull,
    ShuttingDown,
    TooManyWatches,
    Internal,
    ApiKeyRequired,
    ApiKeyInvalid,
    RoleMissing,
    NameNotAllowed,
    TenantNotAllowed,
    CrossOrigin,
    HostNotAllowed,
    KeyNotFound,
    KeyNameTaken,
    ReentryTooDeep,
    ReasonTooLong,
    BodyTimeout,
    RateLimited,
    QuotaExceeded,
    TooManyWaiters,
    QueueFull,
    TooManyConnections,
    RequestTimeout,
}

impl ProblemKind {
    pub const ALL: [Self; 52] = [
        Self::LockHeld,
        Self::KindConflict,
        Self::NotReentrant,
        Self::UpgradeRefused,
        Self::LimitMismatch,
        Self::ModeNotHeld,
        Self::TicketPending,
        Self::TicketExpired,
        Self::NoPermits,
        Self::LeaseLost,
        Self::LeaseNotFound,
        Self::LockNotFound,
        Self::TokenMissing,
        Self::TokenMalformed,
        Self::TokenMismatch,
        Self::AdminTokenRequired,
        Self::AdminTokenInvalid,
        Self::AdminDisabled,
        Self::InvalidLockName,
        Self::InvalidTtl,
        Self::InvalidBody,
        Self::MalformedJson,
        Self::UnsupportedMediaType,
        Self::PayloadTooLarge,
        Self::InvalidQuery,
        Self::InvalidIdempotencyKey,
        Self::IdempotencyKeyReused,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::RedisUnavailable,
        Self::RedisFull,
        Self::ShuttingDown,
        Self::TooManyWatches,
        Self::Internal,
        Self::ApiKeyRequired,
        Self::ApiKeyInvalid,
        Self::RoleMissing,
        Self::NameNotAllowed,
        Self::TenantNotAllowed,
        Self::CrossOrigin,
        Self::HostNotAllowed,
        Self::KeyNotFound,
        Self::KeyNameTaken,
        Self::ReentryTooDeep,
        Self::ReasonTooLong,
        Self::BodyTimeout,
        Self::RateLimited,
        Self::QuotaExceeded,
        Self::TooManyWaiters,
        Self::QueueFull,
        Self::TooManyConnections,
        Self::RequestTimeout,
    ];

    pub fn code(self) -> &'static str {
        self.describe().0
    }

    pub fn status(self) -> StatusCode {
        self.describe().1
    }

    pub fn title(self) -> &'static str {
        self.describe().2
    }

    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == code)
    }

    fn describe(self) -> (&'static str, StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            Self::LockHeld => (
                "lock_held",
                S::CONFLICT,
                "The lock is held by another lease",
            ),
            Self::KindConflict => (
                "kind_conflict",
                S::CONFLICT,
                "The lock is in use as another kind",
            ),
            Self::NotReentrant => ("not_reentrant", S::CONFLICT, "The lock is not reentrant"),
            Self::UpgradeRefused => (
                "upgrade_refused",
                S::CONFLICT,
                "A read hold cannot be upgraded to a write hold",
            ),
            Self::LimitMismatch => (
                "limit_mismatch",
                S::CONFLICT,
                "The semaphore has another limit",
            ),
            Self::ModeNotHeld => (
                "mode_not_held",
                S::CONFLICT,
                "The lease holds no lock in that mode",
            ),
            Self::TicketPending => (
                "ticket_pending",
                S::CONFLICT,
                "The token is a queued ticket's",
            ),
            Self::TicketExpired => ("ticket_expired", S::GONE, "The ticket expired"),
            Self::NoPermits => ("no_permits", S::CONFLICT, "Not enough permits are free"),
            Self::LeaseLost => ("lease_lost", S::GONE, "The lease no longer holds the lock"),
            Self::LeaseNotFound => (
                "lease_not_found",
                S::NOT_FOUND,
                "No such lease on this lock",
            ),
            Self::LockNotFound => (
                "lock_not_found",
                S::NOT_FOUND,
                "The lock is free and unknown",
            ),
            Self::TokenMissing => (
                "token_missing",
                S::UNAUTHORIZED,
                "A lease token is required",
            ),
            Self::TokenMalformed => (
                "token_malformed",
                S::UNAUTHORIZED,
                "The bearer token is not a lease token",
            ),
            Self::TokenMismatch => (
                "token_mismatch",
                S::FORBIDDEN,
                "The token does not prove this lease",
            ),
            Self::AdminTokenRequired => (
                "admin_token_required",
                S::UNAUTHORIZED,
                "The admin token is required",
            ),
            Self::AdminTokenInvalid => (
                "admin_token_invalid",
                S::FORBIDDEN,
                "The admin token is not valid",
            ),
            Self::AdminDisabled => (
                "admin_disabled",
                S::FORBIDDEN,
                "No admin token is configured",
            ),
            Self::InvalidLockName => (
                "invalid_lock_name",
                S::UNPROCESSABLE_ENTITY,
                "Invalid lock name",
            ),
            Self::InvalidTtl => ("invalid_ttl", S::UNPROCESSABLE_ENTITY, "TTL out of range"),
            Self::InvalidBody => (
                "invalid_body",
                S::UNPROCESSABLE_ENTITY,
                "The request body is not valid",
            ),
            Self::MalformedJson => ("malformed_json", S::BAD_REQUEST, "The body is not JSON"),
            Self::UnsupportedMediaType => (
                "unsupported_media_type",
                S::UNSUPPORTED_MEDIA_TYPE,
                "The body must be application/json",
            ),
            Self::PayloadTooLarge => (
                "payload_too_large",
                S::PAYLOAD_TOO_LARGE,
                "The request body is too large",
            ),
            Self::InvalidQuery => (
                "invalid_query",
                S::BAD_REQUEST,
                "The query string is not valid",
            ),
            Self::InvalidIdempotencyKey => (
                "invalid_idempotency_key",
                S::BAD_REQUEST,
                "The Idempotency-Key header is not valid",
            ),
            Self::IdempotencyKeyReused => (
                "idempotency_key_reused",
                S::UNPROCESSABLE_ENTITY,
                "The Idempotency-Key was used for another request",
            ),
            Self::NotFound => ("not_found", S::NOT_FOUND, "No such resource"),
            Self::MethodNotAllowed => (
                "method_not_allowed",
                S::METHOD_NOT_ALLOWED,
                "Method not allowed here",
            ),
            Self::RedisUnavailable => (
                "redis_unavailable",
                S::SERVICE_UNAVAILABLE,
                "Redis is unavailable",
            ),
            Self::RedisFull => ("redis_full", S::SERVICE_UNAVAILABLE, "Redis is full"),
            Self::ShuttingDown => (
                "shutting_down",
                S::SERVICE_UNAVAILABLE,
                "The service is shutting down",
            ),
            Self::TooManyWatches => (
                "too_many_watches",
                S::SERVICE_UNAVAILABLE,
                "This instance watches as many leases as it may",
            ),
            Self::Internal => ("internal", S::INTERNAL_SERVER_ERROR, "Internal error"),
            Self::ApiKeyRequired => (
                "api_key_required",
                S::UNAUTHORIZED,
                "An API key is required",
            ),
            Self::ApiKeyInvalid => (
                "api_key_invalid",
                S::UNAUTHORIZED,
                "The API key is not valid",
            ),
            Self::RoleMissing => (
                "role_missing",
                S::FORBIDDEN,
                "The API key lacks the role this route needs",
            ),
            Self::NameNotAllowed => (
                "name_not_allowed",
                S::FORBIDDEN,
                "The API key may not use this name",
            ),
            Self::TenantNotAllowed => (
                "tenant_not_allowed",
                S::FORBIDDEN,
                "The API key may not act for that tenant",
            ),
            Self::CrossOrigin => (
                "cross_origin",
                S::FORBIDDEN,
                "Requests from other sites are refused",
            ),
            Self::HostNotAllowed => (
                "host_not_allowed",
                S::FORBIDDEN,
                "The Host header names no allowed host",
            ),
            Self::KeyNotFound => ("key_not_found", S::NOT_FOUND, "No such API key"),
            Self::KeyNameTaken => (
                "key_name_taken",
                S::CONFLICT,
                "An API key of that name exists",
            ),
            Self::ReentryTooDeep => (
                "reentry_too_deep",
                S::CONFLICT,
                "The lease is re-entered too deep",
            ),
            Self::ReasonTooLong => (
                "reason_too_long",
                S::UNPROCESSABLE_ENTITY,
                "The reason is too long",
            ),
            Self::BodyTimeout => (
                "body_timeout",
                S::REQUEST_TIMEOUT,
                "The request body came too slowly",
            ),
            Self::RateLimited => ("rate_limited", S::TOO_MANY_REQUESTS, "Too many requests"),
            Self::QuotaExceeded => (
                "quota_exceeded",
                S::TOO_MANY_REQUESTS,
                "A quota of this key or address is used up",
            ),
            Self::TooManyWaiters => (
                "too_many_waiters",
                S::SERVICE_UNAVAILABLE,
                "Too many requests wait for this lock",
            ),
            Self::QueueFull => (
                "queue_full",
                S::SERVICE_UNAVAILABLE,
                "The fair queue is full",
            ),
            Self::TooManyConnections => (
                "too_many_connections",
                S::SERVICE_UNAVAILABLE,
                "The server has too many connections",
            ),
            Self::RequestTimeout => (
                "request_timeout",
                S::GATEWAY_TIMEOUT,
                "The request took too long",
            ),
        }
    }
}

/// One problem response.
#[derive(Debug)]
pub struct Problem {
    kind: ProblemKind,
    detail: String,
    extra: Map<String, Value>,
    retry_after: Option<Duration>,
    www_authenticate: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            extra: Map::new(),
            retry_after: None,
            headers: Vec::new(),
            www_authenticate: matches!(
                kind,
                ProblemKind::TokenMissing
                    | ProblemKind::TokenMalformed
                    | ProblemKind::AdminTokenRequired
                    | ProblemKind::ApiKeyRequired
                    | ProblemKind::ApiKeyInvalid
            ),
        }
    }

    pub fn kind(&self) -> ProblemKind {
        self.kind
    }

    /// What went wrong, for people.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The same problem with another `detail` (a caller that knows more of the situation).
    pub fn reworded(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Adds a member beside the standard ones (RFC 9457 extension members).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a response header (a value that is not a valid header value is left out).
    pub fn header(mut self, name: &'static str, value: impl ToString) -> Self {
        if let Ok(value) = HeaderValue::from_str(&value.to_string()) {
            self.headers.push((HeaderName::from_static(name), value));
        }
        self
    }

    /// Sets `Retry-After` (whole seconds, rounded up) and `retry_after_ms`.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        self.with("retry_after_ms", ms)
    }
}

#[derive(Serialize)]
struct Body<'a> {
    r#type: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    code: &'a str,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.kind.status();
        let body = Body {
            r#type: format!("/problems/{}", self.kind.code()),
            title: self.kind.title(),
            status: status.as_u16(),
            detail: &self.detail,
            code: self.kind.code(),
            extra: &self.extra,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (status, json).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(after) = self.retry_after {
            let secs = after.as_millis().div_ceil(1000).max(1);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                headers.insert(header::RETRY_AFTER, v);
            }
        }
        if self.www_authenticate {
            // The API key travels in its own header (no registered scheme names it).
            let scheme = match self.kind {
                ProblemKind::ApiKeyRequired | ProblemKind::ApiKeyInvalid => "Leasehold-Key",
                _ => "Bearer",
            };
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(scheme));
        }
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}

impl From<InvalidInput> for Problem {
    fn from(e: InvalidInput) -> Self {
        let kind = match e {
            InvalidInput::LockName(_) => ProblemKind::InvalidLockName,
            InvalidInput::Ttl { .. } => ProblemKind::InvalidTtl,
            InvalidInput::Holder(_) | InvalidInput::Metadata(_) => ProblemKind::InvalidBody,
            InvalidInput::TokenShape => ProblemKind::TokenMalformed,
            InvalidInput::IdempotencyKey => ProblemKind::InvalidIdempotencyKey,
        };
        Problem::new(kind, e.to_string())
    }
}

impl From<LockError> for Problem {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Held(c) => {
                let who = match (&c.holder, &c.lease_id, &c.holder_id) {
                    (Some(label), _, _) => format!("held by \"{label}\""),
                    (None, Some(id), _) => format!("held by lease {id}"),
                    (None, None, Some(field)) => format!("held by a Redisson client ({field})"),
                    (None, None, None) => "held".to_owned(),
                };
                let mut p = Problem::new(ProblemKind::LockHeld, format!("the lock is {who}"))
                    .with("holder", c.holder.clone())
                    .with("lease_id", c.lease_id.map(|id| id.to_string()))
                    .with("holder_id", c.holder_id.clone());
                if let Some(after) = c.retry_after {
                    p = p.retry_after(after);
                }
                p
            }
            LockError::KindConflict { held_as } => {
                let detail = if held_as == HeldAs::Foreign {
                    "the name belongs to a Redis key another program made; Leasehold leaves it \
                     alone: use another name (or another --key-prefix)"
                        .to_owned()
                } else {
                    format!(
                        "the lock is in use as a {} lock; ask for that kind or another name",
                        held_as.as_str()
                    )
                };
                Problem::new(ProblemKind::KindConflict, detail).with("held_as", held_as.as_str())
            }
            LockError::NotReentrant => Problem::new(
                ProblemKind::NotReentrant,
                "this exclusive lock is not reentrant and your lease already holds it",
            ),
            LockError::UpgradeRefused => Problem::new(
                ProblemKind::UpgradeRefused,
                "upgrades are not supported: your lease holds a read lock, so a write lock would \
                 wait for itself; release the read hold and acquire the write lock",
            ),
            LockError::LimitMismatch { limit } => Problem::new(
                ProblemKind::LimitMismatch,
                format!("the semaphore's limit is {limit}; every party must name the same"),
            )
            .with("limit", limit),
            LockError::ModeNotHeld(mode) => Problem::new(
                ProblemKind::ModeNotHeld,
                format!("the lease holds no {mode} lock"),
            )
            .with("mode", mode),
            LockError::TicketPending => Problem::new(
                ProblemKind::TicketPending,
                "the token belongs to a ticket still queued: poll the ticket",
            ),
            LockError::TicketExpired => Problem::new(
                ProblemKind::TicketExpired,
                "the ticket was not polled in time and lost its place; acquire again",
            ),
            LockError::LeaseLost(state) => {
                let why = match state {
                    LeaseState::Released => "it was released",
                    LeaseState::ForceReleased => "an admin force-released the lock",
                    LeaseState::Left => "its waiter left the queue",
                    LeaseState::Expired | LeaseState::Held | LeaseState::Queued => {
                        "its TTL ran out"
                    }
                };
                Problem::new(
                    ProblemKind::LeaseLost,
                    format!("the lease no longer holds the lock: {why}; acquire a new lease"),
                )
                .with("reason", state.as_str())
            }
            LockError::UnknownLease => Problem::new(
                ProblemKind::LeaseNotFound,
                "no lease with this id on this lock (or it ended long ago)",
            ),
            LockError::TokenMismatch => Problem::new(
                ProblemKind::TokenMismatch,
                "the bearer token does not belong to this lease",
            ),
            LockError::UnknownToken => Problem::new(
                ProblemKind::TokenMismatch,
                "the bearer token belongs to no lease on this lock; omit it to ask for a new lease",
            ),
            LockError::Unavailable(source) => {
                tracing::warn!(error = %source, "Redis call failed");
                Problem::new(
                    ProblemKind::RedisUnavailable,
                    "Redis did not answer; try again",
                )
                .retry_after(Duration::from_secs(1))
            }
            // Redis refuses functions that may grow its memory once it is at its maxmemory
            // (noeviction): nothing ran, and room may come back as leases end. What frees or
            // keeps a lease (release, heartbeat, inspection) runs anyway (`allow-oom`).
            LockError::Script(source) if source.code() == Some("OOM") => {
                tracing::warn!(error = %source, "Redis is out of memory");
                Problem::new(
                    ProblemKind::RedisFull,
                    "Redis is full (its maxmemory is reached), so nothing was changed; releases \
                     and heartbeats still work: try again later",
                )
                .retry_after(Duration::from_secs(5))
            }
            LockError::Script(source) => {
                tracing::error!(error = %source, "a Redis script failed");
                Problem::new(ProblemKind::Internal, "internal error")
            }
            LockError::TooLate => Problem::new(
                ProblemKind::RedisUnavailable,
                "Redis answered too late, so nothing was changed; try again",
            )
            .retry_after(Duration::from_secs(1)),
            LockError::Busy => Problem::new(
                ProblemKind::RedisUnavailable,
                "Redis is too busy to take this request in time, so nothing was changed; try again",
            )
            .retry_after(Duration::from_secs(1)),
            LockError::ShuttingDown => Problem::new(
                ProblemKind::ShuttingDown,
                "this instance is shutting down; retry on another",
            )
            .retry_after(Duration::from_secs(1)),
            LockError::IdempotencyMismatch => Problem::new(
                ProblemKind::IdempotencyKeyReused,
                "this Idempotency-Key came with another request first; use a new key for a new \
                 request",
            ),
            LockError::NoSuchSemaphore => Problem::new(
                ProblemKind::LockNotFound,
                "no semaphore of that name is in use",
            ),
            LockError::NotRolledBack => {
                tracing::error!("a rollback refusal reached the API");
                Problem::new(ProblemKind::Internal, "internal error")
            }
            LockError::BadReply(what) => {
                tracing::error!(reply = %what, "unexpected script reply");
                Problem::new(ProblemKind::Internal, "internal error")
            }
        }
    }
}

/// The `application/problem+json` body of every error, as the OpenAPI document shows it
/// ([`Problem`] builds the real one). Extension members appear only with the codes named.
#[derive(Debug, utoipa::ToSchema)]
#[schema(as = Problem)]
#[allow(dead_code)] // Only describes the body for the OpenAPI document.
pub struct ProblemDetails {
    /// `/problems/<code>`, which serves a short description.
    r#type: String,
    title: String,
    /// The HTTP status, repeated.
    status: u16,
    /// What went wrong in this request, for people.
    detail: String,
    /// Stable machine code (`lock_held`, `lease_lost`, ...).
    code: String,
    /// `lock_held`, `no_permits` and 503s: ms until a retry may succeed (also `Retry-After`).
    retry_after_ms: Option<u64>,
    /// `lock_held`: the holder's label.
    holder: Option<String>,
    /// `lock_held`: the holding lease (null for a Redisson client).
    lease_id: Option<String>,
    /// `lock_held`: the Redis hash field of the holder.
    holder_id: Option<String>,
    /// `kind_conflict`: what the lock is used as.
    held_as: Option<String>,
    /// `limit_mismatch`: the semaphore's limit.
    limit: Option<u32>,
    /// `mode_not_held`: the mode asked for.
    mode: Option<String>,
    /// `lease_lost`: expired, released, force_released or left.
    reason: Option<String>,
    /// Acquire answers (`lock_held`, `no_permits`, ...): the server-side wait this request was
    /// allowed, in ms (`wait_ms` cut to `--max-wait-ms`; also the `Leasehold-Wait-Ms` header).
    wait_ms: Option<u64>,
}
