//! Counted slots held in this process (open event streams per caller, waiting requests per
//! lock): a slot is taken when a request starts and given back when its guard drops, however
//! the request ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Slots per key, each kind of slot in its own `Slots`.
#[derive(Debug, Default)]
pub struct Slots {
    held: Mutex<HashMap<String, u64>>,
}

/// One slot, given back on drop.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    key: String,
}

impl Slots {
    /// A slot of `key`, unless `cap` of them are out already.
    pub fn take(self: &Arc<Self>, key: &str, cap: u64) -> Option<Slot> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(key.to_owned()).or_default();
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: self.clone(),
            key: key.to_owned(),
        })
    }

    /// Slots of `key` out now.
    pub fn held(&self, key: &str) -> u64 {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(key).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_back_when_dropped() {
        let slots = Arc::new(Slots::default());
        let a = slots.take("k", 2).expect("first");
        let _b = slots.take("k", 2).expect("second");
        assert!(slots.take("k", 2).is_none());
        drop(a);
        assert_eq!(slots.held("k"), 1);
        assert!(slots.take("k", 2).is_some());
        assert!(slots.take("other", 1).is_some());
    }
}
