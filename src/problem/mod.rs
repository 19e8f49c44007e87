//! RFC 9457 problem details: every failure of the API answers `application/problem+json` with
//! `type`, `title`, `status`, `detail` and a stable machine `code`. One table of problems
//! ([`ProblemKind`]) serves both transports: the API renders a [`Problem`] as JSON, the
//! dashboard as an HTML page. What each domain error means to a caller is in `from_domain.rs`.

mod from_domain;

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

/// Declares [`ProblemKind`] from one table: each problem once, with its code, status and title.
macro_rules! problems {
    ($($kind:ident => ($code:literal, $status:ident, $title:literal),)+) => {
        /// Every problem the API (or the dashboard: `sign_in_required`, `invalid_form`) can answer
        /// with: its code, status and title.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProblemKind {
            $($kind,)+
        }

        impl ProblemKind {
            pub const ALL: &[Self] = &[$(Self::$kind,)+];

            fn describe(self) -> (&'static str, StatusCode, &'static str) {
                match self {
                    $(Self::$kind => ($code, StatusCode::$status, $title),)+
                }
            }
        }
    };
}

problems! {
    LockHeld => ("lock_held", CONFLICT, "The lock is held by another lease"),
    LockDelay => ("lock_delay", CONFLICT, "The lock is in its lock-delay"),
    KindConflict => ("kind_conflict", CONFLICT, "The lock is in use as another kind"),
    NotReentrant => ("not_reentrant", CONFLICT, "The lock is not reentrant"),
    UpgradeRefused => ("upgrade_refused", CONFLICT, "A read hold cannot be upgraded to a write hold"),
    LimitMismatch => ("limit_mismatch", CONFLICT, "The semaphore has another limit"),
    ModeNotHeld => ("mode_not_held", CONFLICT, "The lease holds no lock in that mode"),
    TicketPending => ("ticket_pending", CONFLICT, "The token is a queued ticket's"),
    TicketExpired => ("ticket_expired", GONE, "The ticket expired"),
    NoPermits => ("no_permits", CONFLICT, "Not enough permits are free"),
    LeaseLost => ("lease_lost", GONE, "The lease no longer holds the lock"),
    LeaseNotFound => ("lease_not_found", NOT_FOUND, "No such lease on this lock"),
    LockNotFound => ("lock_not_found", NOT_FOUND, "The lock is free and unknown"),
    TokenMissing => ("token_missing", UNAUTHORIZED, "A lease token is required"),
    TokenMalformed => ("token_malformed", UNAUTHORIZED, "The bearer token is not a lease token"),
    TokenMismatch => ("token_mismatch", FORBIDDEN, "The token does not prove this lease"),
    AdminTokenRequired => ("admin_token_required", UNAUTHORIZED, "The admin token is required"),
    AdminTokenInvalid => ("admin_token_invalid", FORBIDDEN, "The admin token is not valid"),
    AdminDisabled => ("admin_disabled", FORBIDDEN, "No admin token is configured"),
    InvalidLockName => ("invalid_lock_name", UNPROCESSABLE_ENTITY, "Invalid lock name"),
    InvalidTtl => ("invalid_ttl", UNPROCESSABLE_ENTITY, "TTL out of range"),
    InvalidLockDelay => ("invalid_lock_delay", UNPROCESSABLE_ENTITY, "Lock-delay out of range"),
    InvalidBody => ("invalid_body", UNPROCESSABLE_ENTITY, "The request body is not valid"),
    MalformedJson => ("malformed_json", BAD_REQUEST, "The body is not JSON"),
    UnsupportedMediaType => ("unsupported_media_type", UNSUPPORTED_MEDIA_TYPE, "The body must be application/json"),
    PayloadTooLarge => ("payload_too_large", PAYLOAD_TOO_LARGE, "The request body is too large"),
    InvalidQuery => ("invalid_query", BAD_REQUEST, "The query string is not valid"),
    InvalidIdempotencyKey => ("invalid_idempotency_key", BAD_REQUEST, "The Idempotency-Key header is not valid"),
    IdempotencyKeyReused => ("idempotency_key_reused", UNPROCESSABLE_ENTITY, "The Idempotency-Key was used for another request"),
    NotFound => ("not_found", NOT_FOUND, "No such resource"),
    MethodNotAllowed => ("method_not_allowed", METHOD_NOT_ALLOWED, "Method not allowed here"),
    RedisUnavailable => ("redis_unavailable", SERVICE_UNAVAILABLE, "Redis is unavailable"),
    RedisFull => ("redis_full", SERVICE_UNAVAILABLE, "Redis is full"),
    NotReplicated => ("not_replicated", SERVICE_UNAVAILABLE, "Not acknowledged by enough Redis replicas"),
    ShuttingDown => ("shutting_down", SERVICE_UNAVAILABLE, "The service is shutting down"),
    TooManyWatches => ("too_many_watches", SERVICE_UNAVAILABLE, "This instance watches as many leases as it may"),
    Internal => ("internal", INTERNAL_SERVER_ERROR, "Internal error"),
    ApiKeyRequired => ("api_key_required", UNAUTHORIZED, "An API key is required"),
    ApiKeyInvalid => ("api_key_invalid", UNAUTHORIZED, "The API key is not valid"),
    RoleMissing => ("role_missing", FORBIDDEN, "The API key lacks the role this route needs"),
    NameNotAllowed => ("name_not_allowed", FORBIDDEN, "The API key may not use this name"),
    TenantNotAllowed => ("tenant_not_allowed", FORBIDDEN, "The API key may not act for that tenant"),
    CrossOrigin => ("cross_origin", FORBIDDEN, "Requests from other sites are refused"),
    HostNotAllowed => ("host_not_allowed", FORBIDDEN, "The Host header names no allowed host"),
    KeyNotFound => ("key_not_found", NOT_FOUND, "No such API key"),
    KeyNameTaken => ("key_name_taken", CONFLICT, "An API key of that name exists"),
    TooManyKeys => ("too_many_keys", CONFLICT, "The tenant has as many API keys as it may"),
    QuotaAboveCeiling => ("quota_above_ceiling", FORBIDDEN, "The quotas exceed what this admin may grant"),
    ReentryTooDeep => ("reentry_too_deep", CONFLICT, "The lease is re-entered too deep"),
    ReasonTooLong => ("reason_too_long", UNPROCESSABLE_ENTITY, "The reason is too long"),
    BodyTimeout => ("body_timeout", REQUEST_TIMEOUT, "The request body came too slowly"),
    RateLimited => ("rate_limited", TOO_MANY_REQUESTS, "Too many requests"),
    QuotaExceeded => ("quota_exceeded", TOO_MANY_REQUESTS, "A quota of this key or address is used up"),
    TooManyWaiters => ("too_many_waiters", SERVICE_UNAVAILABLE, "Too many requests wait for this lock"),
    QueueFull => ("queue_full", SERVICE_UNAVAILABLE, "The fair queue is full"),
    TooManyConnections => ("too_many_connections", SERVICE_UNAVAILABLE, "The server has too many connections"),
    SignInRequired => ("sign_in_required", UNAUTHORIZED, "Sign-in required"),
    InvalidForm => ("invalid_form", BAD_REQUEST, "The form is not complete"),
    RequestTimeout => ("request_timeout", GATEWAY_TIMEOUT, "The request took too long"),
    // RedLock (`crate::leases::redlock`).
    NoQuorum => ("no_quorum", SERVICE_UNAVAILABLE, "Too few RedLock nodes acknowledged it"),
    RedlockDisabled => ("redlock_disabled", UNPROCESSABLE_ENTITY, "RedLock is not enabled on this server"),
}

impl ProblemKind {
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
        Self::ALL.iter().copied().find(|k| k.code() == code)
    }

    /// Whether the API can answer with it: all but the dashboard's own (sign-in, forms),
    /// which only its HTML pages show. The OpenAPI document lists these codes, and the
    /// official clients' parity tests hold their error types to that list.
    pub fn answered_by_api(self) -> bool {
        !matches!(self, Self::SignInRequired | Self::InvalidForm)
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

    /// `Retry-After`'s value when one is set: whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u128> {
        self.retry_after
            .map(|after| after.as_millis().div_ceil(1000).max(1))
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
        if let Some(secs) = self.retry_after_secs()
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            headers.insert(header::RETRY_AFTER, v);
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
    /// `lock_held`: when the holding lease was granted (absent for a Redisson client).
    held_since: Option<String>,
    /// `lock_held`: how long the holding lease has held, in ms.
    held_for_ms: Option<u64>,
    /// `lock_held`: how long until the holder lets go, in ms, estimated from the name's
    /// recent hold times (absent with fewer than 3 to go by); someone else waiting may
    /// still get the lock first.
    estimated_wait_ms: Option<u64>,
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
