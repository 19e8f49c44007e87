//! Tenants: separate key spaces in one Redis, so two teams' `deploy` locks are two locks.
//!
//! The default tenant keeps the deployment's key prefix `P` as it always was (so Redisson
//! clients and existing data are untouched); tenant `t` puts `P + t + "/"` in front of every
//! key and channel. A lock name never contains `/` (names keep to `[A-Za-z0-9._:-]`) and
//! neither does a tenant name, so after `P` a key either holds no `/` (the default space) or
//! its first `/` ends the tenant: no key of one space can equal a key of another. `/` is no
//! glob character either (`* ? [ ] \`) nor a brace, so the subscriber's patterns and the
//! Cluster hash tags work unchanged. The property tests below check it over every key a lock
//! or semaphore uses.
//!
//! A Redisson client working in tenant `acme` names its lock `acme/<name>`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::locks::KeySpace;

/// What ends a tenant's name in its key prefix; outside the name alphabet, globs and braces.
pub const SEPARATOR: char = '/';

/// Longest tenant name.
pub const MAX_LEN: usize = 64;

/// A tenant: the default one (no name) or a named one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tenant(Option<String>);

/// A tenant name that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a tenant name has 1 to {MAX_LEN} ASCII letters, digits and . _ - : (empty: the default tenant)"
)]
pub struct InvalidTenant;

impl Tenant {
    /// `""` is the default tenant; anything else must keep to the lock-name alphabet.
    pub fn parse(raw: &str) -> Result<Self, InvalidTenant> {
        if raw.is_empty() {
            return Ok(Self(None));
        }
        let valid = raw.len() <= MAX_LEN
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
        if !valid {
            return Err(InvalidTenant);
        }
        Ok(Self(Some(raw.to_owned())))
    }

    pub fn is_default(&self) -> bool {
        self.0.is_none()
    }

    /// The name; `""` for the default tenant.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// The prefix of every key and channel of this tenant, under the deployment's `base`.
    pub fn key_prefix(&self, base: &str) -> String {
        match &self.0 {
            None => base.to_owned(),
            Some(name) => format!("{base}{name}{SEPARATOR}"),
        }
    }

    /// This tenant's key space under `base`.
    pub fn key_space(&self, base: &str) -> KeySpace {
        KeySpace::new(self.key_prefix(base))
    }

    /// The PSUBSCRIBE pattern of every named tenant's events channel under `base` (the
    /// default tenant's is [`KeySpace::events_channel`] of `base` itself).
    pub fn events_pattern(base: &str) -> String {
        format!("{base}*{SEPARATOR}{}", events_suffix())
    }

    /// The tenant whose events channel `channel` is, under `base`; `None` for any other
    /// channel.
    pub fn of_events_channel(base: &str, channel: &str) -> Option<Self> {
        let rest = channel
            .strip_prefix(base)?
            .strip_suffix(events_suffix().as_str())?;
        if rest.is_empty() {
            return Some(Self(None));
        }
        let name = rest.strip_suffix(SEPARATOR)?;
        if name.is_empty() {
            return None;
        }
        Self::parse(name).ok()
    }
}

/// The events channel's name after the prefix (`leasehold:events`).
fn events_suffix() -> String {
    KeySpace::new("").events_channel()
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("(default)"),
            Some(name) => f.write_str(name),
        }
    }
}

impl TryFrom<String> for Tenant {
    type Error = InvalidTenant;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(&raw)
    }
}

