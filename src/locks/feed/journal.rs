//! The recent live events of every lock, kept in Redis so that a listener can start with a
//! backlog and resume after a disconnect without a gap: before an instance publishes a batch
//! of events it appends the batch to one capped stream per events channel,
//! `P{leasehold/}:events:recent` (a tenant's: `P + tenant/{leasehold/}:events:recent`, so one
//! tenant's listeners never read another's events), field `b` = the JSON array, and each event
//! goes out carrying its id, `event_id`:
//! `<stream entry id>.<index in the batch>`. Ids therefore grow in the order Redis took the
//! batches, across instances.
//!
//! A listener that saw event `X` reads every entry after `X` ([`Locks::events_after`]); when
//! `X` has been trimmed away (or never existed) it is told so (`gap`) and must resync.

use std::fmt;

use crate::locks::{LockError, LockEvent, Locks};

/// Batches kept: under light load one event each, under heavy load up to 512.
const BATCHES_KEPT: usize = 200;
/// Most events one read returns.
pub const READ_MAX: usize = 1000;

/// An event's place in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventId {
    ms: u64,
    seq: u64,
    index: u32,
}

impl EventId {
    /// Parses `<ms>-<seq>.<index>`.
    pub fn parse(raw: &str) -> Option<Self> {
        let (entry, index) = raw.trim().split_once('.')?;
        let (ms, seq) = entry.split_once('-')?;
        Some(Self {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
            index: index.parse().ok()?,
        })
    }

    fn entry(&self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}.{}", self.ms, self.seq, self.index)
    }
}

/// Events read back from the journal, oldest first.
#[derive(Debug, Default)]
pub struct Recent {
    pub events: Vec<(EventId, LockEvent)>,
    /// Events after the one asked for may be missing (it was trimmed away, or unknown).
    pub gap: bool,
}

/// The journal of the events published on `channel` (each key space has its own channel, so
/// each tenant its own journal): [`crate::locks::KeySpace::journal`] of the channel's space.
pub(in crate::locks) fn key_of_channel(channel: &str) -> String {
    let space = channel
        .strip_suffix(crate::locks::layout::EVENTS_CHANNEL)
        .unwrap_or(channel);
    crate::locks::layout::own_key(space, "events:recent")
}

/// Appends a batch (JSON objects) to the journal, then publishes it on `channel` with each
/// event's id. If the append fails the events still go out, without ids.
pub(in crate::locks) async fn publish(
    conn: &mut crate::redis::Redis,
    journal: &str,
    channel: &str,
    batch: &[&str],
) -> redis::RedisResult<()> {
    let plain = format!("[{}]", batch.join(","));
    let appended: redis::RedisResult<String> = redis::cmd("XADD")
        .arg(journal)
        .arg("MAXLEN")
        .arg("~")
        .arg(BATCHES_KEPT)
        .arg("*")
        .arg("b")
        .arg(&plain)
        .query_async(conn)
        .await;
    let message = match appended {
        Ok(entry) => with_ids(&entry, batch),
        Err(e) => {
            tracing::debug!(error = %e, "could not journal live events");
            plain
        }
    };
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg(message)
        .query_async::<i64>(conn)
        .await
        .map(drop)
}

/// The batch as a JSON array whose events carry `event_id` (`<entry>.<index>`).
fn with_ids(entry: &str, batch: &[&str]) -> String {
    let events: Vec<String> = batch
        .iter()
        .enumerate()
        .map(|(i, json)| match json.strip_prefix('{') {
            Some(rest) if rest.trim_start().starts_with('}') => {
                format!("{{\"event_id\":\"{entry}.{i}\"}}")
            }
            Some(rest) => format!("{{\"event_id\":\"{entry}.{i}\",{rest}"),
            None => (*json).to_owned(),
        })
        .collect();
    format!("[{}]", events.join(","))
}

