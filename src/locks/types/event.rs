//! One change to a lock or semaphore, as its script (or this process) described it: what the
//! live events carry, and what a lock's history holds.

use std::str::FromStr as _;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{LeaseId, LockName, Timestamp};

/// What happened. A kind this build does not know (a newer instance's) is kept as it came.
#[derive(Debug, Clone, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum EventKind {
    Acquired,
    Reentered,
    Renewed,
    Released,
    Expired,
    ForceReleased,
    /// An admin freed a name nobody held before its lock-delay ended.
    DelayLifted,
    Queued,
    /// A queued fair ticket was granted its lease.
    Granted,
    /// A fair ticket gave up its place.
    Left,
    LimitChanged,
    /// In the history: a wait that ended in a grant.
    Waited,
    #[strum(default)]
    Other(String),
}

impl EventKind {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Other(kind) => kind,
            known => known.into(),
        }
    }

    /// A lease's hold or a ticket's place began (the timeline starts a bar).
    pub fn begins(&self) -> bool {
        matches!(self, Self::Acquired | Self::Granted)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        // Infallible: an unknown kind is `Other`.
        Ok(Self::from_str(&raw).unwrap_or(Self::Other(raw)))
    }
}

/// One change to a lock or semaphore, as its script described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockEvent {
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The lock (or semaphore) name as the API shows it.
    pub lock: String,
    /// When, by Redis's clock (ms since the Unix epoch).
    pub at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Everything else the script said (`reentry_count`, `fencing_token`, `by`, `reason`,
    /// `lease_ids`, ...).
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

impl LockEvent {
    /// Parses an event's JSON; `None` for anything else.
    pub fn parse(json: &str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }

    /// Parses a message of the events channel: a JSON array of events (or one event).
    pub fn parse_batch(json: &str) -> Vec<Self> {
        if json.starts_with('[') {
            serde_json::from_str::<Vec<Value>>(json)
                .map(|all| {
                    all.into_iter()
                        .filter_map(|v| serde_json::from_value(v).ok())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Self::parse(json).into_iter().collect()
        }
    }

    pub(crate) fn new(kind: EventKind, lock: &LockName, at_ms: u64) -> Self {
        Self {
            kind,
            lock: lock.as_str().to_owned(),
            at_ms,
            lease_id: None,
            holder: None,
            details: Map::new(),
        }
    }

    pub(crate) fn lease(mut self, id: LeaseId, holder: Option<&str>) -> Self {
        self.lease_id = Some(id.to_string());
        self.holder = holder.map(str::to_owned);
        self
    }

    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// The event that began what this history entry ended (a hold: `acquired`; a wait:
    /// `queued`), when the entry says when that was.
    pub(crate) fn beginning(&self) -> Option<Self> {
        let since = self.details.get("since_ms").and_then(Value::as_u64)?;
        let fence = self.details.get("fencing_token").and_then(Value::as_u64);
        let held = fence.is_some_and(|f| f > 0);
        let mut begun = Self {
            kind: if held {
                EventKind::Acquired
            } else {
                EventKind::Queued
            },
            lock: self.lock.clone(),
            at_ms: since,
            lease_id: self.lease_id.clone(),
            holder: self.holder.clone(),
            details: Map::new(),
        };
        for key in ["kind", "permits"] {
            if let Some(v) = self.details.get(key) {
                begun.details.insert(key.into(), v.clone());
            }
        }
        if held && let Some(f) = fence {
            begun.details.insert("fencing_token".into(), f.into());
        }
        Some(begun)
    }

    /// The holds an admin action's entry lists (`holders`), each as its `acquired` event.
    pub(crate) fn removed_holds(&self) -> Vec<Self> {
        let Some(Value::Array(holders)) = self.details.get("holders") else {
            return Vec::new();
        };
        holders
            .iter()
            .filter_map(|h| {
                let mut fields = h.as_object()?.clone();
                fields.insert("type".into(), EventKind::ForceReleased.as_str().into());
                fields.insert("lock".into(), self.lock.clone().into());
                fields.insert("at_ms".into(), self.at_ms.into());
                let ended: Self = serde_json::from_value(fields.into()).ok()?;
                ended.lease_id.as_ref()?;
                ended.beginning()
            })
            .collect()
    }

    pub fn at(&self) -> Timestamp {
        Timestamp(self.at_ms)
    }

    /// A text field of the details (`by`, `reason`, ...).
    pub fn detail_str(&self, field: &str) -> Option<&str> {
        self.details.get(field).and_then(Value::as_str)
    }

    /// The leases a force release removed. (Lua's cjson writes an empty list as `{}`.)
    pub fn removed_lease_ids(&self) -> Vec<&str> {
        match self.details.get("lease_ids") {
            Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_read_and_write_their_wire_names_and_keep_unknown_ones() {
        for (kind, name) in [
            (EventKind::Acquired, "acquired"),
            (EventKind::ForceReleased, "force_released"),
            (EventKind::LimitChanged, "limit_changed"),
        ] {
            assert_eq!(kind.as_str(), name);
            assert_eq!(serde_json::to_value(&kind).expect("json"), name);
            let read: EventKind = serde_json::from_value(name.into()).expect("a kind");
            assert_eq!(read, kind);
        }
        let newer: EventKind = serde_json::from_value("evicted".into()).expect("a kind");
        assert_eq!(newer, EventKind::Other("evicted".into()));
        assert_eq!(serde_json::to_value(&newer).expect("json"), "evicted");
    }
}
