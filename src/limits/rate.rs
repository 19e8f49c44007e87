//! Request rates per caller (GCRA, the `governor` crate), counted on each instance. The key
//! is known only once the caller's credential checked out, so this runs where the caller is
//! resolved, not as an outer layer: a flood of made-up keys is counted against the address it
//! comes from instead of getting a fresh budget per key. Every caller of a tenant also counts
//! against the tenant's rate, so that keys minted by a tenant's admin share one budget.
//!
//! A request whose cost is known only once answered (a lease lookup that read the history)
//! pays what the caller's budget has left and owes the rest: the caller's next request is
//! refused (429) until the debt is paid, so an empty budget cannot make costly requests cheap.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Dashboard sign-in attempts per address: a burst of this many, then one per
/// [`SIGN_IN_EVERY`].
const SIGN_IN_BURST: u32 = 5;
const SIGN_IN_EVERY: Duration = Duration::from_secs(12);
/// How often idle callers' state is dropped.
const CLEANUP_EVERY: Duration = Duration::from_secs(60);

/// The limiters of one instance.
pub struct RateLimits {
    requests: Option<DefaultKeyedRateLimiter<String>>,
    /// The requests' burst (what one request may cost at most).
    burst: u32,
    /// Every caller of a tenant together (key: the tenant's name).
    tenants: Option<DefaultKeyedRateLimiter<String>>,
    /// What callers owe: requests' worth their answered requests cost beyond their budget.
    debts: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    sign_in: DefaultKeyedRateLimiter<IpAddr>,
}

fn keyed(per_second: u32, burst: u32) -> Option<DefaultKeyedRateLimiter<String>> {
    NonZeroU32::new(per_second).map(|rate| {
        let burst = NonZeroU32::new(burst.max(per_second)).unwrap_or(rate);
        DefaultKeyedRateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
    })
}