impl Locks {
    /// The journal's events after `after` (or its last `count` when `None`), oldest first,
    /// at most `count`.
    pub async fn events_after(
        &self,
        after: Option<EventId>,
        count: usize,
    ) -> Result<Recent, LockError> {
        let key = self.inner.keys.journal();
        let mut conn = self.inner.conn.clone();
        let count = count.min(READ_MAX);
        let mut recent = Recent::default();
        let Some(after) = after else {
            // The newest batches, enough for `count` events, read newest first.
            let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
                .arg(&key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn)
                .await?;
            for (entry, fields) in entries.iter().rev() {
                push_entry(&mut recent.events, entry, fields, None);
            }
            let skip = recent.events.len().saturating_sub(count);
            recent.events.drain(..skip);
            return Ok(recent);
        };
        // The entry of `after` itself (for its later events), then everything after it.
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(&key)
            .arg(after.entry())
            .arg("+")
            .arg("COUNT")
            .arg(count + 1)
            .query_async(&mut conn)
            .await?;
        // Gap: the batch of `after` was trimmed away (or never was).
        recent.gap = entries.first().is_none_or(|(id, _)| *id != after.entry());
        for (entry, fields) in &entries {
            push_entry(&mut recent.events, entry, fields, Some(after));
        }
        recent.events.truncate(count);
        Ok(recent)
    }
}

/// Appends the events of one journal entry, those after `after` only.
fn push_entry(
    out: &mut Vec<(EventId, LockEvent)>,
    entry: &str,
    fields: &[String],
    after: Option<EventId>,
) {
    let Some(batch) = fields
        .iter()
        .position(|f| f == "b")
        .and_then(|at| fields.get(at + 1))
    else {
        return;
    };
    // Indexed before parsing: an entry that is no event must not shift the ids after it
    // (events are journaled as the scripts wrote them, see `Locks::publish_reply_events`).
    let Ok(all) = serde_json::from_str::<Vec<serde_json::Value>>(batch) else {
        return;
    };
    for (i, event) in all.into_iter().enumerate() {
        let Ok(mut event) = serde_json::from_value::<LockEvent>(event) else {
            continue;
        };
        let Some(id) = EventId::parse(&format!("{entry}.{i}")) else {
            continue;
        };
        if after.is_some_and(|a| id <= a) {
            continue;
        }
        event
            .details
            .insert("event_id".into(), id.to_string().into());
        out.push((id, event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_order_by_entry_then_index_and_round_trip() {
        let a = EventId::parse("1700000000000-0.2").expect("id");
        let b = EventId::parse("1700000000000-1.0").expect("id");
        let c = EventId::parse("1700000000001-0.0").expect("id");
        assert!(a < b && b < c);
        assert_eq!(a.to_string(), "1700000000000-0.2");
        assert_eq!(EventId::parse("nonsense"), None);
        assert_eq!(EventId::parse("1-2"), None);
    }

    #[test]
    fn published_events_carry_their_ids() {
        let batch = [r#"{"type":"acquired","lock":"a","at_ms":1}"#, "{}"];
        let message = with_ids("5-0", &batch);
        let events = LockEvent::parse_batch(&message);
        assert_eq!(events.len(), 1, "the empty object is no event");
        assert_eq!(events[0].detail_str("event_id"), Some("5-0.0"));
        assert!(message.contains(r#"{"event_id":"5-0.1"}"#));
    }

    #[test]
    fn an_entry_that_is_no_event_keeps_the_ids_after_it() {
        let fields = [
            "b".to_owned(),
            r#"[{"type":"acquired","lock":"a","at_ms":1},{"lock":"a"},{"type":"released","lock":"a","at_ms":2}]"#
                .to_owned(),
        ];
        let mut out = Vec::new();
        push_entry(&mut out, "5-0", &fields, None);
        let ids: Vec<String> = out.iter().map(|(id, _)| id.to_string()).collect();
        assert_eq!(ids, ["5-0.0", "5-0.2"]);
        assert_eq!(out[1].1.kind, crate::locks::EventKind::Released);
    }
}
