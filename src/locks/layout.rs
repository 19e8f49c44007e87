//! The Redis key layout. Every key of one lock (or semaphore) shares its hash tag, so each
//! script touches a single Redis Cluster slot. For a lock `L` = prefix + name:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `L` | hash | Redisson's lock hash: `<lease-id>:1` = reentry count (RLock, RFairLock; a Redisson client's field is `<uuid>:<thread>`, a port's `<uuid>:<id>`), or `mode` + read holders + `<lease-id>:1:write` (RReadWriteLock); PEXPIRE = TTL |
//! | `{L}:<lease-id>:1:rwlock_timeout:<n>` | string | Redisson's per-read-hold timeout keys |
//! | `redisson_lock_queue:{L}` | list | Redisson's RFairLock queue of waiting holder ids |
//! | `redisson_lock_timeout:{L}` | zset | fair waiters' deadlines (ms) |
//! | `redisson_lock__channel:{L}` | channel | Redisson's unlock message `0`; `..:{L}:<holder>` wakes one fair waiter |
//! | `redisson_rwlock:{L}` | channel | Redisson's read/write unlock message |
//! | `{L}:leasehold` | hash | `fence` (last fencing token); the record of the lease holding an exclusive lock (`lease`, `kind`, `rec`, `holder`, `meta`); `r:`/`h:`/`m:<id>` records of shared leases and queued tickets (`y:<id>`: a queued ticket's lock-delay); `limit` for semaphores; expires after its last lease (not for semaphores) |
//! | `{L}:leasehold:revoke` | hash | pending revocations: lease id -> JSON {reason, by, at_ms, deadline_ms} (`lua/revoke.lua`); expires the tombstone time after its latest deadline |
//! | `{L}:leasehold:waiting` | hash | who waits for the name, one field per waiting request (see `feed::waitlist`) |
//! | `leasehold:watch:{L}` | channel | wakes the lock's lease watches only: a revocation, a late heartbeat, a change in who waits |
//! | `{L}:leasehold:idem:<sha256>` | hash | an `Idempotency-Key`'s first answer |
//! | `{L}:leasehold:delay` | string | the lock-delay (ms) its lease asked for; expires that long after the lease (PEXPIREAT), so the name refuses new leases that long after a lease ends other than by a release (see `lua/locklib.lua`) |
//! | `{L}:leasehold:writers` (+`:until`) | zset | waiting writers by arrival (fifo read/write policy) |
//! | `{L}:leasehold:history` | stream | the lock's recent history (capped): each ended hold, wait and admin action, field `e` = JSON; an entry a request wrote (a release, a leave, an admin action) keeps its nonce in field `r`, so that its call, run again, answers as it did |
//! | `P + leasehold:events` | channel | JSON arrays of live events, published by the instances |
//! | `P{leasehold/}:events:recent` | stream | the backlog of those events (see `journal`); a tenant's: `P + tenant/{leasehold/}:events:recent` |
//! | `P{leasehold/<id>/}:multilease` | hash | a multilease's record: its members (each an ordinary lease of its lock), TTL, state (`lua/multilease.lua`) |
//! | `P{leasehold/<sha256>/}:multilease-key` | hash | an `Idempotency-Key`'s claim on a multilease or a RedLock lease (acquire, release): its id, the request's fingerprint and the token, sealed |
//! | `P{leasehold/}:redlock` | zset | the RedLock leases of the key space (they live on the RedLock nodes): members `<name>\t<lease-id>`, score 0, read by name (`lua/redlock.lua`); a tenant's: `P + tenant/{leasehold/}:redlock` |
//! | `P{leasehold/}:redlock:due` | zset | every key space's RedLock leases by when they run out (ms), for the expiry sweeper: members `<name or tenant/name>\t<lease-id>` |
//! | `P{leasehold/}:sweeper` | string | which instance makes the periodic expiry pass now (see `sweeper`) |
//!
//! A semaphore `S` follows Redisson's RPermitExpirableSemaphore: `S` is a string counting
//! available permits, `redisson_sc:{S}` a zset of held permit ids -> expiry (and the channel
//! that announces freed permits); its records use `{S}:leasehold...` as above.
//!
//! `P` is the configured key prefix (empty by default, like Redisson). Names and prefixes
//! never contain braces, so `{P + name}` hashes exactly as `P + name` does.

