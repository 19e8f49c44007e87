//! In-process registry of requests waiting for a lock ([`WaitRegistry`]), woken by the
//! shared subscriber. ("Waiters" elsewhere: the per-lock caps are `state.wait_slots`, the
//! lists every instance can read are `feed::waitlist`, the quota is `Quotas::waiters`.)
//!
//! A waiter registers *before* its next attempt, so an unlock message that lands between a
//! failed attempt and the wait still wakes it (the missed wake-up other clients suffer). Waking
//! is per lock key; a subscriber reconnect wakes everyone, since messages sent while it was
//! away are lost.
//!
//! The subscriber listens for unlock messages only while some request of this process waits
//! for one: every release publishes one (Redisson's waiters need it), and
//! a process that listened all the time would receive, and Redis would deliver to every
//! instance, one message per release of every lock even when nobody waits. A wait may rely
//! on a message only if the subscription was on, without a break, from before its last
//! attempt until it parks ([`WaitRegistry::epoch`], [`WaitRegistry::park`]); otherwise it arms the
//! subscription and tries again first. The subscription is dropped again once no request has
//! relied on it for a while, and it cannot be dropped while one does (`crate::redis::gate`).
//!
//! In Cluster mode there are no patterns to listen with (sharded pub/sub has none): each
//! waited-for lock's channels are subscribed on their own, with a gate per wake key
//! ([`crate::redis::ShardedGates`]) under the same rules.
//!
//! Lease watches (`GET .../watch`) register apart from waiters ([`WaitRegistry::watch`]): every
//! wake-up of a lock also wakes its watches, but a wake-up meant for one waiter
//! ([`WaitRegistry::wake_one`]) is never taken by a watch, and watches are not counted as waiting
//! requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::locks::layout::{KeySpace, Wakes};
use crate::redis::{Claim, Epoch, ShardedGates, SubscriptionGate};

/// How long a request waits at most for the subscription to be armed before it waits without
/// it (the subscriber is down: it retries on the holder's TTL then, as after any lost message).
const ARM_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub struct WaitRegistry {
    by_lock: Mutex<HashMap<Arc<str>, Slot>>,
    /// Lease watches, by lock key (never a fair waiter's own key). Locked after `by_lock`
    /// when both are.
    watches: Mutex<HashMap<Arc<str>, Slot>>,
    /// Whether the subscriber listens for unlock messages, and who relies on it.
    unlocks: Arc<SubscriptionGate>,
    /// Cluster mode: a subscription per waited-for key instead.
    sharded: Option<Arc<ShardedGates>>,
}

/// What a request saw of the subscription before an attempt (see [`WaitRegistry::park`]).
pub type WakeEpoch = Epoch;

/// What a refused request does next (see [`WaitRegistry::park`]).
#[derive(Debug)]
pub enum Parking {
    /// Park: an unlock message reaches it (the claim keeps the subscription until it drops).
    Heard(Claim),
    /// The subscription was armed just now: try again before parking (the refused attempt
    /// was made unheard).
    Armed,
    /// Not listening (the subscriber reconnects): park until the retry time alone, as after a
    /// lost message; the reconnect wakes everyone.
    Unheard,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    waiting: usize,
}

impl WaitRegistry {
    /// WaitRegistry that listen per lock on sharded channels (Cluster mode).
    pub fn sharded(gates: Arc<ShardedGates>) -> Self {
        Self {
            sharded: Some(gates),
            ..Self::default()
        }
    }

    /// The unlock-message subscription, for the subscriber (it arms, loses and drops it).
    pub fn unlocks(&self) -> &Arc<SubscriptionGate> {
        &self.unlocks
    }

    /// Whether unlock messages are listened for now (in Cluster mode: for some lock).
    pub fn hears_unlocks(&self) -> bool {
        match &self.sharded {
            Some(gates) => !gates.is_empty(),
            None => self.unlocks.is_armed(),
        }
    }

    /// The gate `wake_key`'s messages come through.
    fn gate(&self, wake_key: &str) -> Arc<SubscriptionGate> {
        match &self.sharded {
            Some(gates) => gates.gate(wake_key),
            None => self.unlocks.clone(),
        }
    }

    /// The subscription of `wake_key`'s messages as it is now: take it before an attempt,
    /// and hand it to [`WaitRegistry::park`] after the attempt was refused.
    pub fn epoch(&self, wake_key: &str) -> WakeEpoch {
        self.gate(wake_key).epoch()
    }

