//! Input that cannot name a lock, a lease or a TTL: the one error the types' parsers give.

/// Input that cannot name a lock, lease or TTL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    #[error("invalid lock name: {0}")]
    LockName(String),
    #[error("ttl_ms must be between {min_ms} and {max_ms}, got {ttl_ms}")]
    Ttl {
        ttl_ms: u64,
        min_ms: u64,
        max_ms: u64,
    },
    #[error("lock_delay_ms may be at most {max_ms} (--max-lock-delay-ms), got {delay_ms}")]
    LockDelay { delay_ms: u64, max_ms: u64 },
    #[error("invalid holder label: {0}")]
    Holder(String),
    #[error("invalid metadata: {0}")]
    Metadata(String),
    #[error("a lease token looks like lht_ followed by 43 base64url characters")]
    TokenShape,
    #[error("an Idempotency-Key has 1 to 255 printable ASCII characters")]
    IdempotencyKey,
    #[error("invalid locks: {0}")]
    Members(String),
}