use super::types::{LeaseId, LockName};

/// Redisson's channel prefixes: RLock/RFairLock unlocks, RReadWriteLock unlocks, semaphores.
const UNLOCK_CHANNEL: &str = "redisson_lock__channel:";
const RW_CHANNEL: &str = "redisson_rwlock:";
const SEMAPHORE_CHANNEL: &str = "redisson_sc:";
/// Leasehold's own channel of a lock's lease watches (`leasehold:watch:{L}`): a revocation, a
/// late heartbeat, a change in who waits. Its messages wake the lock's watches, never its
/// waiters.
const WATCH_CHANNEL: &str = "leasehold:watch:";
/// Each key space's events channel, after its prefix.
pub(super) const EVENTS_CHANNEL: &str = "leasehold:events";

/// How many waiters a message should wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakes {
    One,
    All,
    /// The lock's lease watches only.
    Watches,
}

/// The hash tag of every key of Leasehold's own (API keys, sessions, the audit log, each key
/// space's events backlog): never `{L}` for any lock key `L`, which ends with a name's
/// character, never `/` (see `own_keys` at the crate's top for the whole argument).
pub const OWN_TAG: &str = "{leasehold/}";

/// Leasehold's own key `rest` in the key space whose prefix is `space` (the deployment's `P`,
/// or a tenant's `P + tenant + "/"`).
pub fn own_key(space: &str, rest: &str) -> String {
    format!("{space}{OWN_TAG}:{rest}")
}

/// Builds key names under one optional prefix.
#[derive(Debug, Clone, Default)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// `prefix` must not contain braces or glob characters (checked by the configuration).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// What every key and channel of this space starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn lock(&self, name: &LockName) -> LockKeys {
        LockKeys {
            key: format!("{}{}", self.prefix, name.as_str()),
        }
    }

    /// A `SCAN MATCH` pattern for the state hash (`{L}:leasehold`) of every lock and
    /// semaphore whose name starts with `name_prefix`. Names cannot contain glob characters,
    /// so the prefix needs no escaping.
    pub fn state_pattern(&self, name_prefix: &str) -> String {
        format!("{{{}{name_prefix}*}}:leasehold", self.prefix)
    }

    /// The lock name a state hash key found by [`Self::state_pattern`] belongs to.
    pub fn name_of_state_key<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix('{')?
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix("}:leasehold")
    }

    /// Leasehold's own key `rest` in this space (see [`own_key`]).
    pub fn own(&self, rest: &str) -> String {
        own_key(&self.prefix, rest)
    }

    /// A multilease's record (`lua/multilease.lua`): under a hash tag of its own, which ends
    /// with `/` as no lock name does, so multileases spread over a cluster's slots.
    pub fn multilease(&self, id: LeaseId) -> String {
        format!("{}{{leasehold/{id}/}}:multilease", self.prefix)
    }

    /// An Idempotency-Key's claim on a multilease (`digest`: the key's SHA-256, hex).
    pub fn multilease_claim(&self, digest: &str) -> String {
        format!("{}{{leasehold/{digest}/}}:multilease-key", self.prefix)
    }

    /// The events backlog of this space (see `journal`).
    pub fn journal(&self) -> String {
        self.own("events:recent")
    }

    pub fn events_channel(&self) -> String {
        format!("{}{EVENTS_CHANNEL}", self.prefix)
    }

    /// Patterns matching every channel that can wake a waiter under this prefix.
    pub fn wake_patterns(&self) -> Vec<String> {
        [UNLOCK_CHANNEL, RW_CHANNEL, SEMAPHORE_CHANNEL, WATCH_CHANNEL]
            .iter()
            .map(|channel| format!("{channel}{{{}*", self.prefix))
            .collect()
    }

    /// The registry key a message on `channel` wakes: the text inside `channel`'s braces
    /// (`L`), or for a fair waiter's own channel `L}:<holder>` (see [`LockKeys::waiter`]).
    pub fn wake_key_of_channel<'a>(&self, channel: &'a str) -> Option<&'a str> {
        self.wake_of_channel(channel).map(|(key, _)| key)
    }

    /// The registry key a message on `channel` wakes, and whether one waiter or all should
    /// try: an RLock unlock frees the lock for one holder; a read/write unlock may admit many
    /// readers and a semaphore message several permits.
    pub fn wake_of_channel<'a>(&self, channel: &'a str) -> Option<(&'a str, Wakes)> {
        let (rest, wakes) = if let Some(rest) = channel.strip_prefix(UNLOCK_CHANNEL) {
            (rest, Wakes::One)
        } else if let Some(rest) = channel.strip_prefix(RW_CHANNEL) {
            (rest, Wakes::All)
        } else if let Some(rest) = channel.strip_prefix(WATCH_CHANNEL) {
            (rest, Wakes::Watches)
        } else {
            (channel.strip_prefix(SEMAPHORE_CHANNEL)?, Wakes::All)
        };
        let rest = rest.strip_prefix('{')?;
        Some(match rest.strip_suffix('}') {
            Some(lock) => (lock, wakes),
            // A fair waiter's own channel: there is exactly one waiter to wake.
            None => (rest, Wakes::All),
        })
    }
}

