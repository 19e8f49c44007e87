//! How many RedLock requests wait for a name, followed while a RedLock holder is told
//! (`contended`). RedLock waiters are listed on the main Redis beside every other waiter of
//! the name ([`super::waitlist`]), and no RedLock node counts them; so a RedLock lease's watch
//! follows that list here: each change to it publishes on the lock's watch channel (which
//! wakes this follower, as it wakes any lease watch), and the follower counts the live
//! entries marked `redlock` again. No polling beyond the moment an entry would lapse unsaid
//! (its instance stopped without taking it off).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::waitlist::WaiterView;
use crate::locks::wakeups::Parking;
use crate::locks::{LeaseKind, LockError, LockName, Locks};

/// How long a count stands when no message comes and no entry lapses sooner.
const RECOUNT_EVERY: Duration = Duration::from_secs(30);
/// How long one count may take before this round gives it up (and tries again after
/// [`RETRY_AFTER_ERROR`]).
const READ_WITHIN: Duration = Duration::from_secs(2);
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

impl Locks {
    /// Follows how many RedLock requests wait for `name`, on every instance: the receiver
    /// sees each change (0 until the first count). The follower stops when the receiver is
    /// dropped or the service shuts down.
    pub fn follow_redlock_waiters(&self, name: &LockName) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        let locks = self.clone();
        let name = name.clone();
        tokio::spawn(async move { locks.count_redlock_waiters(&name, &tx).await });
        rx
    }

    async fn count_redlock_waiters(&self, name: &LockName, tx: &watch::Sender<u64>) {
        let waiters = &self.inner.waiters;
        // Registered before the first count, so a change right after it still wakes it.
        let registration = waiters.watch(self.inner.keys.lock(name).lock());
        let shutdown = self.inner.shutdown.clone();
        loop {
            let notified = registration.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let epoch = waiters.epoch(registration.key());
            let retry_at = match tokio::time::timeout(READ_WITHIN, self.redlock_waiters(name)).await
            {
                Ok(Ok((count, lapses_in))) => {
                    tx.send_if_modified(|told| std::mem::replace(told, count) != count);
                    Instant::now() + lapses_in.map_or(RECOUNT_EVERY, |d| d.min(RECOUNT_EVERY))
                }
                _ => Instant::now() + RETRY_AFTER_ERROR,
            };
            // As a lease watch parks (see `LeaseWatch::follow`): a message wakes it only if
            // this process listened since before the count; if not, listen and count again.
            let parking = tokio::select! {
                parking = waiters.park(registration.key(), epoch, retry_at) => parking,
                () = tx.closed() => return,
                () = shutdown.cancelled() => return,
            };
            let _reliance = match parking {
                Parking::Heard(reliance) => Some(reliance),
                Parking::Armed => continue,
                Parking::Unheard => None,
            };
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = tx.closed() => return,
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// How many live RedLock requests wait for `name`, and how soon the first of them lapses.
    async fn redlock_waiters(&self, name: &LockName) -> Result<(u64, Option<Duration>), LockError> {
        let entries: Vec<String> = redis::cmd("HVALS")
            .arg(self.waiting_key(name))
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(redlock_count(&entries, self.inner.conn.clock().now_ms()))
    }
}

/// Of a waiting list's `entries`, how many are RedLock requests still waiting at `now_ms`,
/// and how long until the first of them lapses.
fn redlock_count(entries: &[String], now_ms: u64) -> (u64, Option<Duration>) {
    let redlock = Some(LeaseKind::Redlock.as_str());
    let live: Vec<u64> = entries
        .iter()
        .filter_map(|json| serde_json::from_str::<WaiterView>(json).ok())
        .filter(|w| w.kind.as_deref() == redlock && w.until_ms > now_ms)
        .map(|w| w.until_ms)
        .collect();
    let lapses_in = live
        .iter()
        .min()
        .map(|until| Duration::from_millis(until - now_ms + 1));
    (u64::try_from(live.len()).unwrap_or(u64::MAX), lapses_in)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, until_ms: u64) -> String {
        format!(
            r#"{{"lease_id":"x","kind":"{kind}","since_ms":1,"instance":"h:1","until_ms":{until_ms}}}"#
        )
    }

    #[test]
    fn only_live_redlock_entries_count_and_the_first_lapse_is_when_to_count_again() {
        let entries = [
            entry("redlock", 5_000),
            entry("redlock", 3_000),
            entry("redlock", 900),
            entry("reentrant", 2_000),
            "not json".to_owned(),
        ];
        let (count, lapses_in) = redlock_count(&entries, 1_000);
        assert_eq!(
            count, 2,
            "the lapsed one and the main Redis's waiter do not count"
        );
        assert_eq!(lapses_in, Some(Duration::from_millis(2_001)));
        assert_eq!(redlock_count(&[], 1_000), (0, None));
    }
}