impl RateLimits {
    /// `per_second` requests per caller, with bursts up to `burst`; `per_second == 0`: none.
    /// No tenant rate (see [`Self::with_tenants`]).
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self::with_tenants(per_second, burst, 0, 0)
    }

    /// [`Self::new`], and `tenant_per_second` requests per tenant (its callers together),
    /// with bursts up to `tenant_burst`; 0: none.
    pub fn with_tenants(
        per_second: u32,
        burst: u32,
        tenant_per_second: u32,
        tenant_burst: u32,
    ) -> Self {
        let requests = keyed(per_second, burst);
        let sign_in = Quota::with_period(SIGN_IN_EVERY)
            .map(|q| q.allow_burst(NonZeroU32::new(SIGN_IN_BURST).unwrap_or(NonZeroU32::MIN)))
            .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN));
        Self {
            requests,
            burst: burst.max(per_second),
            tenants: keyed(tenant_per_second, tenant_burst),
            debts: std::sync::Mutex::default(),
            sign_in: DefaultKeyedRateLimiter::keyed(sign_in),
        }
    }

    /// Counts one request of `owner` (and its debt, first); `Err` with how long to wait when
    /// it is over its rate.
    pub fn check(&self, owner: &str) -> Result<(), Duration> {
        let Some(limiter) = &self.requests else {
            return Ok(());
        };
        let key = owner.to_owned();
        let owed = self.owed(owner);
        if owed > 0 {
            let n = NonZeroU32::new(owed.saturating_add(1).min(self.burst.max(1)))
                .unwrap_or(NonZeroU32::MIN);
            return match limiter.check_key_n(&key, n) {
                Ok(Ok(())) => {
                    self.settle(owner);
                    Ok(())
                }
                Ok(Err(not_until)) => Err(not_until.wait_time_from(DefaultClock::default().now())),
                Err(_) => Err(Duration::from_secs(1)),
            };
        }
        limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Counts one request of `tenant`'s callers together; `Err` when the tenant is over its
    /// rate.
    pub fn check_tenant(&self, tenant: &str) -> Result<(), Duration> {
        let Some(limiter) = &self.tenants else {
            return Ok(());
        };
        limiter
            .check_key(&tenant.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    fn owed(&self, owner: &str) -> u32 {
        self.debts
            .lock()
            .map(|d| d.get(owner).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    fn settle(&self, owner: &str) {
        if let Ok(mut debts) = self.debts.lock() {
            debts.remove(owner);
        }
    }

    /// Counts `n` more requests of `owner` at once (a request that costs Redis as much as
    /// `n` plain ones: a listing of `n` names); `n` beyond the burst counts as the burst.
    pub fn check_n(&self, owner: &str, n: u32) -> Result<(), Duration> {
        let Some(limiter) = &self.requests else {
            return Ok(());
        };
        let Some(n) = NonZeroU32::new(n) else {
            return Ok(());
        };
        let key = owner.to_owned();
        let checked = limiter.check_key_n(&key, n).or_else(|_| {
            // More than the burst: it costs the whole burst.
            let burst = NonZeroU32::new(self.burst).unwrap_or(NonZeroU32::MIN);
            limiter.check_key_n(&key, burst)
        });
        match checked {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(not_until.wait_time_from(DefaultClock::default().now())),
            Err(_) => Err(Duration::from_secs(1)),
        }
    }

    /// Takes `n` requests' worth from `owner`'s budget: the cost of a request already
    /// answered. What the budget does not have now is owed, and paid before the caller's next
    /// request counts (at most a burst's worth: a request never costs more than that).
    pub fn drain(&self, owner: &str, n: u32) {
        let Some(limiter) = &self.requests else {
            return;
        };
        let key = owner.to_owned();
        let Some(all) = NonZeroU32::new(n.min(self.burst.max(1))) else {
            return;
        };
        if matches!(limiter.check_key_n(&key, all), Ok(Ok(()))) {
            return;
        }
        if let Ok(mut debts) = self.debts.lock() {
            let owed = debts.entry(owner.to_owned()).or_default();
            *owed = owed.saturating_add(all.get()).min(self.burst.max(1));
        }
    }

    /// Counts one dashboard sign-in attempt from `addr` (before its token is checked).
    pub fn check_sign_in(&self, addr: IpAddr) -> Result<(), Duration> {
        self.sign_in
            .check_key(&addr)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Forgets callers that have been quiet long enough to have a full budget again, every
    /// minute until `shutdown`: memory follows the callers of the last minute.
    pub fn spawn_cleanup(self: Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(CLEANUP_EVERY);
            every.reset();
            loop {
                tokio::select! {
                    _ = every.tick() => {
                        for limiter in [&self.requests, &self.tenants].into_iter().flatten() {
                            limiter.retain_recent();
                            limiter.shrink_to_fit();
                        }
                        // A debt of a caller gone quiet for a minute is forgiven: its budget
                        // has refilled past it (a burst's worth at most) by then.
                        if let Ok(mut debts) = self.debts.lock() {
                            debts.clear();
                        }
                        self.sign_in.retain_recent();
                        self.sign_in.shrink_to_fit();
                    }
                    () = shutdown.cancelled() => return,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_over_its_rate_is_told_how_long_to_wait() {
        let limits = RateLimits::new(1, 2);
        assert!(limits.check("key:a").is_ok());
        assert!(limits.check("key:a").is_ok());
        let wait = limits.check("key:a").expect_err("over the burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            limits.check("key:b").is_ok(),
            "another caller has its own budget"
        );
        assert!(RateLimits::new(0, 0).check("key:a").is_ok());
    }

    #[test]
    fn a_cost_the_budget_cannot_pay_now_is_owed_and_paid_first() {
        let limits = RateLimits::new(1, 20);
        // The whole burst, then a lookup that cost 16 more: owed.
        for _ in 0..20 {
            assert!(limits.check("key:a").is_ok());
        }
        limits.drain("key:a", 16);
        assert_eq!(limits.owed("key:a"), 16);
        // The next request waits until the debt and itself are refilled: 17 s at 1/s.
        let wait = limits.check("key:a").expect_err("in debt");
        assert!(wait > Duration::from_secs(15), "{wait:?}");
        assert!(limits.check("key:b").is_ok(), "another caller owes nothing");
    }

    #[test]
    fn a_tenants_callers_share_its_rate() {
        let limits = RateLimits::with_tenants(100, 100, 1, 2);
        assert!(limits.check_tenant("acme").is_ok());
        assert!(limits.check_tenant("acme").is_ok());
        assert!(limits.check_tenant("acme").is_err());
        assert!(limits.check_tenant("other").is_ok());
    }
}
