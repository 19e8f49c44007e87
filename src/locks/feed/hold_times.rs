//! The recent hold times of the names this instance was asked "why am I waiting?" about
//! (`ops::estimate`): each name's, read from its history at most once a [`FRESH`] interval,
//! in a cache with a cap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// How long a name's holds read from Redis serve this instance's answers.
pub const FRESH: Duration = Duration::from_secs(1);
/// Names whose holds this instance keeps at most (every per-client resource has a cap: past
/// it, the stale ones go, and if none is stale, all of them).
const MAX_NAMES: usize = 4096;

/// The recent holds of the names this instance was asked about, in ms, sorted.
#[derive(Default)]
pub struct HoldTimes {
    cache: Mutex<HashMap<String, Read>>,
}

/// A name's holds (ms, sorted), and when they were read.
type Read = (Instant, Arc<[u64]>);

/// One history entry, as far as a hold's length goes.
#[derive(Deserialize)]
struct Entry {
    r#type: String,
    kind: Option<String>,
    since_ms: Option<u64>,
    at_ms: Option<u64>,
}

impl Entry {
    /// How long the hold this entry ends lasted: a lock's lease that was released, expired or
    /// removed by an admin (not a semaphore's, a ticket's or a wait).
    fn hold_ms(&self) -> Option<u64> {
        let ended = matches!(
            self.r#type.as_str(),
            "released" | "expired" | "force_released"
        );
        if !ended || self.kind.as_deref() == Some("semaphore") {
            return None;
        }
        self.at_ms?.checked_sub(self.since_ms?)
    }
}

impl HoldTimes {
    /// The holds read for history key `key` less than [`FRESH`] ago.
    pub fn fresh(&self, key: &str) -> Option<Arc<[u64]>> {
        let cache = self.cache.lock().ok()?;
        let (at, holds) = cache.get(key)?;
        (at.elapsed() < FRESH).then(|| holds.clone())
    }

    /// Keeps `holds` (sorted) as history key `key`'s, read now.
    pub fn keep(&self, key: String, holds: Vec<u64>) -> Arc<[u64]> {
        let holds: Arc<[u64]> = holds.into();
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_NAMES {
                cache.retain(|_, (at, _)| at.elapsed() < FRESH);
                if cache.len() >= MAX_NAMES {
                    cache.clear();
                }
            }
            cache.insert(key, (Instant::now(), holds.clone()));
        }
        holds
    }
}

/// How long the hold history entry `json` ends lasted, in ms: a lock's lease that was
/// released, expired or removed by an admin (not a semaphore's, a ticket's or a wait).
pub fn hold_ms(json: &str) -> Option<u64> {
    serde_json::from_str::<Entry>(json).ok()?.hold_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_locks_ended_holds_count() {
        let entry = |json: &str| serde_json::from_str::<Entry>(json).expect("entry");
        let released = r#"{"type":"released","kind":"fair","since_ms":1000,"at_ms":1250}"#;
        assert_eq!(entry(released).hold_ms(), Some(250));
        let expired = r#"{"type":"expired","kind":"reentrant","since_ms":10,"at_ms":40}"#;
        assert_eq!(entry(expired).hold_ms(), Some(30));
        let waited = r#"{"type":"waited","kind":"fair","since_ms":1000,"at_ms":1250}"#;
        assert_eq!(entry(waited).hold_ms(), None);
        let permits = r#"{"type":"released","kind":"semaphore","since_ms":1,"at_ms":9}"#;
        assert_eq!(entry(permits).hold_ms(), None);
        let admin = r#"{"type":"force_released","holders":[],"at_ms":9}"#;
        assert_eq!(entry(admin).hold_ms(), None);
    }
}
