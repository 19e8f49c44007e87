//! The values a lease is made of: its TTL and the bounds on it, its fencing token, its holder
//! label and metadata, and points in time.

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{InvalidInput, Membership};

/// A lease time to live, within the configured bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(Duration);

impl Ttl {
    pub fn as_millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }

    pub fn as_duration(self) -> Duration {
        self.0
    }
}

/// The TTLs a deployment accepts, and the one it gives when a client names none.
#[derive(Debug, Clone, Copy)]
pub struct TtlPolicy {
    pub default_ms: u64,
    pub min_ms: u64,
    pub max_ms: u64,
}

impl TtlPolicy {
    pub fn default_ttl(&self) -> Ttl {
        Ttl(Duration::from_millis(self.default_ms))
    }

    pub fn parse(&self, ttl_ms: u64) -> Result<Ttl, InvalidInput> {
        if ttl_ms < self.min_ms || ttl_ms > self.max_ms {
            return Err(InvalidInput::Ttl {
                ttl_ms,
                min_ms: self.min_ms,
                max_ms: self.max_ms,
            });
        }
        Ok(Ttl(Duration::from_millis(ttl_ms)))
    }
}

/// How long a lock's name refuses new leases after its lease ended other than by a release
/// (its TTL ran out, an admin force-released or evicted it): Chubby's and Consul's lock-delay.
/// Never zero (no delay is `None`), never above the deployment's ceiling. In milliseconds, in
/// four bytes: it rides in every parked waiter's request (`ops::budgets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockDelay(NonZeroU32);

impl LockDelay {
    /// `delay_ms` within `max_ms` (and 49 days); 0 is no delay.
    pub fn parse(delay_ms: u64, max_ms: u64) -> Result<Option<Self>, InvalidInput> {
        let max_ms = max_ms.min(u64::from(u32::MAX));
        if delay_ms > max_ms {
            return Err(InvalidInput::LockDelay { delay_ms, max_ms });
        }
        Ok(u32::try_from(delay_ms)
            .ok()
            .and_then(NonZeroU32::new)
            .map(Self))
    }

    pub fn as_millis(self) -> u64 {
        u64::from(self.0.get())
    }
}

/// A per-lock number that grows with every new acquisition and never goes back, not even
/// after a release, an expiry, or Redis losing data: each is one more than the last and at
/// least Redis's clock in microseconds (so about 1.8e15 today: still exact as a JSON number,
/// below 2^53). The protected resource rejects writes carrying a smaller one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

/// A free-text label naming who holds a lease ("worker-3", "deploy cron"), for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderLabel(String);

impl HolderLabel {
    pub const MAX_LEN: usize = 200;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.chars().count() > Self::MAX_LEN {
            return Err(InvalidInput::Holder(format!(
                "a holder label has 1 to {} characters",
                Self::MAX_LEN
            )));
        }
        if !shows_as_itself(raw)
            && let Some(bad) = raw
                .chars()
                .find(|&c| !shows_as_itself(c.encode_utf8(&mut [0; 4])))
        {
            return Err(InvalidInput::Holder(format!(
                "a holder label holds letters, marks, digits, punctuation, symbols and spaces \
                 only, nothing invisible, direction-changing or line-breaking (U+{:04X} is \
                 not): it would show as another label",
                u32::from(bad)
            )));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether every character of `text` shows as itself: a letter, mark, number, punctuation, symbol or space
/// separator (Unicode's general categories L, M, N, P, S, Zs), and not default-ignorable
/// (what renders as nothing: zero-width and variation characters, tags, Hangul fillers, the
/// combining grapheme joiner). Allowed by category rather than denied by list, so that
/// controls, line and paragraph separators, format characters and unassigned ones are all
/// out: a label holding one could pass for another on the dashboard and in a 409's `holder`.
fn shows_as_itself(text: &str) -> bool {
    static SHOWN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}&&\P{Default_Ignorable_Code_Point}]+$")
            .expect("a valid class")
    });
    SHOWN.is_match(text)
}

/// A small JSON object a client attaches to its lease (job id, host, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata(serde_json::Map<String, serde_json::Value>);

impl Metadata {
    pub const MAX_BYTES: usize = 4096;

