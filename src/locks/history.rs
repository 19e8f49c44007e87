//! Events: what every script publishes on the events channel and appends to the lock's capped
//! history stream (`lua/prelude.lua`, `publish_event`), and reading that history back.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{LockError, LockName, Locks, Timestamp};

/// One change to a lock or semaphore, as its script described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockEvent {
    /// `acquired`, `reentered`, `renewed`, `released`, `expired`, `force_released`, `queued`,
    /// `granted` or `left`.
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

/// How many events of a lock's history [`Locks::history`] returns at most.
pub const HISTORY_SHOWN: usize = 100;

impl Locks {
    /// The lock's (or semaphore's) most recent events, newest first: at most `count`, from
    /// the capped stream every script appends to. Kept in Redis, so it survives restarts of
    /// this service and every instance sees the same one.
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
        Ok(entries
            .iter()
            .filter_map(|(_, fields)| {
                let at = fields.iter().position(|f| f == "event")?;
                LockEvent::parse(fields.get(at + 1)?)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
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
