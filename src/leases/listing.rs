//! What spans a key space's stores. The live names: the main Redis's listing merged, page by
//! page and in name order, with the names the main Redis indexes as holding a RedLock lease
//! (`lua/redlock.lua`), each shown as the nodes' majority holds it. A name's history: the main
//! Redis's, with what the RedLock nodes recorded of the name's RedLock leases.
//!
//! Each store is read from the cursor on, in name order, and says how far it got (a full
//! read, or a page cut short, stops somewhere); the merged page keeps only names up to the
//! nearest of those stops, so that no name is skipped, and goes on from there.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures_util::future::join_all;

use super::{LeaseError, Leases};
use crate::locks::{
    HeldAs, ListCursor, LiveEntry, LivePage, LockEvent, LockName, LockView, NamePrefix,
};

/// RedLock index members read per page, as a multiple of the page size.
const READ_FACTOR: usize = 2;
/// How long a node's history may take to read (a node down must not hold the page up).
const NODE_READ: Duration = Duration::from_millis(500);

/// `main` with the leases `red` (the RedLock nodes' majority) holds on the same name.
pub(super) fn merged(main: Option<LockView>, red: Option<LockView>) -> Option<LockView> {
    match (main, red) {
        (Some(mut main), Some(red)) => {
            if main.holders.is_empty() && main.queue_length == 0 {
                main.kind = Some(HeldAs::Redlock);
                main.expires_at = red.expires_at;
                main.remaining_ms = red.remaining_ms;
            }
            main.holders.extend(red.holders);
            Some(main)
        }
        (main, None) => main,
        (None, red) => red,
    }
}

impl Leases {
    /// The last `count` events of `name` (newest first): the main Redis's history, and for a
    /// name with RedLock leases the nodes' (each node records every RedLock lease it held, so
    /// an event is shown once: by the first node that recorded it).
    pub async fn history(
        &self,
        name: &LockName,
        count: usize,
    ) -> Result<Vec<LockEvent>, LeaseError> {
        let main = self.locks.history(name, count).await?;
        let Some(redlock) = &self.redlock else {
            return Ok(main);
        };
        if !self.indexed_on_nodes(name).await && !main.is_empty() {
            return Ok(main);
        }
        let nodes = join_all(
            redlock
                .nodes()
                .iter()
                .map(|n| tokio::time::timeout(NODE_READ, n.locks.history(name, count))),
        )
        .await;
        let mut seen = HashSet::new();
        let red: Vec<LockEvent> = nodes
            .into_iter()
            .filter_map(|read| read.ok()?.ok())
            .flatten()
            .filter(|e| seen.insert((e.kind.as_str().to_owned(), e.lease_id.clone())))
            .map(|mut e| {
                e.details.insert("kind".into(), "redlock".into());
                e
            })
            .collect();
        Ok(crate::locks::merged(main, red, count))
    }

    /// Up to `page_size` live locks and semaphores whose names start with `prefix`, after
    /// `cursor`, in name order, in every store (see `Locks::live`).
    pub async fn live(
        &self,
        prefix: &NamePrefix,
        cursor: ListCursor,
        page_size: usize,
    ) -> Result<LivePage, LeaseError> {
        let mut page = self.live_anywhere(prefix, cursor, page_size).await?;
        // An election runs on a lock of its own (`election/<name>`): it is listed with the
        // elections, not the locks (a page may come out shorter; its cursor is the same).
        page.entries
            .retain(|e| super::election::ElectionName::of_lock(e.name().as_str()).is_none());
        Ok(page)
    }

