//! This instance's memory of API key lookups, each kept at most [`CACHE_TTL`]: a request
//! costs no Redis round trip for its key most of the time, and a revocation is seen within
//! that long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an instance may keep answering from what it last read of a key.
pub const CACHE_TTL: Duration = Duration::from_secs(1);
/// Cached lookups kept at most; past it, stale ones go (then all, under a flood of bad keys).
const CACHE_MAX: usize = 10_000;

/// What a lookup was by: a secret's digest or a key id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum CacheKey {
    Digest(String),
    Id(String),
}

#[derive(Debug, Clone)]
struct Cached<R> {
    at: Instant,
    record: Option<Arc<R>>,
}

/// Generic over the record so that it need not know the store's types (`R` is a key's
/// record; [`Identified`] gives its id).
pub(super) struct KeyCache<R> {
    entries: Mutex<HashMap<CacheKey, Cached<R>>>,
}

impl<R> Default for KeyCache<R> {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
        }
    }
}

/// A cached record's key id.
pub(super) trait Identified {
    fn id(&self) -> &str;
}

impl<R: Identified> KeyCache<R> {
    /// What the lookup found when it is fresh enough (`Some(None)`: no such key).
    pub(super) fn get(&self, key: &CacheKey) -> Option<Option<Arc<R>>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|c| c.at.elapsed() < CACHE_TTL)
            .map(|c| c.record.clone())
    }

    pub(super) fn put(&self, key: CacheKey, record: Option<Arc<R>>) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CACHE_MAX {
            entries.retain(|_, c| c.at.elapsed() < CACHE_TTL);
            if entries.len() >= CACHE_MAX {
                entries.clear();
            }
        }
        let at = Instant::now();
        entries.insert(key, Cached { at, record });
    }

    /// Drops every lookup of key `id`.
    pub(super) fn forget(&self, id: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|k, c| {
            !matches!(k, CacheKey::Id(i) if i == id)
                && c.record.as_ref().is_none_or(|r| r.id() != id)
        });
    }
}