/// The watch channel of the lock whose hash tag (`{L}`, braces included) is `tag`.
pub fn watch_channel(tag: &str) -> String {
    format!("{WATCH_CHANNEL}{tag}")
}

/// The channels whose messages wake the waiters of `wake_key` (see
/// [`KeySpace::wake_of_channel`]): a lock's three (RLock, read/write, semaphore: a name is
/// one kind at a time, but a waiter does not know which it will find) and its watches', or
/// a fair waiter's own. All carry the hash tag of the lock, so they share its slot.
pub fn wake_channels(wake_key: &str) -> Vec<String> {
    if wake_key.contains('}') {
        // `L}:<holder>`: the fair waiter's own channel.
        return vec![format!("{UNLOCK_CHANNEL}{{{wake_key}")];
    }
    [UNLOCK_CHANNEL, RW_CHANNEL, SEMAPHORE_CHANNEL, WATCH_CHANNEL]
        .iter()
        .map(|channel| format!("{channel}{{{wake_key}}}"))
        .collect()
}

/// The keys of one lock or semaphore.
#[derive(Debug, Clone)]
pub struct LockKeys {
    key: String,
}

impl LockKeys {
    /// The Redisson lock hash (or semaphore counter), and the registry key of its waiters.
    pub fn lock(&self) -> &str {
        &self.key
    }

    /// The capped stream of the lock's (or semaphore's) events.
    pub fn history(&self) -> String {
        format!("{{{}}}:leasehold:history", self.key)
    }

    /// The answer kept for an Idempotency-Key (`digest`: the key's SHA-256, hex) of a
    /// request on this lock (`idem_key` in `lua/prelude.lua`).
    pub fn idempotency(&self, digest: &str) -> String {
        format!("{{{}}}:leasehold:idem:{digest}", self.key)
    }

    /// An election's lock: the capped stream of its terms, in the order they were granted
    /// (`log_term` in `lua/locklib.lua`).
    pub fn terms(&self) -> String {
        format!("{{{}}}:leasehold:terms", self.key)
    }

    /// Keys whose existence means the lock is held or waited for, or the semaphore has
    /// permits out: the lock hash (or permit counter), the fair queue, Redisson's zset of held
    /// permits (`{S}:timeout`). All share the lock's slot (`L` hashes as `{L}` does).
    pub fn liveness_keys(&self) -> [String; 3] {
        let k = &self.key;
        [
            k.clone(),
            format!("redisson_lock_queue:{{{k}}}"),
            format!("{{{k}}}:timeout"),
        ]
    }