    pub fn parse(value: serde_json::Value) -> Result<Self, InvalidInput> {
        let serde_json::Value::Object(map) = value else {
            return Err(InvalidInput::Metadata(
                "metadata must be a JSON object".into(),
            ));
        };
        let size = serde_json::to_string(&map)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if map.contains_key(Self::MEMBERSHIP_KEY) {
            return Err(InvalidInput::Metadata(format!(
                "the member {:?} is kept for multileases' own use",
                Self::MEMBERSHIP_KEY
            )));
        }
        if size > Self::MAX_BYTES {
            return Err(InvalidInput::Metadata(format!(
                "metadata may take {} bytes as JSON, this takes {size}",
                Self::MAX_BYTES
            )));
        }
        Ok(Self(map))
    }

    /// Its size as JSON (what Redis keeps of it), in bytes.
    pub fn json_len(&self) -> usize {
        serde_json::to_string(&self.0).map_or(0, |s| s.len())
    }

    /// The member key under which an election's candidate keeps its value.
    pub const ELECTION_VALUE_KEY: &'static str = "value";

    /// An election candidate's metadata: its value (checked by the election's route).
    pub(crate) fn election_value(value: &str) -> Self {
        let mut map = serde_json::Map::new();
        map.insert(Self::ELECTION_VALUE_KEY.to_owned(), value.into());
        Self(map)
    }

    /// One member of the object.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.get(key)
    }

    /// The member key under which a multilease's member lease keeps its [`Membership`]
    /// (beside the client's own members, which may not use it).
    pub const MEMBERSHIP_KEY: &'static str = "leasehold:multilease";

    /// A member lease's metadata: the client's, and the multilease it is part of.
    pub(crate) fn with_membership(client: Option<&Self>, membership: &Membership) -> Self {
        let mut map = client.map(|m| m.0.clone()).unwrap_or_default();
        if let Ok(value) = serde_json::to_value(membership) {
            map.insert(Self::MEMBERSHIP_KEY.to_owned(), value);
        }
        Self(map)
    }

    /// The multilease a member lease's metadata names, and the client's own metadata.
    pub fn split_membership(self) -> (Option<Membership>, Option<Self>) {
        let mut map = self.0;
        let Some(value) = map.remove(Self::MEMBERSHIP_KEY) else {
            return (None, Some(Self(map)));
        };
        let membership = serde_json::from_value(value).ok();
        (membership, (!map.is_empty()).then_some(Self(map)))
    }

    /// The metadata as a viewer whose name patterns `allows` sees it: a member lease's
    /// multilease names only the locks the viewer may see (see `Membership::seen_by`).
    pub fn seen_by(self, allows: &dyn Fn(&str) -> bool) -> Self {
        let (membership, own) = self.split_membership();
        match membership {
            Some(m) => Self::with_membership(own.as_ref(), &m.seen_by(allows)),
            None => own.unwrap_or(Self(serde_json::Map::new())),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::Value::Object(self.0.clone()).to_string()
    }

    pub fn into_value(self) -> serde_json::Value {
        serde_json::Value::Object(self.0)
    }

    /// Reads what `to_json` stored; anything else (or nothing) is no metadata.
    pub(crate) fn from_stored(raw: Option<&str>) -> Option<Self> {
        match serde_json::from_str(raw?) {
            Ok(serde_json::Value::Object(map)) => Some(Self(map)),
            _ => None,
        }
    }
}

/// A point in time as Redis's clock gave it, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn plus(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    pub fn as_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// RFC 3339 with milliseconds, UTC.
    pub fn rfc3339(self) -> String {
        humantime::format_rfc3339_millis(self.as_system_time()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_policy_enforces_bounds() {
        let policy = TtlPolicy {
            default_ms: 30_000,
            min_ms: 1_000,
            max_ms: 60_000,
        };
        assert_eq!(policy.parse(1_000).map(Ttl::as_millis), Ok(1_000));
        assert!(policy.parse(999).is_err());
        assert!(policy.parse(60_001).is_err());
    }

    #[test]
    fn metadata_must_be_a_small_object() {
        assert!(Metadata::parse(serde_json::json!({"job": 7})).is_ok());
        assert!(Metadata::parse(serde_json::json!([1])).is_err());
        assert!(Metadata::parse(serde_json::json!({"x": "y".repeat(5000)})).is_err());
    }
}
