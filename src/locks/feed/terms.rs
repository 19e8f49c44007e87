//! An election's terms, as its lock's terms log keeps them (`log_term` in
//! `lua/locklib.lua`): one stream entry per grant, in the order Redis made them.

use crate::locks::{LeaseId, LockError, LockName, Locks, Metadata, Timestamp};

/// One term as the log has it; `id` is its stream entry's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermEntry {
    pub id: String,
    pub candidate_id: Option<LeaseId>,
    pub term: u64,
    pub holder: Option<String>,
    pub value: Option<String>,
    pub since: Timestamp,
    /// A new value in this term (`PUT .../value`), not a new term.
    pub proclaimed: bool,
}

/// Terms read from the log, oldest first.
#[derive(Debug, Default)]
pub struct Terms {
    pub entries: Vec<TermEntry>,
    /// Terms after the one asked for may be missing (trimmed from the log).
    pub gap: bool,
    /// The term of the entry asked to read after, when it is still in the log: where a
    /// resumed observer stands (not the election's term now, which may be ahead of the log
    /// as read: a term granted between the two reads would be taken as told).
    pub after_term: Option<u64>,
}

/// Where an observer of an election with no term yet stands: before every entry (a stream
/// id no entry has).
pub const LOG_START: &str = "0-0";

/// Most terms one read returns.
pub const TERMS_READ_MAX: usize = 300;

fn entry(id: &str, fields: &[String]) -> Option<TermEntry> {
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair.first().is_some_and(|f| f == name))
            .and_then(|pair| pair.get(1))
            .map(String::as_str)
    };
    let non_empty = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(str::to_owned);
    let value = field("m")
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| Metadata::parse(m).ok())
        .and_then(|m| {
            m.get(Metadata::ELECTION_VALUE_KEY)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        });
    Some(TermEntry {
        id: id.to_owned(),
        candidate_id: field("c").and_then(LeaseId::parse),
        term: field("t")?.parse().ok()?,
        holder: non_empty(field("h")),
        value,
        since: Timestamp(field("a")?.parse().ok()?),
        proclaimed: field("p") == Some("1"),
    })
}

impl Locks {
    /// The terms of election lock `name` after entry `after` (at most `count`); without
    /// `after`, its last term only.
    pub async fn terms_after(
        &self,
        name: &LockName,
        after: Option<&str>,
        count: usize,
    ) -> Result<Terms, LockError> {
        let key = self.inner.keys.lock(name).terms();
        let mut conn = self.inner.conn.clone();
        let Some(after) = after else {
            let last: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
                .arg(&key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut conn)
                .await?;
            return Ok(Terms {
                entries: last.iter().filter_map(|(id, f)| entry(id, f)).collect(),
                gap: false,
                after_term: None,
            });
        };
        // From the log's beginning ("0-0": no term was there to stand after): no entry to
        // find again, nothing can be missing but what the log trimmed.
        if after == LOG_START {
            let read: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(count.min(TERMS_READ_MAX))
                .query_async(&mut conn)
                .await?;
            return Ok(Terms {
                entries: read.iter().filter_map(|(id, f)| entry(id, f)).collect(),
                gap: false,
                after_term: None,
            });
        }
        // The entry of `after` itself (to know it is still there), then the rest.
        let read: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(&key)
            .arg(after)
            .arg("+")
            .arg("COUNT")
            .arg(count.min(TERMS_READ_MAX) + 1)
            .query_async(&mut conn)
            .await?;
        let gap = read.first().is_none_or(|(id, _)| id != after);
        let after_term = read
            .first()
            .filter(|(id, _)| id == after)
            .and_then(|(id, f)| entry(id, f))
            .map(|e| e.term);
        Ok(Terms {
            entries: read
                .iter()
                .filter(|(id, _)| id != after)
                .filter_map(|(id, f)| entry(id, f))
                .collect(),
            gap,
            after_term,
        })
    }
}
