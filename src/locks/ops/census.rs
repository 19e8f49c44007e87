//! A count of every live lock and semaphore, for metrics an operator alerts on: how old the
//! oldest current hold is, and how many requests wait, over all instances (the waiting
//! lists and fair queues live in Redis). Walks the live names a page at a time, up to a
//! budget, so a scrape stays bounded however many locks there are. Every tenant's names
//! count too (their key spaces are found by their names indexes).

use crate::locks::{KeySpace, ListCursor, LockError, LockName, Locks, NamePrefix, Timestamp};

/// Names read per page of the walk.
const PAGE: usize = 1000;
/// Keyspace pages walked to find the tenants (each `PAGE` buckets): a census stays bounded
/// however large the keyspace (tenants past it are left out until the keyspace shrinks).
const TENANTS_WALKED: usize = 100;

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
    /// Counts the live names of every key space (the deployment's and each tenant's), at
    /// most about `budget` of them. Only the deployment's own names are listed by name
    /// (`locks`): a tenant's name is not a lock name of the deployment's.
    pub async fn census(&self, budget: usize) -> Result<Census, LockError> {
        let mut census = self.census_of_space(budget, true).await?;
        for tenant in self.tenant_spaces().await? {
            let left = budget.saturating_sub(usize::try_from(census.live).unwrap_or(usize::MAX));
            if left == 0 {
                census.truncated = true;
                break;
            }
            let theirs = self.in_space(tenant).census_of_space(left, false).await?;
            census.live += theirs.live;
            census.truncated |= theirs.truncated;
            census.waiters += theirs.waiters;
            census.oldest_hold = match (census.oldest_hold, theirs.oldest_hold) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(census)
    }

    /// The tenants' key spaces that have a names index (found by a walk of the keyspace for
    /// their index keys; at most [`TENANTS_WALKED`] pages).
    async fn tenant_spaces(&self) -> Result<Vec<KeySpace>, LockError> {
        let prefix = self.inner.keys.prefix();
        let index_suffix = crate::locks::feed::index::index_key(&KeySpace::new(""));
        let pattern = format!("{prefix}*/{index_suffix}");
        let mut spaces = Vec::new();
        let mut cursor = 0;
        for _ in 0..TENANTS_WALKED {
            let (next, keys) = self.inner.conn.scan_page(cursor, &pattern, PAGE).await?;
            spaces.extend(keys.iter().filter_map(|key| {
                let space = key.strip_suffix(&index_suffix)?;
                (space.len() > prefix.len()).then(|| KeySpace::new(space))
            }));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        spaces.sort_by(|a, b| a.prefix().cmp(b.prefix()));
        spaces.dedup_by(|a, b| a.prefix() == b.prefix());
        Ok(spaces)
    }

    async fn census_of_space(&self, budget: usize, named: bool) -> Result<Census, LockError> {
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
                census.live += 1;
                if named {
                    census
                        .locks
                        .push((entry.name().clone(), since, waiting + queued));
                }
            }
            match page.next_cursor {
                None => return Ok(census),
                Some(_) if usize::try_from(census.live).unwrap_or(usize::MAX) >= budget => {
                    census.truncated = true;
                    return Ok(census);
                }
                Some(next) => cursor = next,
            }
        }
    }
}
