//! The Redis key layout. Every key of one lock shares its hash tag, so each script touches a
//! single Redis Cluster slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P + name` | hash | Redisson RLock: field `<lease-id>:1` = reentry count, PEXPIRE = TTL |
//! | `redisson_lock__channel:{P + name}` | channel | Redisson's unlock message `0` |
//! | `{P + name}:leasehold` | hash | `fence` (fencing counter, never reset), `lease` (last lease) |
//! | `{P + name}:leasehold:lease:<id>` | hash | lease record: holder, metadata, token digest, state |
//! | `{P + name}:leasehold:token:<sha256>` | string | lease id, for reentry by token |
//! | `P + leasehold:events` | channel | JSON events for the dashboard |
//!
//! `P` is the configured key prefix (empty by default, like Redisson). Names and prefixes
//! never contain braces, so `{P + name}` hashes exactly as `P + name` does.

use super::model::{LeaseId, LockName, TokenDigest};

/// Redisson's channel name prefix for RLock unlock messages.
const UNLOCK_CHANNEL_PREFIX: &str = "redisson_lock__channel:";

/// Builds key names under one optional prefix.
#[derive(Debug, Clone, Default)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// `prefix` must not contain braces (checked by the configuration).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn lock(&self, name: &LockName) -> LockKeys {
        LockKeys {
            key: format!("{}{}", self.prefix, name.as_str()),
        }
    }

    pub fn events_channel(&self) -> String {
        format!("{}leasehold:events", self.prefix)
    }

    /// The pattern matching every unlock channel of this prefix.
    pub fn unlock_channel_pattern(&self) -> String {
        format!("{UNLOCK_CHANNEL_PREFIX}{{{}*", self.prefix)
    }

    /// The lock key an unlock channel speaks for, if it is one.
    pub fn lock_key_of_unlock_channel<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel
            .strip_prefix(UNLOCK_CHANNEL_PREFIX)?
            .strip_prefix('{')?
            .strip_suffix('}')
    }
}

/// The keys of one lock.
#[derive(Debug, Clone)]
pub struct LockKeys {
    key: String,
}

impl LockKeys {
    /// The Redisson lock hash, and the name waiters are registered under.
    pub fn lock(&self) -> &str {
        &self.key
    }

    pub fn unlock_channel(&self) -> String {
        format!("{UNLOCK_CHANNEL_PREFIX}{{{}}}", self.key)
    }

    pub fn state(&self) -> String {
        format!("{{{}}}:leasehold", self.key)
    }

    pub fn lease_prefix(&self) -> String {
        format!("{{{}}}:leasehold:lease:", self.key)
    }

    pub fn lease(&self, id: LeaseId) -> String {
        format!("{}{id}", self.lease_prefix())
    }

    pub fn token_prefix(&self) -> String {
        format!("{{{}}}:leasehold:token:", self.key)
    }

    pub fn token(&self, digest: &TokenDigest) -> String {
        format!("{}{}", self.token_prefix(), digest.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_lock_hash_tag_and_follow_redisson() {
        let space = KeySpace::new("app:");
        let name = LockName::parse("jobs").expect("valid name");
        let keys = space.lock(&name);
        assert_eq!(keys.lock(), "app:jobs");
        assert_eq!(keys.unlock_channel(), "redisson_lock__channel:{app:jobs}");
        assert_eq!(keys.state(), "{app:jobs}:leasehold");
        assert_eq!(
            space.lock_key_of_unlock_channel(&keys.unlock_channel()),
            Some("app:jobs")
        );
        assert_eq!(
            space.unlock_channel_pattern(),
            "redisson_lock__channel:{app:*"
        );
    }
}
