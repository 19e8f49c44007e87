//! Every problem `code` the server can answer, as a type: [`ProblemCode`]. The list is the
//! server's own (its problem table, published as the `Problem` schema's `code` enum in
//! `/openapi.json`); a test of the server's suite holds this one to it, as the other official
//! clients' parity tests hold theirs (`clients/PROTOCOL.md`).

use std::fmt;

/// Declares [`ProblemCode`] from one table: each code once, with its variant.
macro_rules! codes {
    ($($variant:ident => $code:literal,)+) => {
        /// A problem's stable machine code. A newer server may answer a code this client does
        /// not know yet: [`crate::Problem::kind`] is `None` then, and `Problem::code` still
        /// has it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ProblemCode {
            $($variant,)+
        }

        impl ProblemCode {
            /// Every code, in the server's table order.
            pub const ALL: &[Self] = &[$(Self::$variant,)+];

            /// The code as the wire writes it (`lock_held`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)+
                }
            }
        }
    };
}

codes! {
    // Refusals of a lock's or semaphore's state (409, 410).
    LockHeld => "lock_held",
    LockDelay => "lock_delay",
    KindConflict => "kind_conflict",
    NotReentrant => "not_reentrant",
    UpgradeRefused => "upgrade_refused",
    LimitMismatch => "limit_mismatch",
    ModeNotHeld => "mode_not_held",
    TicketPending => "ticket_pending",
    TicketExpired => "ticket_expired",
    NoPermits => "no_permits",
    LeaseLost => "lease_lost",
    // What is not there (404).
    LeaseNotFound => "lease_not_found",
    LockNotFound => "lock_not_found",
    // Lease tokens and the admin token (401, 403).
    TokenMissing => "token_missing",
    TokenMalformed => "token_malformed",
    TokenMismatch => "token_mismatch",
    AdminTokenRequired => "admin_token_required",
    AdminTokenInvalid => "admin_token_invalid",
    AdminDisabled => "admin_disabled",
    // The request itself (400, 405, 413, 415, 422).
    InvalidLockName => "invalid_lock_name",
    InvalidTtl => "invalid_ttl",
    InvalidLockDelay => "invalid_lock_delay",
    InvalidBody => "invalid_body",
    MalformedJson => "malformed_json",
    UnsupportedMediaType => "unsupported_media_type",
    PayloadTooLarge => "payload_too_large",
    InvalidQuery => "invalid_query",
    InvalidIdempotencyKey => "invalid_idempotency_key",
    IdempotencyKeyReused => "idempotency_key_reused",
    NotFound => "not_found",
    MethodNotAllowed => "method_not_allowed",
    // The server or its Redis cannot answer now (503, 500).
    RedisUnavailable => "redis_unavailable",
    RedisFull => "redis_full",
    NotReplicated => "not_replicated",
    ShuttingDown => "shutting_down",
    TooManyWatches => "too_many_watches",
    Internal => "internal",
    // API keys, tenants and browsers (401, 403, 404, 409).
    ApiKeyRequired => "api_key_required",
    ApiKeyInvalid => "api_key_invalid",
    RoleMissing => "role_missing",
    NameNotAllowed => "name_not_allowed",
    TenantNotAllowed => "tenant_not_allowed",
    CrossOrigin => "cross_origin",
    HostNotAllowed => "host_not_allowed",
    KeyNotFound => "key_not_found",
    KeyNameTaken => "key_name_taken",
    TooManyKeys => "too_many_keys",
    QuotaAboveCeiling => "quota_above_ceiling",
    ReentryTooDeep => "reentry_too_deep",
    ReasonTooLong => "reason_too_long",
    // Limits (408, 429, 503, 504).
    BodyTimeout => "body_timeout",
    RateLimited => "rate_limited",
    QuotaExceeded => "quota_exceeded",
    TooManyWaiters => "too_many_waiters",
    QueueFull => "queue_full",
    TooManyConnections => "too_many_connections",
    RequestTimeout => "request_timeout",
    // RedLock (503, 422).
    NoQuorum => "no_quorum",
    RedlockDisabled => "redlock_disabled",
}

impl ProblemCode {
    /// The code a wire string names, if this client knows it.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|known| known.as_str() == code)
    }

    /// Whether the same request may succeed later, unchanged: the server did nothing (503,
    /// 504) or the caller went over its request rate. The official clients retry these when
    /// the request is safe to send twice (`clients/PROTOCOL.md`).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RedisUnavailable
                | Self::RedisFull
                | Self::NotReplicated
                | Self::ShuttingDown
                | Self::TooManyWatches
                | Self::TooManyWaiters
                | Self::QueueFull
                | Self::TooManyConnections
                | Self::RequestTimeout
                | Self::NoQuorum
                | Self::RateLimited
        )
    }
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back_to_itself_once() {
        let mut seen = std::collections::HashSet::new();
        for code in ProblemCode::ALL {
            assert_eq!(ProblemCode::parse(code.as_str()), Some(*code));
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
        assert_eq!(ProblemCode::parse("no_such_code"), None);
    }
}
