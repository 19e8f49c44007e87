//! Events: what this process publishes on the events channel (live: every acquisition,
//! reentry, heartbeat, release, wait), and the lock's capped history stream the Lua functions
//! append to (`lua/prelude.lua`, `append_history`): one entry per ended hold or wait (with
//! when it began, `since_ms`) and per admin action. Reading the history back turns each hold
//! into the two events it was (acquired, then released / expired / force_released).

use serde_json::{Map, Value};

use crate::locks::types::{EventKind, LockEvent, LockView, SemaphoreView};
use crate::locks::{LockError, LockName, Locks};

/// The beginnings of the holds and waits a lock's view shows as going on: the history records
/// a hold (or a wait) when it ends, so a page that shows "what happened" adds these.
pub fn ongoing(view: &LockView) -> Vec<LockEvent> {
    let mut events = Vec::new();
    for h in &view.holders {
        let (Some(id), Some(at)) = (h.lease_id, h.acquired_at) else {
            continue;
        };
        let mut e =
            LockEvent::new(EventKind::Acquired, &view.lock, at.0).lease(id, h.holder.as_deref());
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
            events.push(
                LockEvent::new(EventKind::Queued, &view.lock, at.0).lease(id, q.holder.as_deref()),
            );
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
            let mut e = LockEvent::new(EventKind::Acquired, &view.name, at.0)
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
        let prelude = include_str!("../../../lua/prelude.lua");
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
        assert_eq!(event.kind, EventKind::ForceReleased);
        assert_eq!(event.removed_lease_ids(), ["a", "b"]);
        assert_eq!(event.detail_str("by"), Some("me"));
        let empty =
            LockEvent::parse(r#"{"type":"force_released","lock":"jobs","at_ms":5,"lease_ids":{}}"#)
                .expect("an event");
        assert!(empty.removed_lease_ids().is_empty());
        assert!(LockEvent::parse("0").is_none());
    }
}
