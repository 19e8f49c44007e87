//! A count of every live lock and semaphore, for metrics an operator alerts on: how old the
//! oldest current hold is, and how many requests wait, over all instances (the waiting
//! lists and fair queues live in Redis). Walks the live names a page at a time, up to a
//! budget, so a scrape stays bounded however many locks there are.

use crate::locks::{ListCursor, LockError, LockName, Locks, NamePrefix, Timestamp};

/// Names read per page of the walk.
const PAGE: usize = 1000;

/// What the census found.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Live names counted (at most the budget).
    pub live: u64,
    /// Whether the budget ran out before the walk ended.
    pub truncated: bool,
    /// When the oldest current hold began, over every name counted.
    pub oldest_hold: Option<Timestamp>,
    /// Requests waiting (fair tickets, and every other kind), over every name counted.
    pub waiters: u64,
    /// Per name: when its oldest current hold began, and its waiters.
    pub locks: Vec<(LockName, Option<Timestamp>, u64)>,
}

impl Locks {
    /// Counts the live names, at most about `budget` of them.
    pub async fn census(&self, budget: usize) -> Result<Census, LockError> {
        let mut census = Census::default();
        let mut cursor = ListCursor::default();
        loop {
            let page = self.live(&NamePrefix::default(), cursor, PAGE).await?;
            let names: Vec<&LockName> = page.entries.iter().map(|e| e.name()).collect();
            let waiting = self.waiting_counts(&names).await?;
            for (entry, waiting) in page.entries.iter().zip(waiting) {
                let queued = match entry {
                    crate::locks::LiveEntry::Lock(lock) => lock.queue_length,
                    crate::locks::LiveEntry::Semaphore(_) => 0,
                };
                let since = entry.held_since();
                census.oldest_hold = match (census.oldest_hold, since) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                census.waiters += waiting + queued;
                census
                    .locks
                    .push((entry.name().clone(), since, waiting + queued));
            }
            census.live = u64::try_from(census.locks.len()).unwrap_or(u64::MAX);
            match page.next_cursor {
                None => return Ok(census),
                Some(_) if census.locks.len() >= budget => {
                    census.truncated = true;
                    return Ok(census);
                }
                Some(next) => cursor = next,
            }
        }
    }
}
