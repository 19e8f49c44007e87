//! Request rates per caller (GCRA, the `governor` crate), counted on each instance. The key
//! is known only once the caller's credential checked out, so this runs where the caller is
//! resolved, not as an outer layer: a flood of made-up keys is counted against the address it
//! comes from instead of getting a fresh budget per key.

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
    sign_in: DefaultKeyedRateLimiter<IpAddr>,
}

impl RateLimits {
    /// `per_second` requests per caller, with bursts up to `burst`; `per_second == 0`: none.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let requests = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst.max(per_second)).unwrap_or(rate);
            DefaultKeyedRateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        let sign_in = Quota::with_period(SIGN_IN_EVERY)
            .map(|q| q.allow_burst(NonZeroU32::new(SIGN_IN_BURST).unwrap_or(NonZeroU32::MIN)))
            .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN));
        Self {
            requests,
            burst: burst.max(per_second),
            sign_in: DefaultKeyedRateLimiter::keyed(sign_in),
        }
    }

    /// Counts one request of `owner`; `Err` with how long to wait when it is over its rate.
    pub fn check(&self, owner: &str) -> Result<(), Duration> {
        let Some(limiter) = &self.requests else {
            return Ok(());
        };
        limiter
            .check_key(&owner.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
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

    /// Takes up to `n` requests' worth from `owner`'s budget, as many as are left: the cost of
    /// a request already answered, which its caller's next requests pay for.
    pub fn drain(&self, owner: &str, n: u32) {
        let Some(limiter) = &self.requests else {
            return;
        };
        let key = owner.to_owned();
        if let Some(all) = NonZeroU32::new(n)
            && matches!(limiter.check_key_n(&key, all), Ok(Ok(())))
        {
            return;
        }
        for _ in 0..n {
            if limiter.check_key(&key).is_err() {
                return;
            }
        }
    }

    /// Counts one failed dashboard sign-in attempt from `addr`.
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
                        if let Some(limiter) = &self.requests {
                            limiter.retain_recent();
                            limiter.shrink_to_fit();
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
}