impl From<Tenant> for String {
    fn from(t: Tenant) -> Self {
        t.0.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::locks::{LeaseId, LockName};

    /// Every key and channel one lock or semaphore uses, in `tenant`'s space under `base`:
    /// those the Rust side names (the lock key, the state hash, the history, the liveness
    /// keys, one waiter's registry key) and those the Lua functions build from the lock key
    /// `L` (see `lua/prelude.lua` and `locks::keys`): Redisson's channels, queues and timeout
    /// keys, the idempotency records, the writers' queue.
    fn keys_of(base: &str, tenant: &Tenant, name: &str) -> Vec<String> {
        let space = tenant.key_space(base);
        let name = LockName::parse(name).expect("a valid name");
        let keys = space.lock(&name);
        let l = keys.lock();
        let mut all = vec![l.to_owned(), keys.state(), keys.history()];
        all.extend(keys.liveness_keys());
        all.push(keys.waiter(waiter_id()));
        all.extend(lua_keys(l));
        all.sort();
        all.dedup();
        all
    }

    /// The keys and channels the Lua functions derive from the lock key `l`.
    fn lua_keys(l: &str) -> Vec<String> {
        vec![
            format!("redisson_lock__channel:{{{l}}}"),
            format!("redisson_rwlock:{{{l}}}"),
            format!("redisson_sc:{{{l}}}"),
            format!("redisson_lock_queue:{{{l}}}"),
            format!("redisson_lock_timeout:{{{l}}}"),
            format!("{{{l}}}:timeout"),
            format!("{{{l}}}:leasehold:idem:0"),
            format!("{{{l}}}:leasehold:writers"),
            format!("{{{l}}}:leasehold:writers:until"),
            format!("{{{l}}}:leasehold:delay"),
            format!("{{{l}}}:0:1:rwlock_timeout:1"),
        ]
    }

    fn waiter_id() -> LeaseId {
        LeaseId::parse("0190c5f0-0000-7000-8000-000000000000").expect("a lease id")
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9._:-]{1,12}",
            // Names shaped like Leasehold's own keys, old and new, and its key fragments.
            "leasehold(:[a-z-]{0,12}){0,3}",
            "(leasehold|redisson_lock_queue|redisson_sc|key|session|audit|timeout):?[a-z:-]{0,8}",
        ]
        .prop_filter("a valid lock name", |n| LockName::parse(n).is_ok())
    }

    /// Every key of Leasehold's own in the deployment under `base`, with `tenants`' backlogs:
    /// the API key store, sessions, the dashboard's secret, the audit log, each key space's
    /// events backlog, and the quota ledger's accounts.
    fn own_keys_of(base: &str, tenants: &[Tenant]) -> Vec<String> {
        let digest = "0".repeat(64);
        let mut own: Vec<String> = [
            "keys".to_owned(),
            "key-names".to_owned(),
            format!("key:{digest}"),
            format!("session:{digest}"),
            "dashboard-secret".to_owned(),
            "audit".to_owned(),
        ]
        .iter()
        .map(|rest| crate::locks::own_key(base, rest))
        .collect();
        for t in tenants {
            own.push(t.key_space(base).journal());
        }
        for owner in [
            "admin",
            "addr:127.0.0.1",
            "key:0190c5f0-0000-7000-8000-000000000000",
        ] {
            own.push(format!("{base}leasehold:quota:{{{owner}}}:leases"));
            own.push(format!("{base}leasehold:quota:{{{owner}}}:waiters"));
        }
        own
    }

    fn tenant() -> impl Strategy<Value = Tenant> {
        prop_oneof![
            Just(Tenant::default()),
            "[A-Za-z0-9._:-]{1,8}".prop_map(|t| Tenant::parse(&t).expect("valid tenant")),
        ]
    }

    fn base() -> impl Strategy<Value = String> {
        "[A-Za-z0-9._:-]{0,6}"
    }

    proptest! {
        /// Two (tenant, name) pairs share a key only when they are the same pair: no key of
        /// one lock in one space is any key of another lock or another space.
        #[test]
        fn spaces_never_share_a_key(
            base in base(),
            a in (tenant(), name()),
            b in (tenant(), name()),
        ) {
            prop_assume!(a != b);
            let ka = keys_of(&base, &a.0, &a.1);
            let kb = keys_of(&base, &b.0, &b.1);
            for key in &ka {
                prop_assert!(!kb.contains(key), "{a:?} and {b:?} share {key}");
            }
        }

        /// No lock, semaphore or tenant name of any kind maps to a key of the deployment's own
        /// (finding: a lease on `leasehold:audit` used to be the audit log).
        #[test]
        fn no_name_reaches_the_deployments_own_keys(
            base in base(),
            t in tenant(),
            n in name(),
            other in tenant(),
        ) {
            let own = own_keys_of(&base, &[Tenant::default(), t.clone(), other]);
            for key in keys_of(&base, &t, &n) {
                prop_assert!(!own.contains(&key), "{t:?}/{n:?} reaches {key}");
            }
        }

        /// The tenant of an events channel is read back exactly, and the subscriber's one
        /// pattern matches every named tenant's channel and nothing of the default's.
        #[test]
        fn events_channels_name_their_tenant(base in base(), t in tenant()) {
            let channel = t.key_space(&base).events_channel();
            prop_assert_eq!(Tenant::of_events_channel(&base, &channel), Some(t.clone()));
            let pattern = Tenant::events_pattern(&base);
            prop_assert_eq!(glob(&pattern, &channel), !t.is_default());
        }

        /// The subscriber's wake patterns, built from the base prefix, match the unlock
        /// channels of every tenant, and the key it wakes is the one the tenant's waiters
        /// registered under.
        #[test]
        fn one_subscriber_wakes_every_tenant(base in base(), t in tenant(), n in name()) {
            let root = KeySpace::new(base.clone());
            let space = t.key_space(&base);
            let lock = LockName::parse(&n).expect("a valid name");
            let keys = space.lock(&lock);
            let l = keys.lock();
            let channels = [
                format!("redisson_lock__channel:{{{l}}}"),
                format!("redisson_rwlock:{{{l}}}"),
                format!("redisson_sc:{{{l}}}"),
            ];
            for channel in channels {
                let patterns = root.wake_patterns();
                prop_assert!(patterns.iter().any(|p| glob(p, &channel)), "{channel}");
                prop_assert_eq!(root.wake_key_of_channel(&channel), Some(keys.lock()));
            }
        }
    }

    #[test]
    fn tenant_names_keep_to_the_alphabet() {
        assert!(Tenant::parse("").expect("default").is_default());
        assert_eq!(Tenant::parse("team-a").expect("named").as_str(), "team-a");
        for bad in ["a/b", "a*", "{a}", "a b", &"x".repeat(65)] {
            assert_eq!(Tenant::parse(bad), Err(InvalidTenant), "{bad}");
        }
        let t = Tenant::parse("acme").expect("named");
        assert_eq!(t.key_prefix("app:"), "app:acme/");
        assert_eq!(Tenant::default().key_prefix("app:"), "app:");
        assert_eq!(
            Tenant::of_events_channel("", "x:leasehold:events"),
            None,
            "another prefix's channel is nobody's"
        );
    }

    #[test]
    fn a_hand_picked_near_collision_stays_apart() {
        // "a/b" in the default space cannot exist (names have no '/'); "a" + "b:c" vs
        // "a:b" + "c": the separator keeps them apart.
        let mut seen: HashMap<String, (Tenant, &str)> = HashMap::new();
        for (t, n) in [("a", "b:c"), ("a:b", "c"), ("", "a:b:c"), ("", "ab:c")] {
            let tenant = Tenant::parse(t).expect("valid");
            for key in keys_of("", &tenant, n) {
                let previous = seen.insert(key.clone(), (tenant.clone(), n));
                assert!(previous.is_none(), "{key} twice: {previous:?}");
            }
        }
    }

    /// Redis's glob for the characters our patterns use (`*` only).
    fn glob(pattern: &str, text: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == text,
            Some((head, tail)) => {
                let Some(rest) = text.strip_prefix(head) else {
                    return false;
                };
                (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))
            }
        }
    }
}