    async fn live_anywhere(
        &self,
        prefix: &NamePrefix,
        cursor: ListCursor,
        page_size: usize,
    ) -> Result<LivePage, LeaseError> {
        let Some(redlock) = &self.redlock else {
            return Ok(self.locks.live(prefix, cursor, page_size).await?);
        };
        let read = page_size.saturating_mul(READ_FACTOR).max(16);
        let (from, to) = bounds(prefix, &cursor);
        let (main, indexed) = tokio::join!(
            self.locks.live(prefix, cursor.clone(), page_size),
            self.locks.records().redlock_leases(&from, &to, read)
        );
        let (main, indexed) = (main?, indexed?);
        // How far each store got: the main page to its cursor, the index to its last member
        // when it read as many as it asked for.
        let mut stops: Vec<LockName> = main.next_cursor.iter().filter_map(cursor_name).collect();
        if indexed.len() == read
            && let Some((last, _)) = indexed.last()
        {
            stops.push(last.clone());
        }
        let stop = stops.into_iter().min_by(|a, b| a.as_str().cmp(b.as_str()));
        let mut names: Vec<LockName> = indexed.into_iter().map(|(name, _)| name).collect();
        names.dedup();
        let red_views = join_all(names.iter().map(|name| redlock.lock(name))).await;
        let mut entries: BTreeMap<String, LiveEntry> = main
            .entries
            .into_iter()
            .map(|e| (e.name().as_str().to_owned(), e))
            .collect();
        for view in red_views.into_iter().filter_map(Result::ok).flatten() {
            let key = view.lock.as_str().to_owned();
            let entry = match entries.remove(&key) {
                Some(LiveEntry::Lock(main)) => merged(Some(main), Some(view)),
                Some(semaphore) => {
                    entries.insert(key, semaphore);
                    continue;
                }
                None => Some(view),
            };
            if let Some(lock) = entry {
                entries.insert(key, LiveEntry::Lock(lock));
            }
        }
        Ok(page(entries, stop, page_size))
    }
}

/// The merged entries up to `stop`, at most `page_size`, and where the next page starts.
fn page(
    entries: BTreeMap<String, LiveEntry>,
    stop: Option<LockName>,
    page_size: usize,
) -> LivePage {
    let within: Vec<LiveEntry> = entries
        .into_values()
        .filter(|e| {
            stop.as_ref()
                .is_none_or(|s| e.name().as_str() <= s.as_str())
        })
        .collect();
    let truncated = within.len() > page_size;
    let mut entries = within;
    entries.truncate(page_size);
    let next = if truncated {
        entries.last().map(|e| e.name().clone())
    } else {
        stop
    };
    LivePage {
        entries,
        next_cursor: next.and_then(|name| ListCursor::parse(name.as_str()).ok()),
    }
}

/// A page's cursor as the name it stops at.
fn cursor_name(cursor: &ListCursor) -> Option<LockName> {
    LockName::parse(cursor.as_str()).ok()
}

/// The RedLock index's BYLEX bounds (members `<name>\t<id>`) for names starting with
/// `prefix`, after `cursor`: names are printable ASCII above `\n`, so `<name>\n` sorts after
/// every member of `<name>` and before every longer name.
fn bounds(prefix: &NamePrefix, cursor: &ListCursor) -> (String, String) {
    let from = match cursor.as_str() {
        "" if prefix.as_str().is_empty() => "-".to_owned(),
        "" => format!("[{}", prefix.as_str()),
        after if after >= prefix.as_str() => format!("[{after}\n"),
        _ => format!("[{}", prefix.as_str()),
    };
    let to = if prefix.as_str().is_empty() {
        "+".to_owned()
    } else {
        format!("[{}\u{7f}", prefix.as_str())
    };
    (from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_read_after_the_cursor_within_the_prefix() {
        let prefix = NamePrefix::parse("jobs:").expect("valid");
        assert_eq!(
            bounds(&prefix, &ListCursor::default()),
            ("[jobs:".to_owned(), "[jobs:\u{7f}".to_owned())
        );
        let cursor = ListCursor::parse("jobs:a").expect("valid");
        assert_eq!(bounds(&prefix, &cursor).0, "[jobs:a\n");
        let all = NamePrefix::default();
        assert_eq!(
            bounds(&all, &ListCursor::default()),
            ("-".to_owned(), "+".to_owned())
        );
    }
}
