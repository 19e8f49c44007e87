//! What a lease's holder is told while its lease stands (the watch's events before `lost`),
//! decided from what each read of the lease found: no I/O here ([`super::watch`] reads and
//! waits). Each signal is given once per change:
//! - `expiring`: less than the slack is left and no heartbeat came since; a heartbeat that
//!   follows ends it (`renewed`);
//! - `degraded`: the lease could not be read (Redis unreachable, or no master known); it may
//!   still stand, but nothing can confirm or renew it; `recovered` when a read succeeds again;
//! - `contended`: how many wait for the name, once per change in the count and at most once a
//!   [`CONTENDED_EVERY`];
//! - `revocation_requested`: an admin asked the holder to let go by a deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::locks::{LeaseView, Revocation, Timestamp};

/// How often, at most, `contended` is told.
pub const CONTENDED_EVERY: Duration = Duration::from_secs(1);

/// One thing a holder is told before its lease ends (the end itself is
/// [`crate::locks::LeaseEnd`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    Expiring {
        remaining_ms: u64,
        valid_until: Timestamp,
    },
    Renewed {
        valid_until: Timestamp,
    },
    Degraded {
        /// When this instance first failed to read the lease (wall clock).
        since: Timestamp,
        /// The lease's expiry as last read: it holds until then at most.
        valid_until: Timestamp,
    },
    Recovered {
        valid_until: Timestamp,
    },
    Contended {
        waiters: u64,
    },
    RevocationRequested(Revocation),
}

impl Signal {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Expiring { .. } => "expiring",
            Self::Renewed { .. } => "renewed",
            Self::Degraded { .. } => "degraded",
            Self::Recovered { .. } => "recovered",
            Self::Contended { .. } => "contended",
            Self::RevocationRequested(_) => "revocation_requested",
        }
    }
}

/// A signal as a watch passes it on: of which member, for a multilease's watch (`None`: of
/// the lease watched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub member: Option<crate::locks::LockName>,
    pub signal: Signal,
}

/// What a watch has told so far, and so what the next read should tell.
#[derive(Debug)]
pub struct Signals {
    /// The slack asked for (`None`: a third of the lease's TTL); never more than half of it.
    slack: Option<Duration>,
    expiring: bool,
    degraded: Option<Timestamp>,
    valid_until: Timestamp,
    waiters_told: u64,
    /// A change in the count not told yet (held back by [`CONTENDED_EVERY`]).
    waiters_now: u64,
    contended_at: Option<Instant>,
    revocation: Option<Revocation>,
}

impl Signals {
    pub fn new(slack: Option<Duration>) -> Self {
        Self {
            slack,
            expiring: false,
            degraded: None,
            valid_until: Timestamp(0),
            waiters_told: 0,
            waiters_now: 0,
            contended_at: None,
            revocation: None,
        }
    }

    /// The revocation told, if any (a lease that then ends was revoked, unless released).
    pub fn revocation(&self) -> Option<&Revocation> {
        self.revocation.as_ref()
    }

    /// The slack for a lease of `ttl_ms`.
    fn slack_for(&self, ttl_ms: u64) -> Duration {
        let half = Duration::from_millis(ttl_ms / 2);
        self.slack
            .unwrap_or(Duration::from_millis(ttl_ms / 3))
            .min(half)
    }

    /// A read found the lease held (`view`) at `now`: what to tell, and when to read again
    /// at the latest (the expiry, the slack's start, a held-back `contended`).
    pub fn held(&mut self, view: &LeaseView, now: Instant) -> (Vec<Signal>, Instant) {
        let mut told = Vec::new();
        let valid_until = view.expires_at;
        if self.degraded.take().is_some() {
            told.push(Signal::Recovered { valid_until });
        }
        if let Some(revocation) = &view.revocation
            && self.revocation.as_ref() != Some(revocation)
        {
            self.revocation = Some(revocation.clone());
            told.push(Signal::RevocationRequested(revocation.clone()));
        }
        let remaining = Duration::from_millis(view.remaining_ms.unwrap_or(u64::MAX / 4));
        let slack = self.slack_for(view.ttl_ms);
        if self.expiring && valid_until > self.valid_until && remaining > slack {
            self.expiring = false;
            told.push(Signal::Renewed { valid_until });
        }
        if !self.expiring && remaining <= slack && view.remaining_ms.is_some() {
            self.expiring = true;
            told.push(Signal::Expiring {
                remaining_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                valid_until,
            });
        }
        self.valid_until = valid_until;
        let mut next = now + remaining + Duration::from_millis(1);
        if !self.expiring {
            next = next.min(now + remaining.saturating_sub(slack));
        }
        self.waiters_now = view.waiters.unwrap_or(0);
        if let Some(at) = self.contended(now, &mut told) {
            next = next.min(at);
        }
        (told, next.max(now + Duration::from_millis(5)))
    }