    /// For a request whose attempt (made after `epoch` was taken) was refused and that would
    /// wait until `deadline` for a message on `wake_key`: whether it may park on an unlock
    /// message (only if the subscription has been armed without a break since `epoch`: only
    /// then does an unlock after that attempt reach this process), or must try again first
    /// (it asked for the subscription, which is armed now), or waits unheard.
    pub async fn park(&self, wake_key: &str, epoch: WakeEpoch, deadline: Instant) -> Parking {
        let gate = self.gate(wake_key);
        if let Some(claim) = gate.claim_since(epoch) {
            return Parking::Heard(claim);
        }
        let until = deadline.min(Instant::now() + ARM_TIMEOUT);
        let armed = match &self.sharded {
            // Claimed while it is asked for, so it is not forgotten in between.
            Some(gates) => {
                let _claim = gate.claim();
                gates.arm(wake_key, until).await
            }
            None => self.unlocks.arm(until).await,
        };
        if armed {
            Parking::Armed
        } else {
            Parking::Unheard
        }
    }

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
    pub fn wake_watches(&self, key: &str) {
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
    waiters: Arc<WaitRegistry>,
    key: Arc<str>,
    notify: Arc<Notify>,
}

impl Registration {
    /// The key it waits on.
    pub fn key(&self) -> &str {
        &self.key
    }

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
    waiters: Arc<WaitRegistry>,
    key: Arc<str>,
    notify: Arc<Notify>,
}

impl WatchRegistration {
    /// The lock key it watches.
    pub fn key(&self) -> &str {
        &self.key
    }

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

/// The unlock messages as the process's subscriber hands them over: Redisson's (and ours)
/// on every lock of the deployment's key spaces, tenants' included (the patterns start with
/// the deployment's prefix, and every tenant's keys with it).
pub struct Wakeups {
    pub waiters: Arc<WaitRegistry>,
    /// The deployment's key space.
    pub keys: KeySpace,
}

impl Wakeups {
    /// The unlock patterns, held while a request of this process waits (and a while after).
    pub fn subscription(&self) -> crate::redis::Gated {
        crate::redis::Gated {
            gate: self.waiters.unlocks().clone(),
            topics: self.keys.wake_patterns(),
            pattern: true,
            what: "unlock messages",
        }
    }
}

impl crate::redis::Route for Wakeups {
    fn route(&self, channel: &str, _payload: &[u8]) -> bool {
        let Some((key, wakes)) = self.keys.wake_of_channel(channel) else {
            return false;
        };
        match wakes {
            Wakes::One => self.waiters.wake_one(key),
            Wakes::All => self.waiters.wake(key),
            Wakes::Watches => self.waiters.wake_watches(key),
        }
        true
    }

    /// Anything published while the subscription was away is lost: every waiter re-checks.
    fn connected(&self) {
        self.waiters.wake_all();
    }

    fn lost(&self) {
        self.waiters.wake_all();
    }

    fn lost_channel(&self, channel: &str) {
        if let Some(key) = self.keys.wake_key_of_channel(channel) {
            self.waiters.wake(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let waiters = Arc::new(WaitRegistry::default());
        let reg = waiters.register("jobs");
        let notified = reg.notified();
        waiters.wake("jobs");
        tokio::time::timeout(std::time::Duration::from_secs(1), notified)
            .await
            .expect("the wake-up that came before the wait was delivered");
    }

    #[tokio::test]
    async fn wake_one_wakes_exactly_one_and_passes_it_on_when_that_one_left() {
        let waiters = Arc::new(WaitRegistry::default());
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
        let waiters = Arc::new(WaitRegistry::default());
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
    async fn a_refused_request_parks_on_a_message_only_if_it_was_listened_for_since_its_attempt() {
        let waiters = Arc::new(WaitRegistry::default());
        let unlocks = waiters.unlocks().clone();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(
            matches!(
                waiters.park("", waiters.epoch(""), soon).await,
                Parking::Unheard
            ),
            "nobody listened"
        );
        // The request above is kept for the subscriber (a permit): it arms when it comes.
        let subscriber = tokio::spawn({
            let unlocks = unlocks.clone();
            async move {
                unlocks.requested().await;
                unlocks.set_armed();
            }
        });
        let unheard = waiters.epoch("");
        let later = Instant::now() + Duration::from_secs(5);
        assert!(matches!(
            waiters.park("", unheard, later).await,
            Parking::Armed
        ));
        subscriber.await.expect("the subscriber task");
        assert!(
            matches!(waiters.park("", unheard, soon).await, Parking::Armed),
            "an attempt made before the subscription was armed was not heard"
        );
        let heard = waiters.epoch("");
        let Parking::Heard(claim) = waiters.park("", heard, soon).await else {
            panic!("armed since the attempt: it parks on the message");
        };
        assert!(
            !unlocks.disarm_if_idle(Duration::ZERO),
            "not dropped while a wait relies on it"
        );
        drop(claim);
        unlocks.set_lost();
        unlocks.set_armed();
        assert!(
            matches!(waiters.park("", heard, soon).await, Parking::Armed),
            "the subscription broke since the attempt: a message may have been lost"
        );
        unlocks.set_lost();
        assert!(matches!(
            waiters.park("", waiters.epoch(""), soon).await,
            Parking::Unheard
        ));
    }

    #[tokio::test]
    async fn registrations_are_counted_and_removed() {
        let waiters = Arc::new(WaitRegistry::default());
        let a = waiters.register("a");
        let b = waiters.register("a");
        assert_eq!(waiters.count(), 2);
        drop(a);
        drop(b);
        assert_eq!(waiters.count(), 0);
        assert!(waiters.by_lock.lock().expect("lock").is_empty());
    }
}
