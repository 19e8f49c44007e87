//! A subscription the shared subscriber holds only while someone needs it, and for a while
//! after (so that a need that comes and goes does not subscribe each time): the unlock
//! patterns while requests wait ([`crate::locks::wakeups`]), the other tenants' events pattern
//! while their streams are open (`crate::event_feed`). Every PUBLISH on the Redis is matched
//! against every pattern subscribed, so neither is held for nothing.
//!
//! Those who need it hold a [`Claim`]; the subscription is never dropped while one exists.
//! Every change of whether it is held bumps a generation, so a request can tell whether it
//! stayed held, without a break, since it looked ([`SubscriptionGate::claim_since`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Default)]
pub struct SubscriptionGate {
    state: Mutex<State>,
    /// Someone asks the subscriber to subscribe (a stored permit when it is busy).
    wanted: Notify,
    /// The subscription was confirmed.
    armed: Notify,
}

#[derive(Debug, Default)]
struct State {
    armed: bool,
    generation: u64,
    /// Claims held: the subscription is not dropped while there are any.
    claims: usize,
    /// Since when nobody claims it (armed with no claim yet: since it was armed).
    idle_since: Option<Instant>,
}

/// What [`SubscriptionGate::epoch`] saw: whether it was held, and in which generation.
#[derive(Debug, Clone, Copy)]
pub struct Epoch {
    armed: bool,
    generation: u64,
}

/// A claim on the subscription: it stays until this drops.
#[derive(Debug)]
pub struct Claim {
    gate: Arc<SubscriptionGate>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut state = self.gate.state();
        state.claims -= 1;
        if state.claims == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

impl SubscriptionGate {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A gate whose generations start at `generation`: a gate made in place of an earlier
    /// one (per channel, in Cluster mode) must not repeat a generation that gate had, or an
    /// epoch taken on the old one could pass for unbroken on the new.
    pub fn starting_at(generation: u64) -> Self {
        Self {
            state: Mutex::new(State {
                generation,
                ..State::default()
            }),
            ..Self::default()
        }
    }

    /// Whether nobody claims it and it is not held: it may be forgotten.
    pub fn is_unused(&self) -> bool {
        let state = self.state();
        state.claims == 0 && !state.armed
    }

    /// The subscription as it is now.
    pub fn epoch(&self) -> Epoch {
        let state = self.state();
        Epoch {
            armed: state.armed,
            generation: state.generation,
        }
    }

    /// A claim, if the subscription has been held without a break since `epoch`.
    pub fn claim_since(self: &Arc<Self>, epoch: Epoch) -> Option<Claim> {
        let mut state = self.state();
        if !(epoch.armed && state.armed && state.generation == epoch.generation) {
            return None;
        }
        state.claims += 1;
        Some(Claim { gate: self.clone() })
    }

    /// A claim, whether the subscription is held or not (then ask for it: [`Self::arm`]).
    pub fn claim(self: &Arc<Self>) -> Claim {
        self.state().claims += 1;
        Claim { gate: self.clone() }
    }

    /// Asks the subscriber to subscribe and waits until it has, or until `deadline` (false:
    /// not subscribed yet; the subscriber is reconnecting).
    pub async fn arm(&self, deadline: Instant) -> bool {
        let armed = self.armed.notified();
        tokio::pin!(armed);
        armed.as_mut().enable();
        if self.state().armed {
            return true;
        }
        self.wanted.notify_one();
        tokio::time::timeout_at(deadline, armed).await.is_ok() && self.state().armed
    }

    /// For the subscriber: completes when someone asked it to subscribe.
    pub async fn requested(&self) {
        self.wanted.notified().await;
    }

    /// For the subscriber: whether it holds the subscription.
    pub fn is_armed(&self) -> bool {
        self.state().armed
    }

    /// For the subscriber: whether a claim is held and the subscription is not (after a
    /// reconnect: subscribe again).
    pub fn is_wanted(&self) -> bool {
        let state = self.state();
        state.claims > 0 && !state.armed
    }

    /// For the subscriber: it holds the subscription now (confirmed).
    pub fn set_armed(&self) {
        {
            let mut state = self.state();
            if state.armed {
                return;
            }
            state.armed = true;
            state.generation += 1;
            state.idle_since = Some(Instant::now());
        }
        self.armed.notify_waiters();
    }

    /// For the subscriber: it no longer holds it (the connection was lost).
    pub fn set_lost(&self) {
        let mut state = self.state();
        if state.armed {
            state.armed = false;
            state.generation += 1;
        }
    }

    /// For the subscriber: drops the subscription (true: unsubscribe now) if it is held, no
    /// claim is, and none has been for `after`.
    pub fn disarm_if_idle(&self, after: Duration) -> bool {
        let mut state = self.state();
        let idle = state.claims == 0 && state.idle_since.is_none_or(|t| t.elapsed() >= after);
        if !(state.armed && idle) {
            return false;
        }
        state.armed = false;
        state.generation += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_since_an_epoch_needs_the_subscription_held_without_a_break() {
        let gate = Arc::new(SubscriptionGate::default());
        let before = gate.epoch();
        gate.set_armed();
        assert!(gate.claim_since(before).is_none(), "not held at the epoch");
        let held = gate.epoch();
        assert!(gate.claim_since(held).is_some());
        gate.set_lost();
        gate.set_armed();
        assert!(gate.claim_since(held).is_none(), "lost in between");
    }

    #[tokio::test]
    async fn it_is_kept_while_claimed_and_for_the_linger_after() {
        let gate = Arc::new(SubscriptionGate::default());
        assert!(!gate.disarm_if_idle(Duration::ZERO), "nothing to drop");
        let claim = gate.claim();
        assert!(
            gate.is_wanted(),
            "claimed, not held: the subscriber subscribes"
        );
        let linger = Duration::from_millis(100);
        let arming = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.arm(Instant::now() + Duration::from_secs(5)).await })
        };
        gate.requested().await;
        gate.set_armed();
        assert!(arming.await.expect("arming task"), "armed once confirmed");
        tokio::time::sleep(linger * 2).await;
        assert!(!gate.disarm_if_idle(linger), "claimed");
        drop(claim);
        assert!(!gate.disarm_if_idle(linger), "the last claim went just now");
        tokio::time::sleep(linger * 2).await;
        assert!(
            gate.disarm_if_idle(linger),
            "unclaimed for longer than the linger"
        );
        assert!(!gate.disarm_if_idle(linger), "dropped once");
        assert!(!gate.is_armed());
    }

    #[tokio::test]
    async fn arming_gives_up_at_its_deadline_when_nobody_answers() {
        let gate = SubscriptionGate::default();
        assert!(!gate.arm(Instant::now() + Duration::from_millis(50)).await);
    }
}