    /// Tells a change in the waiters' count now, or says when it may be told.
    fn contended(&mut self, now: Instant, told: &mut Vec<Signal>) -> Option<Instant> {
        if self.waiters_now == self.waiters_told {
            return None;
        }
        match self.contended_at {
            Some(at) if now < at + CONTENDED_EVERY => Some(at + CONTENDED_EVERY),
            _ => {
                self.waiters_told = self.waiters_now;
                self.contended_at = Some(now);
                told.push(Signal::Contended {
                    waiters: self.waiters_now,
                });
                None
            }
        }
    }

    /// A read failed because Redis could not be reached (at wall time `at`).
    pub fn unreachable(&mut self, at: Timestamp) -> Option<Signal> {
        if self.degraded.is_some() {
            return None;
        }
        self.degraded = Some(at);
        Some(Signal::Degraded {
            since: at,
            valid_until: self.valid_until,
        })
    }

    /// Whether `degraded` was told and not yet ended.
    pub fn is_degraded(&self) -> bool {
        self.degraded.is_some()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::locks::{FencingToken, LeaseId, LeaseKind, LeaseState, LockName};

    /// A held lease's view with `remaining_ms` of `ttl_ms` left at `now_ms` (also the RedLock
    /// watch's tests).
    pub(crate) fn view(remaining_ms: u64, ttl_ms: u64, now_ms: u64, waiters: u64) -> LeaseView {
        LeaseView {
            lease_id: LeaseId::parse("0190f0b2-0000-7000-8000-000000000000").expect("id"),
            lock: LockName::parse("jobs").expect("name"),
            state: LeaseState::Held,
            kind: LeaseKind::Reentrant,
            read_count: None,
            write_count: None,
            position: None,
            permits: None,
            holder: None,
            metadata: None,
            fencing_token: FencingToken(1),
            reentry_count: 1,
            ttl_ms,
            acquired_at: Timestamp(0),
            expires_at: Timestamp(now_ms + remaining_ms),
            ended_at: None,
            remaining_ms: Some(remaining_ms),
            revocation: None,
            waiters: Some(waiters),
        }
    }

    #[test]
    fn expiring_once_at_the_slack_and_renewed_after_a_late_heartbeat() {
        let mut signals = Signals::new(None);
        let now = Instant::now();
        let (told, next) = signals.held(&view(30_000, 30_000, 0, 0), now);
        assert!(told.is_empty());
        assert_eq!(next, now + Duration::from_secs(20), "the slack is a third");
        let (told, _) = signals.held(&view(9_000, 30_000, 21_000, 0), now);
        assert_eq!(
            told,
            vec![Signal::Expiring {
                remaining_ms: 9_000,
                valid_until: Timestamp(30_000)
            }]
        );
        let (told, _) = signals.held(&view(8_000, 30_000, 22_000, 0), now);
        assert!(told.is_empty(), "told once");
        let (told, _) = signals.held(&view(30_000, 30_000, 23_000, 0), now);
        assert_eq!(
            told,
            vec![Signal::Renewed {
                valid_until: Timestamp(53_000)
            }]
        );
    }

    #[test]
    fn the_slack_is_at_most_half_the_ttl() {
        let mut signals = Signals::new(Some(Duration::from_secs(60)));
        let (told, _) = signals.held(&view(15_001, 30_000, 0, 0), Instant::now());
        assert!(told.is_empty());
        let (told, _) = signals.held(&view(15_000, 30_000, 1, 0), Instant::now());
        assert_eq!(told.len(), 1);
    }

    #[test]
    fn degraded_once_then_recovered_on_the_next_read() {
        let mut signals = Signals::new(None);
        let now = Instant::now();
        signals.held(&view(30_000, 30_000, 0, 0), now);
        let told = signals.unreachable(Timestamp(5));
        assert_eq!(
            told,
            Some(Signal::Degraded {
                since: Timestamp(5),
                valid_until: Timestamp(30_000)
            })
        );
        assert_eq!(signals.unreachable(Timestamp(6)), None);
        let (told, _) = signals.held(&view(29_000, 30_000, 1_000, 0), now);
        assert_eq!(
            told,
            vec![Signal::Recovered {
                valid_until: Timestamp(30_000)
            }]
        );
    }

    #[test]
    fn contended_per_change_at_most_once_a_second() {
        let mut signals = Signals::new(None);
        let now = Instant::now();
        let (told, _) = signals.held(&view(30_000, 30_000, 0, 2), now);
        assert_eq!(told, vec![Signal::Contended { waiters: 2 }]);
        let (told, next) = signals.held(&view(30_000, 30_000, 0, 3), now);
        assert!(told.is_empty());
        assert_eq!(
            next,
            now + CONTENDED_EVERY,
            "held back until a second passed"
        );
        let later = now + CONTENDED_EVERY;
        let (told, _) = signals.held(&view(30_000, 30_000, 0, 3), later);
        assert_eq!(told, vec![Signal::Contended { waiters: 3 }]);
        let (told, _) = signals.held(&view(30_000, 30_000, 0, 3), later);
        assert!(told.is_empty(), "no change, nothing told");
    }
}
