//! Events: what this process publishes on the events channel (live: every acquisition,
//! reentry, heartbeat, release, wait), and the lock's capped history stream the Lua functions
//! append to (`lua/prelude.lua`, `append_history`): one entry per ended hold or wait (with
//! when it began, `since_ms`) and per admin action. Reading the history back turns each hold
//! into the two events it was (acquired, then released / expired / force_released).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{LeaseId, LockError, LockName, LockView, Locks, SemaphoreView, Timestamp};

/// One change to a lock or semaphore, as its script described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockEvent {
    /// `acquired`, `reentered`, `renewed`, `released`, `expired`, `force_released`, `queued`,
    /// `granted` or `left`; in the history also `waited` (a wait that ended in a grant).
    #[serde(rename = "type")]
    pub kind: String,
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

    pub(super) fn new(kind: &str, lock: &LockName, at_ms: u64) -> Self {
        Self {
            kind: kind.to_owned(),
            lock: lock.as_str().to_owned(),
            at_ms,
            lease_id: None,
            holder: None,
            details: Map::new(),
        }
    }

    pub(super) fn lease(mut self, id: LeaseId, holder: Option<&str>) -> Self {
        self.lease_id = Some(id.to_string());
        self.holder = holder.map(str::to_owned);
        self
    }

    pub(super) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// The event that began what this history entry ended (a hold: `acquired`; a wait:
    /// `queued`), when the entry says when that was.
    pub(super) fn beginning(&self) -> Option<Self> {
        let since = self.details.get("since_ms").and_then(Value::as_u64)?;
        let fence = self.details.get("fencing_token").and_then(Value::as_u64);
        let held = fence.is_some_and(|f| f > 0);
        let mut begun = Self {
            kind: if held { "acquired" } else { "queued" }.to_owned(),
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
    fn removed_holds(&self) -> Vec<Self> {
        let Some(Value::Array(holders)) = self.details.get("holders") else {
            return Vec::new();
        };
        holders
            .iter()
            .filter_map(|h| {
                let mut fields = h.as_object()?.clone();
                fields.insert("type".into(), "force_released".into());
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

/// The beginnings of the holds and waits a lock's view shows as going on: the history records
/// a hold (or a wait) when it ends, so a page that shows "what happened" adds these.
pub fn ongoing(view: &LockView) -> Vec<LockEvent> {
    let mut events = Vec::new();
    for h in &view.holders {
        let (Some(id), Some(at)) = (h.lease_id, h.acquired_at) else {
            continue;
        };
        let mut e = LockEvent::new("acquired", &view.lock, at.0).lease(id, h.holder.as_deref());
        if let Some(kind) = h.kind {
            e = e.with("kind", kind.as_str());
        }
        if let Some(f) = h.fencing_token {
            e = e.with("fencing_token", f.0);
        }
        events.push(e);
    }
    for q in &view.queue {
        if let (Some(id), Some(at)) = (q.lease_id, q.queued_at) {
            events.push(LockEvent::new("queued", &view.lock, at.0).lease(id, q.holder.as_deref()));
        }
    }
    events
}

/// The same for a semaphore's live leases.
pub fn ongoing_permits(view: &SemaphoreView) -> Vec<LockEvent> {
    view.holders
        .iter()
        .filter_map(|h| {
            let (id, at) = (h.lease_id?, h.acquired_at?);
            let mut e = LockEvent::new("acquired", &view.name, at.0)
                .lease(id, h.holder.as_deref())
                .with("kind", "semaphore")
                .with("permits", h.permits);
            if let Some(f) = h.fencing_token {
                e = e.with("fencing_token", f.0);
            }
            Some(e)
        })
        .collect()
}

/// `history` (newest first) with `more` merged in by time, at most `count`.
pub fn merged(mut history: Vec<LockEvent>, more: Vec<LockEvent>, count: usize) -> Vec<LockEvent> {
    history.extend(more);
    // Stable: at equal times, an end stays before the beginning pushed after it.
    history.sort_by_key(|e| std::cmp::Reverse(e.at_ms));
    history.truncate(count);
    history
}

/// How many events of a lock's history [`Locks::history`] returns at most.
pub const HISTORY_SHOWN: usize = 100;

/// How long the history of a name nobody uses any more is kept (`HISTORY_LIFE_MS` in
/// `lua/prelude.lua`; a test holds the two together): with the name's state, what the names
/// quotas count a name for after its last lease.
pub const HISTORY_LIFE: std::time::Duration = std::time::Duration::from_secs(3600);

impl Locks {
    /// The lock's (or semaphore's) most recent events, newest first: at most `count`, read
    /// from its capped history (each ended hold as its two events). Kept in Redis, so it
    /// survives restarts of this service and every instance sees the same one. Holds still
    /// going on are not in it yet: the lock's view shows them.
    pub async fn history(
        &self,
        name: &LockName,
        count: usize,
    ) -> Result<Vec<LockEvent>, LockError> {
        let key = self.inner.keys.lock(name).history();
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        let mut events = Vec::with_capacity(entries.len() * 2);
        for (_, fields) in &entries {
            let Some(json) = fields
                .iter()
                .position(|f| f == "e" || f == "event")
                .and_then(|at| fields.get(at + 1))
            else {
                continue;
            };
            let Ok(mut entry) = serde_json::from_str::<Map<String, Value>>(json) else {
                continue;
            };
            entry.entry("lock").or_insert_with(|| name.as_str().into());
            let Ok(event) = serde_json::from_value::<LockEvent>(entry.into()) else {
                continue;
            };
            let (begun, removed) = (event.beginning(), event.removed_holds());
            // Pushed after the end, so that at equal times the end still comes first.
            events.push(event);
            events.extend(begun);
            events.extend(removed);
        }
        Ok(merged(events, Vec::new(), count))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_history_life_is_the_one_the_functions_keep() {
        let prelude = include_str!("../../lua/prelude.lua");
        let ms = prelude
            .lines()
            .find_map(|l| l.strip_prefix("local HISTORY_LIFE_MS = "))
            .and_then(|v| v.trim().parse::<u128>().ok());
        assert_eq!(ms, Some(super::HISTORY_LIFE.as_millis()));
    }

    use super::*;

    #[test]
    fn events_parse_with_their_details() {
        let event = LockEvent::parse(
            r#"{"type":"force_released","lock":"jobs","at_ms":5,"lease_ids":["a","b"],"by":"me","reason":"stuck"}"#,
        )
        .expect("an event");
        assert_eq!(event.kind, "force_released");
        assert_eq!(event.removed_lease_ids(), ["a", "b"]);
        assert_eq!(event.detail_str("by"), Some("me"));
        let empty =
            LockEvent::parse(r#"{"type":"force_released","lock":"jobs","at_ms":5,"lease_ids":{}}"#)
                .expect("an event");
        assert!(empty.removed_lease_ids().is_empty());
        assert!(LockEvent::parse("0").is_none());
    }
}
