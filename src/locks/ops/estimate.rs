//! "Why am I waiting?": how long a refused or queued request may still wait, from the name's
//! recent hold times (its history keeps each ended hold's `since_ms` and `at_ms`). The holds
//! are read from Redis at most once a second per name on this instance (a bounded cache), so
//! a busy try-lock loop or many waiters add one history read a second, not one per answer.
//!
//! The estimate: what the current hold has left, the median of what the recent holds that
//! lasted longer than it has lasted so far went on for (0 when none did: it is overdue), plus
//! the median hold for each request ahead in line. Best effort: `None` with fewer than
//! [`MIN_HOLDS`] holds to go by, or when the history cannot be read.

use std::sync::Arc;
use std::time::Duration;

use crate::locks::feed::hold_times::hold_ms;
use crate::locks::{LockName, Locks};

/// History entries read per name: the newest ones (waits and queue entries among them).
const ENTRIES_READ: usize = 64;
/// Fewer ended holds than this say too little to estimate from.
pub const MIN_HOLDS: usize = 3;

/// The estimate from `holds` (ms, sorted ascending), the current hold's age (`None`: nobody
/// holds now) and the requests ahead in line.
pub fn estimate(holds: &[u64], current: Option<Duration>, ahead: u64) -> Option<Duration> {
    if holds.len() < MIN_HOLDS {
        return None;
    }
    let median = holds[holds.len() / 2];
    let left = current.map_or(0, |age| {
        let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        let longer = &holds[holds.partition_point(|&d| d <= age)..];
        longer.get(longer.len() / 2).map_or(0, |d| d - age)
    });
    Some(Duration::from_millis(
        left.saturating_add(median.saturating_mul(ahead)),
    ))
}

impl Locks {
    /// How long a request may still wait for `name` (see the module): behind a hold of age
    /// `current`, with `ahead` requests before it in line.
    pub async fn estimated_wait(
        &self,
        name: &LockName,
        current: Option<Duration>,
        ahead: u64,
    ) -> Option<Duration> {
        let holds = self.recent_holds(name).await?;
        estimate(&holds, current, ahead)
    }

    /// `name`'s recent hold times (sorted), from this instance's cache while fresh.
    async fn recent_holds(&self, name: &LockName) -> Option<Arc<[u64]>> {
        let key = self.inner.keys.lock(name).history();
        if let Some(holds) = self.inner.hold_times.fresh(&key) {
            return Some(holds);
        }
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(&key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(ENTRIES_READ)
            .query_async(&mut self.inner.conn.clone())
            .await
            .ok()?;
        let mut holds: Vec<u64> = entries
            .iter()
            .filter_map(|(_, fields)| {
                let at = fields.iter().position(|f| f == "e")?;
                hold_ms(fields.get(at + 1)?)
            })
            .collect();
        holds.sort_unstable();
        Some(self.inner.hold_times.keep(key, holds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn too_few_holds_give_no_estimate() {
        assert_eq!(estimate(&[100, 200], Some(MS(10)), 0), None);
    }

    #[test]
    fn the_current_hold_is_given_what_longer_holds_went_on_for() {
        let holds = [100, 200, 300, 400, 500];
        // Held 250 ms: of the holds longer than that (300, 400, 500) the median is 400.
        assert_eq!(estimate(&holds, Some(MS(250)), 0), Some(MS(150)));
        // Held longer than any: overdue, it may end at any moment.
        assert_eq!(estimate(&holds, Some(MS(900)), 0), Some(MS(0)));
        // Just granted: the median hold.
        assert_eq!(estimate(&holds, Some(MS(0)), 0), Some(MS(300)));
    }

    #[test]
    fn each_request_ahead_adds_the_median_hold() {
        let holds = [100, 200, 300, 400, 500];
        assert_eq!(estimate(&holds, Some(MS(250)), 2), Some(MS(150 + 600)));
        // Nobody holds (the ticket is next once the head takes and ends its turn).
        assert_eq!(estimate(&holds, None, 1), Some(MS(300)));
    }
}
