//! In-process registry of requests waiting for a lock, woken by the shared subscriber.
//!
//! A waiter registers *before* its next attempt, so an unlock message that lands between a
//! failed attempt and the wait still wakes it (the missed wake-up other clients suffer). Waking
//! is per lock key; a subscriber reconnect wakes everyone, since messages sent while it was
//! away are lost.
//!
//! Lease watches (`GET .../watch`) register apart from waiters ([`Waiters::watch`]): every
//! wake-up of a lock also wakes its watches, but a wake-up meant for one waiter
//! ([`Waiters::wake_one`]) is never taken by a watch, and watches are not counted as waiting
//! requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Waiters {
    by_lock: Mutex<HashMap<Arc<str>, Slot>>,
    /// Lease watches, by lock key (never a fair waiter's own key). Locked after `by_lock`
    /// when both are.
    watches: Mutex<HashMap<Arc<str>, Slot>>,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    waiting: usize,
}

impl Waiters {
    /// Registers interest in `lock_key` until the returned guard drops.
    pub fn register(self: &Arc<Self>, lock_key: &str) -> Registration {
        let key: Arc<str> = Arc::from(lock_key);
        let mut map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = map.entry(key.clone()).or_insert_with(|| Slot {
            notify: Arc::new(Notify::new()),
            waiting: 0,
        });
        slot.waiting += 1;
        Registration {
            waiters: self.clone(),
            key,
            notify: slot.notify.clone(),
        }
    }

    /// Wakes one request waiting on `lock_key` (the longest registered): an exclusive lock
    /// freed can go to one waiter only, so waking all would only make the rest retry in vain
    /// (Redisson's waiters likewise wake one per process). If that waiter has gone, tokio hands
    /// the wake-up on to the next; if none waits now, the next to wait consumes it.
    pub fn wake_one(&self, lock_key: &str) {
        let map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get(lock_key) {
            slot.notify.notify_one();
        }
        self.wake_watches(lock_key);
    }

    /// Wakes every request waiting on `lock_key` to try again.
    pub fn wake(&self, lock_key: &str) {
        let map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get(lock_key) {
            slot.notify.notify_waiters();
        }
        self.wake_watches(lock_key);
    }

    /// Wakes every waiting request, and every watch (after a subscriber reconnect).
    pub fn wake_all(&self) {
        let map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in map.values() {
            slot.notify.notify_waiters();
        }
        let watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in watches.values() {
            slot.notify.notify_waiters();
        }
    }

    /// Registers a lease watch on `lock_key` until the returned guard drops: it wakes on every
    /// wake-up of the lock (one waiter's, all waiters', a fair waiter's own, a reconnect).
    pub fn watch(self: &Arc<Self>, lock_key: &str) -> WatchRegistration {
        let key: Arc<str> = Arc::from(lock_key);
        let mut map = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = map.entry(key.clone()).or_insert_with(|| Slot {
            notify: Arc::new(Notify::new()),
            waiting: 0,
        });
        slot.waiting += 1;
        WatchRegistration {
            waiters: self.clone(),
            key,
            notify: slot.notify.clone(),
        }
    }

    /// Wakes the watches of the lock `key` belongs to: a fair waiter's own key is
    /// `L}:<holder>` (see `LockKeys::waiter`), and lock names hold no braces.
    fn wake_watches(&self, key: &str) {
        let lock = key.split('}').next().unwrap_or(key);
        let map = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get(lock) {
            slot.notify.notify_waiters();
        }
    }

    fn unwatch(&self, key: &str) {
        let mut map = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get_mut(key) {
            slot.waiting -= 1;
            if slot.waiting == 0 {
                map.remove(key);
            }
        }
    }

    /// How many requests are waiting, over all locks.
    pub fn count(&self) -> usize {
        let map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|s| s.waiting).sum()
    }

    fn unregister(&self, key: &str) {
        let mut map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get_mut(key) {
            slot.waiting -= 1;
            if slot.waiting == 0 {
                map.remove(key);
            }
        }
    }
}

/// One waiting request's place in the registry.
#[derive(Debug)]
pub struct Registration {
    waiters: Arc<Waiters>,
    key: Arc<str>,
    notify: Arc<Notify>,
}

impl Registration {
    /// A future that completes at the next wake-up; create it before the attempt it follows.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.unregister(&self.key);
    }
}

/// One lease watch's place in the registry.
#[derive(Debug)]
pub struct WatchRegistration {
    waiters: Arc<Waiters>,
    key: Arc<str>,
    notify: Arc<Notify>,
}

impl WatchRegistration {
    /// A future that completes at the lock's next wake-up; enable it before the read it
    /// follows.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for WatchRegistration {
    fn drop(&mut self) {
        self.waiters.unwatch(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let waiters = Arc::new(Waiters::default());
        let reg = waiters.register("jobs");
        let notified = reg.notified();
        waiters.wake("jobs");
        tokio::time::timeout(std::time::Duration::from_secs(1), notified)
            .await
            .expect("the wake-up that came before the wait was delivered");
    }

    #[tokio::test]
    async fn wake_one_wakes_exactly_one_and_passes_it_on_when_that_one_left() {
        let waiters = Arc::new(Waiters::default());
        let (a, b) = (waiters.register("jobs"), waiters.register("jobs"));
        let mut first = Box::pin(a.notified());
        let mut second = Box::pin(b.notified());
        first.as_mut().enable();
        second.as_mut().enable();
        waiters.wake_one("jobs");
        // The first waiter was chosen but is gone: the wake-up moves on to the second.
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(1), second)
            .await
            .expect("the second waiter got the forwarded wake-up");
    }

    #[tokio::test]
    async fn watches_wake_with_the_lock_but_never_take_a_waiters_wake_up() {
        let waiters = Arc::new(Waiters::default());
        let watch = waiters.watch("jobs");
        let waiter = waiters.register("jobs");
        let mut watched = Box::pin(watch.notified());
        let mut waiting = Box::pin(waiter.notified());
        watched.as_mut().enable();
        waiting.as_mut().enable();
        waiters.wake_one("jobs");
        let second = std::time::Duration::from_secs(1);
        tokio::time::timeout(second, waiting)
            .await
            .expect("the waiter got the one wake-up");
        tokio::time::timeout(second, watched)
            .await
            .expect("the watch woke too");
        assert_eq!(waiters.count(), 1, "a watch is not a waiting request");
        // A fair waiter's own channel wakes the watches of its lock.
        let mut watched = Box::pin(watch.notified());
        watched.as_mut().enable();
        waiters.wake("jobs}:0190c5f0-0000-7000-8000-000000000000:1");
        tokio::time::timeout(second, watched)
            .await
            .expect("the watch woke on a fair waiter's channel");
        drop(watch);
        assert!(waiters.watches.lock().expect("lock").is_empty());
    }

    #[tokio::test]
    async fn registrations_are_counted_and_removed() {
        let waiters = Arc::new(Waiters::default());
        let a = waiters.register("a");
        let b = waiters.register("a");
        assert_eq!(waiters.count(), 2);
        drop(a);
        drop(b);
        assert_eq!(waiters.count(), 0);
        assert!(waiters.by_lock.lock().expect("lock").is_empty());
    }
}
