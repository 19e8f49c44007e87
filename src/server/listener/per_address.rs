//! Connections open per client address, held to a cap (loopback exempt unless asked): one
//! address cannot take every connection slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use super::*;

/// Connections open per address, held to a cap (loopback exempt unless asked).
pub(super) struct PerAddress {
    pub(super) cap: usize,
    pub(super) limit_loopback: bool,
    pub(super) open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address's count; given back on drop.
pub(super) struct AddressSlot {
    pub(super) per_address: Option<(Arc<PerAddress>, IpAddr)>,
}

impl PerAddress {
    pub(super) fn new(limits: &HttpLimits) -> Self {
        let cap = match limits.max_connections_per_address {
            0 => (limits.max_connections / 4).max(1),
            n => n,
        };
        Self {
            cap,
            limit_loopback: limits.limit_loopback,
            open: Mutex::default(),
        }
    }

    /// A place for one more connection from `ip`, or `None` when it has its cap open.
    pub(super) fn take(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        if ip.is_loopback() && !self.limit_loopback {
            return Some(AddressSlot { per_address: None });
        }
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            per_address: Some((self.clone(), ip)),
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let Some((per_address, ip)) = self.per_address.take() else {
            return;
        };
        let mut open = per_address
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}