    /// Every other key a function may touch whose name is fixed (the rest are named by a
    /// request: an Idempotency-Key's record, a read hold's timeout key): declared to Redis as
    /// well in Cluster mode, so that while the slot moves a call runs only where all of them
    /// are (Redis answers `ASK` or `TRYAGAIN` otherwise) and never writes one on the importing
    /// node while the old one still holds it.
    pub fn fixed_keys(&self) -> [String; 9] {
        let k = &self.key;
        [
            format!("redisson_lock_queue:{{{k}}}"),
            format!("redisson_lock_timeout:{{{k}}}"),
            format!("{{{k}}}:leasehold:history"),
            format!("{{{k}}}:leasehold:terms"),
            format!("{{{k}}}:leasehold:writers"),
            format!("{{{k}}}:leasehold:writers:until"),
            format!("{{{k}}}:timeout"),
            format!("{{{k}}}:leasehold:holders"),
            format!("{{{k}}}:leasehold:delay"),
        ]
    }

    /// The registry key that wakes one fair waiter: its own Redisson channel's inner text.
    pub fn waiter(&self, id: LeaseId) -> String {
        format!("{}}}:{id}:1", self.key)
    }

    /// The lock's state hash: fencing counter, lease records, limit (see `lua/prelude.lua`).
    pub fn state(&self) -> String {
        format!("{{{}}}:leasehold", self.key)
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
        assert_eq!(keys.state(), "{app:jobs}:leasehold");
        assert_eq!(keys.history(), "{app:jobs}:leasehold:history");
        assert_eq!(space.state_pattern("jo"), "{app:jo*}:leasehold");
        assert_eq!(space.name_of_state_key(&keys.state()), Some("jobs"));
        assert_eq!(
            space.name_of_state_key("{app:jobs}:leasehold:lease:x"),
            None
        );
    }

    #[test]
    fn a_wake_keys_channels_are_the_ones_that_wake_it() {
        let space = KeySpace::new("app:");
        for key in [
            "app:jobs",
            "app:jobs}:0190c5f0-0000-7000-8000-000000000000:1",
        ] {
            let channels = wake_channels(key);
            assert!(!channels.is_empty());
            for channel in channels {
                assert_eq!(space.wake_key_of_channel(&channel), Some(key), "{channel}");
            }
        }
        assert_eq!(wake_channels("app:jobs").len(), 4);
    }

    #[test]
    fn channels_map_to_the_waiters_they_wake() {
        let space = KeySpace::new("");
        let name = LockName::parse("jobs").expect("valid name");
        let keys = space.lock(&name);
        assert_eq!(
            space.wake_key_of_channel("redisson_lock__channel:{jobs}"),
            Some("jobs")
        );
        assert_eq!(
            space.wake_key_of_channel("redisson_rwlock:{jobs}"),
            Some("jobs")
        );
        assert_eq!(
            space.wake_key_of_channel("redisson_sc:{jobs}"),
            Some("jobs")
        );
        let id = crate::locks::LeaseToken::generate().lease_id();
        let own = format!("redisson_lock__channel:{{jobs}}:{id}:1");
        assert_eq!(
            space.wake_key_of_channel(&own),
            Some(keys.waiter(id).as_str())
        );
        assert_eq!(space.wake_key_of_channel("other"), None);
        assert_eq!(
            space.wake_of_channel("redisson_lock__channel:{jobs}"),
            Some(("jobs", Wakes::One))
        );
        assert_eq!(
            space.wake_of_channel("redisson_rwlock:{jobs}"),
            Some(("jobs", Wakes::All))
        );
        assert_eq!(
            space.wake_of_channel("redisson_sc:{jobs}"),
            Some(("jobs", Wakes::All))
        );
        assert_eq!(
            space.wake_of_channel("leasehold:watch:{jobs}"),
            Some(("jobs", Wakes::Watches))
        );
    }
}
