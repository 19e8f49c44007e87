//! The arithmetic of RedLock, as antirez's reference implementation (redlock-rb) has it: a
//! majority of the nodes, and the validity left of a lease once the time its calls took and
//! an allowance for clock drift are taken off its TTL.

use std::time::Duration;

/// How many of `nodes` must grant: a majority (N/2 + 1).
pub fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The clock drift allowed for a lease of `ttl_ms`: 1 % of it, plus 2 ms (Redis's expiry
/// precision of 1 ms and 1 ms of least drift), as redlock-rb's `ClockDriftFactor = 0.01`.
pub fn drift_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 100 + 2
}

/// How long a lease of `ttl_ms`, granted by calls that took `elapsed`, may be relied on:
/// TTL − elapsed − drift, or `None` when nothing is left (the grant came too late to use).
pub fn validity(ttl_ms: u64, elapsed: Duration) -> Option<Duration> {
    let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let left = ttl_ms
        .checked_sub(elapsed_ms)?
        .checked_sub(drift_ms(ttl_ms))?;
    (left > 0).then(|| Duration::from_millis(left))
}

/// How long one node may take to answer one call of a lease of `ttl_ms`: small against the
/// TTL (the reference page suggests 5-50 ms for 10 s), so that a node that does not answer
/// does not eat the validity; a tenth of the TTL, within `[50 ms, redis_timeout]`.
pub fn node_timeout(ttl_ms: u64, redis_timeout: Duration) -> Duration {
    Duration::from_millis(ttl_ms / 10)
        .max(Duration::from_millis(50))
        .min(redis_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_of_an_odd_count() {
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(7), 4);
    }

    #[test]
    fn validity_is_ttl_less_elapsed_less_drift() {
        // 10 s: drift 102 ms.
        assert_eq!(drift_ms(10_000), 102);
        assert_eq!(
            validity(10_000, Duration::from_millis(8)),
            Some(Duration::from_millis(10_000 - 8 - 102))
        );
        assert_eq!(validity(1_000, Duration::from_millis(988)), None);
        assert_eq!(validity(1_000, Duration::from_millis(2_000)), None);
    }

    #[test]
    fn a_node_gets_a_tenth_of_the_ttl_within_bounds() {
        let second = Duration::from_secs(1);
        assert_eq!(node_timeout(10_000, second), second);
        assert_eq!(node_timeout(3_000, second), Duration::from_millis(300));
        assert_eq!(node_timeout(100, second), Duration::from_millis(50));
    }
}
